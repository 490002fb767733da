"""boot: parse, validate, discover plugins, wire. No network."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from genwire.config.loader import LoadedConfig, load_config, validate_data
from genwire.container.core import WiredPipeline
from genwire.container.graph import build_graph
from genwire.container.wiring import wire_columns
from genwire.generators.base import Generator
from genwire.generators.discovery import discover

C = TypeVar("C", bound=WiredPipeline)

Source = str | os.PathLike[str] | Mapping[str, Any] | LoadedConfig


def load_source(source: Source, *, env: Mapping[str, str] | None = None, base_dir: Path | None = None) -> LoadedConfig:
    if isinstance(source, LoadedConfig):
        return source
    if isinstance(source, Mapping):
        return validate_data(dict(source), "<dict>", base_dir or Path.cwd())
    return load_config(source, env=env)


def boot_container(
    source: Source,
    cls: type[C],
    *,
    generators: Iterable[type[Generator[Any]]] = (),
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> C:
    loaded = load_source(source, env=env, base_dir=base_dir)
    # Only the generators the columns name are imported (entry points resolved by name).
    found = discover(generators, names={column.generator for column in loaded.config.pipeline.columns})
    found.raise_for_problems()
    wirings = wire_columns(loaded, found.generators)
    return cls(loaded, wirings, build_graph(loaded, wirings))
