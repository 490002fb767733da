"""genwire.generators.builtin."""
