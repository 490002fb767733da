"""The model of the static check's findings (SPEC §15): roles, entries, the uses and calls a
function's summary lists, a class's declarations; and the tables that say what a slot's use
makes it (a method, an attribute, a caller). ``source_scan`` reads files into these."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from genwire.generators.metadata import ResourceKind

FORMAT_VERSION = 2  # of the on-disk records; the scanner's own source hash is part of the key too

# How a slot's use says what it is (SPEC §4: what each kind of handle offers). A new kind
# of handle adds its methods and attributes here.
KIND_BY_METHOD: dict[str, ResourceKind] = {
    "complete": ResourceKind.CHAT_MODEL,
    "embed": ResourceKind.EMBEDDING_MODEL,
    "rows": ResourceKind.DATASET,
    "row": ResourceKind.DATASET,
    "sample": ResourceKind.DATASET,
    "get": ResourceKind.MODEL_REGISTRY,
    "call": ResourceKind.TOOLS,  # a tool server's handle (SPEC §18)
    "list": ResourceKind.TOOLS,
    "converse": ResourceKind.CHAT_MODEL,
}
KIND_BY_ATTRIBUTE: dict[str, ResourceKind] = {
    "dimensions": ResourceKind.EMBEDDING_MODEL,
    "columns": ResourceKind.DATASET,
    "aliases": ResourceKind.MODEL_REGISTRY,
}
KIND_BY_CALLER: dict[str, ResourceKind] = {"len": ResourceKind.DATASET}  # len(handle)

RESOURCE_ATTRIBUTES = ("resources", "_resources")  # the generator's attributes holding them
# Built-ins reading one attribute by name: harmless with a literal name, a warning with another.
ATTRIBUTE_CALLS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
# Built-ins that take the generator without reaching into it (its own dunder methods are
# checked as methods).
HARMLESS_CALLS = frozenset(
    {"isinstance", "issubclass", "type", "id", "hash", "callable", "repr", "str", "format", "print", "super"}
)


class Role(StrEnum):
    GEN = "gen"  # the generator itself
    RES = "res"  # its resources object
    HOLDER = "holder"  # an object whose attributes (the entry's fields) hold GEN or RES
    NS = "ns"  # the generator's namespace: vars(self), self.__dict__
    KW = "kw"  # __init__'s **kwargs, holding "resources"


@dataclass(frozen=True)
class Entry:
    """The roles a function is read under (see the module docstring)."""

    params: tuple[tuple[str, Role], ...]
    fields: tuple[tuple[str, Role], ...] = ()

    @property
    def key(self) -> str:
        params = ",".join(f"{n}={r.value}" for n, r in self.params)
        fields = ",".join(f"{n}={r.value}" for n, r in self.fields)
        return f"{params};{fields}"

    @classmethod
    def of(cls, params: dict[str, Role], fields: dict[str, Role] | None = None) -> Entry:
        return cls(tuple(sorted(params.items())), tuple(sorted((fields or {}).items())))


@dataclass
class Use:
    slot: str
    line: int
    col: int
    how: str  # the expression as written, for the message
    kinds: list[str] = field(default_factory=list)


@dataclass
class Dynamic:
    line: int
    col: int
    what: str


@dataclass
class Call:
    """A call handing a role on: ``callee`` is ``[how, name]`` with how one of ``global``
    (a dotted name in the function's module), ``self`` (an attribute of the generator's
    class), ``holder`` (of the helper class's), ``super`` (the next class's attribute) or ``local`` (a function defined
    in an enclosing function: name is its key); ``args`` maps a position or keyword to a role."""

    line: int
    col: int
    text: str
    callee: list[str]
    args: list[tuple[int | str, Role]]


@dataclass
class Summary:
    uses: list[Use] = field(default_factory=list)
    dynamic: list[Dynamic] = field(default_factory=list)
    stores: dict[str, Role] = field(default_factory=dict)  # "gen:attr" / "holder:attr" -> the role stored
    calls: list[Call] = field(default_factory=list)
    handles: dict[str, str] = field(default_factory=dict)  # attribute -> the slot whose handle it holds
    attr_kinds: dict[str, list[str]] = field(default_factory=dict)  # attribute -> kinds its uses say

    def to_json(self) -> dict[str, Any]:
        return {
            "uses": [[u.slot, u.line, u.col, u.how, u.kinds] for u in self.uses],
            "dynamic": [[d.line, d.col, d.what] for d in self.dynamic],
            "stores": {k: v.value for k, v in self.stores.items()},
            "calls": [[c.line, c.col, c.text, c.callee, [[a, r.value] for a, r in c.args]] for c in self.calls],
            "handles": self.handles,
            "attr_kinds": self.attr_kinds,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        return cls(
            uses=[Use(s, ln, c, h, list(k)) for s, ln, c, h, k in data["uses"]],
            dynamic=[Dynamic(ln, c, w) for ln, c, w in data["dynamic"]],
            stores={k: Role(v) for k, v in data["stores"].items()},
            calls=[Call(ln, c, t, list(ce), [(a, Role(r)) for a, r in args]) for ln, c, t, ce, args in data["calls"]],
            handles=dict(data["handles"]),
            attr_kinds={k: list(v) for k, v in data["attr_kinds"].items()},
        )


@dataclass
class ClassDecl:
    """Where one ``class`` statement is and where its ``required_resources`` names each slot."""

    qualname: str
    start: int
    end: int
    declared_at: dict[str, tuple[int, int]]
    metadata_at: tuple[int, int] | None
    methods: dict[str, list[str]] = field(default_factory=dict)  # name -> keys of the plain defs in its body


