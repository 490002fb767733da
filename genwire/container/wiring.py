"""Resolve each column's slot bindings against the generators' declarations.

Every problem of every column is collected and raised together as one WiringError, before
any provider exists and long before any network call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from genwire.config.loader import LoadedConfig, format_path
from genwire.config.messages import describe, did_you_mean, known_keys
from genwire.config.schema import TEMPLATE_NAMES, ColumnConfig
from genwire.errors import WiringError, exception_text
from genwire.generators.base import Generator
from genwire.generators.findings import Finding, Severity
from genwire.generators.metadata import ResourceKind, model_resource_kind

BindingSource = Literal["column", "defaults"]  # where a slot's binding was written
_DEFAULT_FIELD = {
    ResourceKind.CHAT_MODEL: "chat_model",
    ResourceKind.EMBEDDING_MODEL: "embedding_model",
    ResourceKind.DATASET: "dataset",
    ResourceKind.MODEL_REGISTRY: "model_registry",
    ResourceKind.TOOLS: "tools",
}
_NOT_MODELS = (ResourceKind.DATASET, ResourceKind.TOOLS)  # what a model registry never serves
BUILT_IN = "genwire.generators.builtin."  # the built-in generators' modules


@dataclass(frozen=True)
class SlotWiring:
    slot: str
    kind: ResourceKind
    resources: tuple[str, ...]  # one name, or the registry's aliases
    source: BindingSource


@dataclass
class ColumnWiring:
    index: int
    name: str
    generator_name: str
    generator_cls: type[Generator[Any]]
    params: BaseModel
    slots: dict[str, SlotWiring] = field(default_factory=dict)
    reads: set[str] = field(default_factory=set)  # "col" or "col.field"
    dataset_columns: dict[str, set[str]] = field(default_factory=dict)  # slot -> needed columns
    # The static check's warnings and notes about this column's generator (SPEC §15).
    source_findings: list[Finding] = field(default_factory=list)


def resource_kinds(loaded: LoadedConfig) -> dict[str, ResourceKind]:
    cfg = loaded.config
    kinds = {alias: model_resource_kind(m.kind) for alias, m in cfg.models.items()}
    kinds.update({name: ResourceKind.DATASET for name in cfg.datasets})
    kinds.update({name: ResourceKind.TOOLS for name in cfg.tools})
    return kinds


def _suggest(name: str, candidates: list[str]) -> str:
    return _suggest_cached(name, tuple(candidates))


@functools.lru_cache(maxsize=4096)  # a generated config repeats the same typo thousands of times
def _suggest_cached(name: str, candidates: tuple[str, ...]) -> str:
    return did_you_mean(name, candidates)


def _user_path(loc: tuple[str | int, ...], data: Any, *, missing: bool) -> tuple[str | int, ...]:
    """The part of a params error's location that the user wrote: pydantic adds union
    tags and model names (``params.uniform.low``) that are not keys of the YAML."""
    path: list[str | int] = []
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        in_mapping = isinstance(data, dict) and part in data
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if in_mapping or in_list:
            path.append(part)
            data = data[part]
        elif missing and last and isinstance(part, str) and isinstance(data, dict):
            path.append(part)  # a missing key: name it, under the mapping that lacks it
    return tuple(path)


def _names_of_kind(kinds: Mapping[str, ResourceKind], kind: ResourceKind) -> list[str]:
    if kind is ResourceKind.MODEL_REGISTRY:
        return sorted(n for n, k in kinds.items() if k not in _NOT_MODELS)
    return sorted(n for n, k in kinds.items() if k is kind)


def _jinja_hint(name: str) -> str:
    # ``{{ namespace }}`` reads as a column (see template_variables); say why it is not Jinja's.
    if name not in TEMPLATE_NAMES:
        return ""
    return f"; {name!r} is a Jinja name, and templates use Jinja's globals only as calls (range(3), namespace(n=0))"


class _Wirer:
    def __init__(self, loaded: LoadedConfig, generators: Mapping[str, type[Generator[Any]]]) -> None:
        self.loaded = loaded
        self.generators = generators
        self.kinds = resource_kinds(loaded)
        self.problems: list[str] = []

    def problem(self, path: tuple[str | int, ...], message: str) -> None:
        self.problems.append(f"{self.loaded.where(path)}: {message}")

    def check_defaults(self) -> None:
        defaults = self.loaded.config.defaults
        for kind, attr in _DEFAULT_FIELD.items():
            value = getattr(defaults, attr)
            if value is None:
                continue
            names = [value] if isinstance(value, str) else list(value)
            for name in names:
                if name == "*" and kind is ResourceKind.MODEL_REGISTRY:
                    continue
                self.check_name(("defaults", attr), name, kind, f"defaults.{attr}")

    def check_name(self, path: tuple[str | int, ...], name: str, kind: ResourceKind, who: str) -> bool:
        actual = self.kinds.get(name)
        if actual is None:
            known = _names_of_kind(self.kinds, kind)
            self.problem(
                path,
                f"{who}: unknown resource {name!r}{_suggest(name, list(self.kinds))}; "
                f"{kind.value} resources defined: {', '.join(known) or 'none'}",
            )
            return False
        wanted_ok = actual is kind or (kind is ResourceKind.MODEL_REGISTRY and actual not in _NOT_MODELS)
        if not wanted_ok:
            fits = _names_of_kind(self.kinds, kind)
            self.problem(
                path,
                f"{who} needs a {kind.value}, but {name!r} is a {actual.value}; "
                f"bind one of: {', '.join(fits) or f'(no {kind.value} defined)'}",
            )
            return False
        return True

    def wire_column(self, index: int, column: ColumnConfig) -> ColumnWiring | None:
        base: tuple[str | int, ...] = ("pipeline", "columns", index)
        cls = self.generators.get(column.generator)
        if cls is None:
            self.problem(
                (*base, "generator"),
                f"column {column.name!r}: unknown generator {column.generator!r}"
                f"{_suggest(column.generator, list(self.generators))}; "
                "run `genwire plugins` to list the installed ones",
            )
            return None
        gen = cls.metadata.name
        try:
            params = cls.params_model.model_validate(column.params)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                loc = (*base, "params", *_user_path(err["loc"], column.params, missing=err["type"] == "missing"))
                msg = (
                    f"unknown param {err['loc'][-1]!r}"
                    f"{_suggest(str(err['loc'][-1]), known_keys(cls.params_model, err['loc'][:-1]))}"
                    if err["type"] == "extra_forbidden"
                    else describe(err, loc)
                )
                self.problem(loc, f"column {column.name!r} (generator {gen!r}): {msg}")
            params = None
        wiring = ColumnWiring(index, column.name, gen, cls, params) if params is not None else None
        declared = cls.metadata.required_resources
        for slot in column.resources:
            if slot not in declared:
                self.problem(
                    (*base, "resources", slot),
                    f"column {column.name!r} binds slot {slot!r}, but generator {gen!r} does not "
                    f"declare it (declared slots: {', '.join(declared) or 'none'}); remove the binding",
                )
        for slot, kind in declared.items():
            resolved = self.resolve_slot(base, column, gen, slot, kind)
            if resolved is not None and wiring is not None:
                wiring.slots[slot] = resolved
        return wiring

    def resolve_slot(
        self, base: tuple[str | int, ...], column: ColumnConfig, gen: str, slot: str, kind: ResourceKind
    ) -> SlotWiring | None:
        who = f"column {column.name!r} (generator {gen!r}) slot {slot!r}"
        raw: Any = column.resources.get(slot)
        source: BindingSource = "column"
        path = (*base, "resources", slot)
        if raw is None:
            raw = getattr(self.loaded.config.defaults, _DEFAULT_FIELD[kind])
            source, path = "defaults", (*base, "resources")
        if raw is None:
            fits = _names_of_kind(self.kinds, kind)
            self.problem(
                path,
                f"{who} ({kind.value}) is not bound; add `resources: {{{slot}: <name>}}` to the column "
                f"or set defaults.{_DEFAULT_FIELD[kind]} (available: {', '.join(fits) or 'none'})",
            )
            return None
        if kind is ResourceKind.MODEL_REGISTRY:
            names = self.registry_names(raw)
        elif isinstance(raw, list):
            self.problem(path, f"{who} ({kind.value}) takes one resource name, not a list")
            return None
        else:
            names = [raw]
        ok = all([self.check_name(path, n, kind, who) for n in names])
        return SlotWiring(slot, kind, tuple(names), source) if ok else None

    def registry_names(self, raw: Any) -> list[str]:
        if raw == "*" or raw == ["*"]:
            return _names_of_kind(self.kinds, ResourceKind.MODEL_REGISTRY)
        return [raw] if isinstance(raw, str) else list(raw)

    def check_reads(self, wirings: list[ColumnWiring]) -> None:
        columns = self.loaded.config.pipeline.columns
        position = {c.name: i for i, c in enumerate(columns)}
        gates = {w.name for w in wirings if w.generator_cls.metadata.gate}
        for w in wirings:
            for ref in sorted(w.reads):
                root = ref.split(".", 1)[0]
                where = position.get(root)
                path: tuple[str | int, ...] = ("pipeline", "columns", w.index, "params")
                if w.name in gates:  # a gate's expression: located at the param that names the column
                    path = (*path, *_param_reading(columns[w.index].params, root))
                if root in gates and where is not None and where < w.index:
                    self.problem(
                        path,
                        f"column {w.name!r} reads {root!r}, a gate column: a gate's verdict is not a value "
                        "later columns can read (a row that reaches them passed it)",
                    )
                elif where is None:
                    self.problem(
                        path,
                        f"column {w.name!r} reads {root!r}, which is not a column{_suggest(root, list(position))}"
                        + _jinja_hint(root),
                    )
                elif where >= w.index:
                    self.problem(
                        path,
                        f"column {w.name!r} reads {root!r}, which is generated "
                        f"{'by the column itself' if where == w.index else 'later'}; "
                        "a column may only read earlier columns (move it below)",
                    )


def _param_reading(params: Mapping[str, Any], root: str) -> tuple[str, ...]:
    """The param whose text names column ``root`` (a template, an expression), to locate
    an error there; () when no single text param does."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(root)}(?!\w)")
    keys = [k for k, v in params.items() if isinstance(v, str) and pattern.search(v)]
    return (keys[0],) if len(keys) == 1 else ()


