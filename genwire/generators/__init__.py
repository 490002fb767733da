"""Generators: the base class, metadata, built-ins and plugin discovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genwire.lazy import lazy_exports

if TYPE_CHECKING:
    from genwire.generators.base import Generator, NoParams
    from genwire.generators.metadata import GeneratorMetadata, ResourceKind
    from genwire.generators.resources import Resources
    from genwire.generators.verdict import Verdict
    from genwire.providers.request_context import cached_row, cached_rows

__all__ = [
    "Generator",
    "GeneratorMetadata",
    "NoParams",
    "ResourceKind",
    "Resources",
    "Verdict",
    "cached_row",
    "cached_rows",
]

# Public name -> its module, imported on first use (PEP 562): importing one submodule of
# the package does not load the others.
_WHERE = {
    **dict.fromkeys(["Generator", "NoParams"], "genwire.generators.base"),
    **dict.fromkeys(["GeneratorMetadata", "ResourceKind"], "genwire.generators.metadata"),
    **dict.fromkeys(["Resources"], "genwire.generators.resources"),
    **dict.fromkeys(["Verdict"], "genwire.generators.verdict"),
    **dict.fromkeys(["cached_row", "cached_rows"], "genwire.providers.request_context"),
}


__getattr__ = lazy_exports(globals(), _WHERE)
