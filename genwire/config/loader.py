"""Load genwire.yaml: safe YAML with positions, per-scalar ${VAR} substitution, pydantic validation.

Every problem is reported as ``file:line:col key.path: message`` and all problems of a file
are collected before raising one ConfigError. The YAML reading itself (positions,
substitution, bounds) is ``config.yaml_source``; its names used by importers of this module
are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from genwire.config.messages import NOT_WRITTEN, describe, known_keys, shown, user_path
from genwire.config.schema import GenwireConfig
from genwire.config.yaml_source import Location, Path_, format_path, parse_yaml
from genwire.errors import ConfigError, printable

__all__ = [
    "MCP_MISSING",
    "LoadedConfig",
    "Location",
    "Path_",
    "SourceMap",
    "format_path",
    "load_config",
    "load_config_text",
    "mcp_installed",
    "parse_yaml",
    "read_text",
    "validate_data",
    "validation_problems",
]

MAX_FILE_BYTES = 8 * 1024 * 1024


class _Locating:
    """Messages and paths from where a config came from (see ``SourceMap``)."""

    source: str
    base_dir: Path
    locations: dict[Path_, Location]
    column_names: dict[int, str]  # for "columns[1] (question)"

    def where(self, path: Path_) -> str:
        """``file:line:col key.path`` for the deepest known prefix of ``path``; a path
        inside a column also names the column."""
        shown = format_path(path)
        if len(path) >= 3 and path[:2] == ("pipeline", "columns") and isinstance(path[2], int):
            name = self.column_names.get(path[2])
            if name:
                head = format_path(path[:3])
                shown = f"{head} ({printable(name)}){shown[len(head) :]}"
        return f"{self._position(path)} {shown}".strip()

    def _position(self, path: Path_) -> str:
        for end in range(len(path), -1, -1):
            loc = self.locations.get(path[:end])
            if loc is not None:
                return f"{printable(self.source)}:{loc.line}:{loc.column}"
        # Nothing located (a file that is empty, a list or a scalar): its start.
        return f"{printable(self.source)}:1:1" if self.locations else printable(self.source)

    def resolve_path(self, value: str) -> Path:
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else (self.base_dir / p)


@dataclass
class SourceMap(_Locating):
    """Where a config came from: its file, directory and the position of every key.
    Exists before the config validates, so validation errors are located with it."""

    source: str
    base_dir: Path
    locations: dict[Path_, Location] = field(default_factory=dict)
    column_names: dict[int, str] = field(default_factory=dict)


@dataclass
class LoadedConfig(_Locating):
    """A validated config plus where it came from."""

    config: GenwireConfig
    source: str
    base_dir: Path
    locations: dict[Path_, Location] = field(default_factory=dict)
    column_names: dict[int, str] = field(default_factory=dict)


def _column_names(data: dict[str, Any]) -> dict[int, str]:
    pipeline = data.get("pipeline")
    columns = pipeline.get("columns") if isinstance(pipeline, dict) else None
    if not isinstance(columns, list):
        return {}
    return {i: c["name"] for i, c in enumerate(columns) if isinstance(c, dict) and isinstance(c.get("name"), str)}


def validation_problems(
    exc: ValidationError, loaded: SourceMap, data: Any, model: type[BaseModel], prefix: Path_ = ()
) -> list[str]:
    """Each pydantic error as ``file:line:col key.path: sentence``; ``data`` is what was
    validated (as a ``model``) and ``prefix`` where in the file it sits."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = (*prefix, *(p for p in err["loc"] if p != "[key]"))
        stripped = _strip_union_tag(loc)
        path = user_path(err, stripped)
        written = _written_at(data, stripped[len(prefix) :])
        # the keys allowed beside an unknown one, for a "did you mean"
        known = known_keys(model, err["loc"][:-1]) if err["type"] == "extra_forbidden" else []
        problems.append(f"{loaded.where(path)}: {describe(err, path, written, known)}")
    return problems


def _written_at(data: Any, path: Path_) -> Any:
    """The value at ``path`` as the file wrote it (pydantic's error holds the value after
    StrictValues took it as its field takes it: 1e22 became 10000000000000000000000), or
    NOT_WRITTEN where the path leads nowhere."""
    for part in path:
        found = (isinstance(data, dict) and part in data) or (
            isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        )
        if not found:
            return NOT_WRITTEN
        data = data[part]
    return data


_UNION_TAGS = {"openai", "local", "jsonl", "csv", "parquet", "documents", "stdio", "http"}


def _strip_union_tag(loc: Path_) -> Path_:
    """pydantic puts the discriminator value into the loc of tagged unions; users never wrote it."""
    if len(loc) > 2 and loc[0] in ("providers", "datasets", "tools") and loc[2] in _UNION_TAGS:
        return (*loc[:2], *loc[3:])
    return loc