def wire_columns(loaded: LoadedConfig, generators: Mapping[str, type[Generator[Any]]]) -> list[ColumnWiring]:
    """Resolve every column, or raise one WiringError listing every problem."""
    wirer = _Wirer(loaded, generators)
    wirer.check_defaults()
    wirings = []
    for index, column in enumerate(loaded.config.pipeline.columns):
        wiring = wirer.wire_column(index, column)
        if wiring is None:
            continue
        try:
            wiring.reads = set(wiring.generator_cls.reads(wiring.params))
            wiring.dataset_columns = {k: set(v) for k, v in wiring.generator_cls.dataset_columns(wiring.params).items()}
        except Exception as exc:  # plugin code: report, never crash
            wirer.problem(
                ("pipeline", "columns", index),
                f"column {column.name!r}: generator {wiring.generator_name!r} failed to describe "
                f"its inputs: {exception_text(exc)}",
            )
        wirings.append(wiring)
    wirer.check_reads(wirings)
    findings = check_sources(loaded, generators, wirer.problems)
    check_tool_names(loaded, wirings, wirer.problems)
    for wiring in wirings:
        wiring.source_findings = [f for f in findings if f.generator == wiring.generator_name]
    if wirer.problems:
        raise WiringError(wirer.problems)
    return wirings


