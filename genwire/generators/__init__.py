"""Generators: the base class, metadata, built-ins and plugin discovery."""

from genwire.generators.base import Generator, NoParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.resources import Resources

__all__ = ["Generator", "GeneratorMetadata", "NoParams", "ResourceKind", "Resources"]
