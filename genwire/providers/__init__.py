"""genwire.providers."""