def check_tool_names(loaded: LoadedConfig, wirings: list[ColumnWiring], problems: list[str]) -> None:
    """A literal tool name a generator calls through a tools slot must be in the bound
    server's ``allow`` (SPEC §18): located in the plugin's source, like an undeclared slot."""
    tools = loaded.config.tools
    if not tools:
        return
    from genwire.generators.tool_names import literal_tool_calls

    for w in wirings:
        bound = {s.slot: s.resources[0] for s in w.slots.values() if s.kind is ResourceKind.TOOLS}
        for call in literal_tool_calls(w.generator_cls) if bound else ():
            server = bound.get(call.slot)
            allow = tools[server].allow if server is not None else None
            if allow is not None and call.tool not in allow:
                problems.append(
                    f"{call.file}:{call.line}:{call.col}: generator {w.generator_name!r} (column {w.name!r}) "
                    f"calls tool {call.tool!r} of tool server {server!r}, which is not in tools.{server}.allow "
                    f"(allowed: {', '.join(allow) or 'none'}); add it there if the generator may call it"
                )


def check_sources(
    loaded: LoadedConfig, generators: Mapping[str, type[Generator[Any]]], problems: list[str]
) -> list[Finding]:
    """The static check of every plugin generator the config uses: undeclared slot uses
    join ``problems`` (located in the plugin's source); warnings and notes are returned.
    genwire's built-in generators are not read: genwire's own tests hold them to no
    findings (tests/test_source_check.py), and a config of built-ins alone never loads the
    checker (start-up)."""
    columns: dict[type[Generator[Any]], list[str]] = {}
    for column in loaded.config.pipeline.columns:
        cls = generators.get(column.generator)
        if cls is not None and not cls.__module__.startswith(BUILT_IN):
            columns.setdefault(cls, []).append(column.name)
    if not columns:
        return []
    from genwire.generators.source_check import check_generators

    names = {cls.metadata.name: ", ".join(repr(c) for c in cols) for cls, cols in columns.items()}
    findings = check_generators(columns)
    for f in findings:
        if f.severity is Severity.ERROR:
            problems.append(f"{f.where}: generator {f.generator!r} (column {names[f.generator]}): {f.message}")
    return [f for f in findings if f.severity is not Severity.ERROR]


__all__ = ["ColumnWiring", "SlotWiring", "format_path", "resource_kinds", "wire_columns"]
