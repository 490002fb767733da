"""genwire's version, in a module of its own at the bottom of the house: code that names
the version (traces, the report page, ``--version``) imports it without importing the
package's public front door (``genwire/__init__.py``), which names the layers above."""

__version__ = "0.1.0"
