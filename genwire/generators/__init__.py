"""Generators: the base class, metadata, built-ins and plugin discovery."""

from genwire.generators.base import Generator, NoParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.resources import Resources
from genwire.providers.request_context import cached_row, cached_rows

__all__ = ["Generator", "GeneratorMetadata", "NoParams", "ResourceKind", "Resources", "cached_row", "cached_rows"]
