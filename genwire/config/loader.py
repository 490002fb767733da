"""Load genwire.yaml: safe YAML with positions, per-scalar ${VAR} substitution, pydantic validation.

Every problem is reported as ``file:line:col key.path: message`` and all problems of a file
are collected before raising one ConfigError.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from genwire.config.messages import NOT_WRITTEN, describe, known_keys, shown, user_path
from genwire.config.schema import GenwireConfig
from genwire.config.strict import Substituted
from genwire.errors import ConfigError, printable

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_NODES = 200_000  # bounds alias expansion ("billion laughs") and giant files alike
MAX_DEPTH = 64

Path_ = tuple[str | int, ...]

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]  # CSafeLoader is chosen at run time
    """No implicit resolvers: every plain scalar composes as text, and ``_Builder`` types
    it by YAML 1.2 core rules (YAML 1.1 would read ``NO`` and ``yes`` as booleans)."""

    yaml_implicit_resolvers: dict[str, Any] = {}


_ENV_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class Location:
    line: int  # 1-based
    column: int  # 1-based


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


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + printable(str(part))
    return out


class _Builder:
    """Turns a composed YAML node tree into plain Python data, recording positions."""

    def __init__(self, source: str, env: Mapping[str, str] | None) -> None:
        self.source = source
        self.env = env  # None: no ${VAR} substitution (files of other tools keep their text)
        self.locations: dict[Path_, Location] = {}
        self.problems: list[str] = []
        self.nodes = 0

    def at(self, node: yaml.Node) -> str:
        return f"{self.source}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"

    def build(self, node: yaml.Node, path: Path_, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ConfigError(
                f"{self.at(node)} {format_path(path)}: document expands to more than "
                f"{MAX_NODES:,} values (YAML aliases?); refusing to load it"
            )
        if depth > MAX_DEPTH:
            raise ConfigError(f"{self.at(node)} {format_path(path)}: nesting deeper than {MAX_DEPTH}")
        self.locations.setdefault(path, Location(node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or (
                isinstance(key_node, yaml.ScalarNode) and key_node.value == "<<" and not key_node.style
            ):
                self.problems.append(f"{self.at(key_node)} {format_path(path)}: merge keys (<<) are not supported")
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(f"{self.at(key_node)} {format_path(path)}: keys must be plain strings")
                continue
            key = str(key_node.value)
            child = (*path, key)
            if key in out:
                self.problems.append(f"{self.at(key_node)} {format_path(child)}: duplicate key {key!r}")
                continue
            self.locations[child] = Location(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = self.build(value_node, child, depth + 1)
        return out

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        text = str(node.value)
        tag = node.tag.removeprefix("tag:yaml.org,2002:")
        plain = isinstance(node, yaml.ScalarNode) and not node.style
        if tag == "str":
            value = core_scalar(text) if plain else text
        elif tag in _TYPED_TAGS:
            value = core_scalar(text)
            if not _TYPED_TAGS[tag](value):
                # The value is not repeated: it may be a secret given the wrong tag.
                self.problems.append(
                    f"{self.at(node)} {format_path(path)}: the value tagged !!{tag} is not a valid {tag}; "
                    "remove the tag (plain YAML values need none)"
                )
                return None
            if tag == "float":
                value = float(value)
        else:
            shown = f"!!{tag}" if node.tag.startswith("tag:yaml.org,2002:") else node.tag
            self.problems.append(
                f"{self.at(node)} {format_path(path)}: tag {shown} is not supported; remove it "
                "(values are plain text, numbers, true/false or null)"
            )
            return None
        if isinstance(value, _TooLong):
            self.problems.append(
                f"{self.at(node)} {format_path(path)}: a number with {value.digits:,} digits; "
                f"the limit is {MAX_DIGITS} digits"
            )
            return None
        if isinstance(value, str) and "$" in value and self.env is not None:
            return self._substitute(value, node, path, self.env)
        return value

    def _substitute(self, text: str, node: yaml.Node, path: Path_, env: Mapping[str, str]) -> Substituted:
        def repl(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if default is not None and "${" in default:
                # ${A:-${B}} would send the literal text "${B}" (e.g. as an API key).
                self.problems.append(
                    f"{self.at(node)} {format_path(path)}: a default inside ${{{name}:-...}} cannot hold another "
                    "${...}; give a plain default, or set the variable"
                )
                return ""
            if name in env:
                return env[name]
            if default is not None:
                return default
            self.problems.append(
                f"{self.at(node)} {format_path(path)}: environment variable {name} is not set "
                f"(set it, or write ${{{name}:-default}})"
            )
            return ""

        done = _ENV_RE.sub(repl, text)
        scalar = core_scalar(done)
        return Substituted(done, done if isinstance(scalar, _TooLong) else scalar)


MAX_DIGITS = 100  # a longer number is a mistake (and Python refuses > 4,300-digit ints)
_INT = re.compile(r"[-+]?[0-9]+")
_OCT = re.compile(r"0o[0-7]+")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_NAN = re.compile(r"\.(nan|NaN|NAN)")


@dataclass(frozen=True)
class _TooLong:
    digits: int


def core_scalar(text: str) -> Any:
    """A plain scalar by the YAML 1.2 core schema: only true/false are booleans."""
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if len(text) > MAX_DIGITS and (_INT.fullmatch(text) or _FLOAT.fullmatch(text)):
        return _TooLong(len(text))
    if _INT.fullmatch(text):
        return int(text)
    if _OCT.fullmatch(text):
        return int(text[2:], 8)
    if _HEX.fullmatch(text):
        return int(text[2:], 16)
    if _FLOAT.fullmatch(text):
        return float(text)
    if _INF.fullmatch(text):
        return float("-inf") if text.startswith("-") else float("inf")
    if _NAN.fullmatch(text):
        return float("nan")
    return text


_TYPED_TAGS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: type(v) is int,
    "float": lambda v: type(v) in (int, float),
    "bool": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _yaml_syntax_error(source: str, exc: yaml.YAMLError) -> ConfigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or _first_line(exc)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    return ConfigError(f"{where}: invalid YAML: {problem}")


def parse_yaml(
    text: str,
    source: str,
    env: Mapping[str, str] | None = None,
    *,
    substitute: bool = True,
    needs: str = "a pipeline: section",
) -> tuple[Any, dict[Path_, Location]]:
    """Parse YAML safely into plain data plus a map from key path to position.

    ``substitute=False`` keeps ``${VAR}`` as written (files genwire reads but does not
    own, such as Data Designer's); ``needs`` says what an empty file lacks."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise _yaml_syntax_error(source, exc) from None
    except RecursionError:
        raise ConfigError(f"{source}: nesting too deep to parse") from None
    if node is None:
        raise ConfigError(f"{source}:1:1: the file is empty; it needs at least {needs}")
    builder = _Builder(source, None if not substitute else os.environ if env is None else env)
    try:
        data = builder.build(node, ())
    except RecursionError:
        raise ConfigError(f"{source}: nesting too deep to parse") from None
    if builder.problems:
        raise ConfigError(builder.problems)
    return data, builder.locations


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
