"""genwire.engine."""
