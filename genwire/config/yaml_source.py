"""genwire's YAML reader: safe YAML 1.2 (no implicit typing: ``NO`` stays text), each
plain scalar typed by the core rules, per-scalar ``${VAR}`` substitution, bounds on size
and nesting, and the position of every key (``parse_yaml``). ``config.loader`` validates
what it returns; Data Designer's files are read with it too."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from genwire.config.strict import Substituted
from genwire.errors import ConfigError, printable

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
