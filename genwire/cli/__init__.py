"""genwire.cli."""
