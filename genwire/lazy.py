"""Lazy public names for a package's ``__init__`` (PEP 562): importing one submodule of a
package, or the package itself, does not load the modules behind its other names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(namespace: dict[str, Any], where: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of the package whose globals are ``namespace``: a public
    name is imported from ``where[name]`` on first use, then kept as a plain attribute."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value  # the next lookup is a plain module attribute
        return value

    return __getattr__
