"""The genwire commands, one module per role (``cli.main`` registers them): each imports
click and the standard library at import and what it needs only when it runs."""