def _cross_reference_problems(loaded: LoadedConfig) -> list[str]:
    cfg = loaded.config
    problems = []
    known = ", ".join(sorted(cfg.providers)) or "none defined"
    for alias, model in cfg.models.items():
        if model.provider is not None and model.provider not in cfg.providers:
            problems.append(
                f"{loaded.where(('models', alias, 'provider'))}: unknown provider "
                f"{model.provider!r} (providers: {known})"
            )
        for i, endpoint in enumerate(model.endpoints or ()):
            where = loaded.where(("models", alias, "endpoints", i, "provider"))
            provider = cfg.providers.get(endpoint.provider)
            if provider is None:
                problems.append(f"{where}: unknown provider {endpoint.provider!r} (providers: {known})")
            elif provider.kind != "openai":
                problems.append(
                    f"{where}: provider {endpoint.provider!r} is kind {provider.kind}; the endpoints of a pool "
                    "are OpenAI-compatible providers (kind: openai)"
                )
    for name in sorted(set(cfg.models) & set(cfg.datasets)):
        problems.append(
            f"{loaded.where(('datasets', name))}: {name!r} names both a model and a dataset; "
            "names must be unique across models and datasets"
        )
    for name in sorted(set(cfg.tools) & (set(cfg.models) | set(cfg.datasets))):
        problems.append(
            f"{loaded.where(('tools', name))}: {name!r} names both a tool server and a model or dataset; "
            "names must be unique across models, datasets and tools"
        )
    if cfg.tools and not mcp_installed():
        problems.append(f"{loaded.where(('tools',))}: {MCP_MISSING}")
    return problems + _server_problems(loaded)


def _server_problems(loaded: LoadedConfig) -> list[str]:
    """A provider's ``server:`` names a server; a server's engine is installed (SPEC §23)."""
    cfg = loaded.config
    if not cfg.servers and not any(getattr(p, "server", None) for p in cfg.providers.values()):
        return []
    import difflib

    from genwire.config.servers import missing_engine

    problems = []
    for name, provider in cfg.providers.items():
        server = getattr(provider, "server", None)
        if server is not None and server not in cfg.servers:
            close = difflib.get_close_matches(server, list(cfg.servers), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(cfg.servers)) or "none defined under servers:"
            problems.append(
                f"{loaded.where(('providers', name, 'server'))}: unknown server {server!r}{hint} (servers: {known})"
            )
    for name, server_config in cfg.servers.items():
        missing = missing_engine(server_config)
        if missing is not None:
            problems.append(f"{loaded.where(('servers', name, 'kind'))}: {missing}")
    return problems


MCP_MISSING = "tool servers need the MCP SDK, which is not installed: pip install 'genwire[mcp]'"


def mcp_installed() -> bool:
    """Whether the ``mcp`` extra can be imported (found, not imported: validate stays fast)."""
    import importlib.util

    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def load_config_text(
    text: str, source: str = "<string>", base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> LoadedConfig:
    data, locations = parse_yaml(text, source, env)
    return validate_data(data, source, base_dir or Path.cwd(), locations)


def validate_data(
    data: Any, source: str, base_dir: Path, locations: dict[Path_, Location] | None = None
) -> LoadedConfig:
    """Validate already-parsed data (a YAML document or a dict built in Python)."""
    if not isinstance(data, dict):
        where = f"{source}:1:1" if locations is not None else source
        raise ConfigError(f"{where}: the top level must be a mapping with a pipeline: section, got {shown(data)}")
    source_map = SourceMap(source, base_dir, locations or {}, _column_names(data))
    try:
        config = GenwireConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, source_map, data, GenwireConfig)) from None
    loaded = LoadedConfig(config, source, base_dir, source_map.locations, source_map.column_names)
    problems = _cross_reference_problems(loaded)
    if problems:
        raise ConfigError(problems)
    if config.servers:  # replicas of a managed server: an endpoint pool (SPEC §23)
        from genwire.config.replicas import expand_replicas

        loaded.config = expand_replicas(config)
    return loaded


def read_text(path: str | os.PathLike[str]) -> str:
    """A YAML file's text, or a ConfigError naming the file (missing, too big, not UTF-8)."""
    file = Path(path)
    source = str(path)
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"{source}: file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory, not a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(f"{source}:{line}:{col}: not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Read and validate a genwire.yaml file."""
    data, locations = parse_yaml(read_text(path), str(path), env)
    # The directory as the user named it, not its symlinks resolved: a config reached through
    # a link (examples/x -> elsewhere) writes its outputs where the user looks for them, and
    # messages show that path. (Write-safety checks compare real paths themselves.)
    return validate_data(data, str(path), Path(os.path.abspath(path)).parent, locations)
