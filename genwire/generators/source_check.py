"""The static check of plugin code (SPEC §15): a generator's source against its
``required_resources``.

``ast`` reads the generator class and the plugin classes it inherits from (never
genwire's own base class). Every literal slot use — ``self.resources.x``,
``self.resources["x"]``, ``"x" in self.resources``, ``getattr(self.resources, "x")``, the
same through a local alias (``r = self.resources``) or ``__init__``'s ``resources``
parameter, in nested functions, lambdas and comprehensions too — must be declared: an
undeclared one is an error located at file:line:col with the entry to add, its kind read
from how the slot is used. What cannot be read statically is a warning naming the line
(the runtime guard still holds there); a declared slot nothing uses is a warning; a class
whose source cannot be found is a note.

Reading a file is the cost, so a file's scan (which depends on the file alone; the
findings also depend on the declarations, which are cheap to apply) is cached in memory
and on disk, keyed by path, mtime and size.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import inspect
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from genwire.config.paths import user_cache_dir
from genwire.errors import printable
from genwire.generators.metadata import ResourceKind

FORMAT_VERSION = 1  # of the on-disk scans; bump when the scanner changes what it records

# How a slot's use says what it is (SPEC §4: what each kind of handle offers).
_KIND_BY_METHOD = {
    "complete": ResourceKind.CHAT_MODEL,
    "embed": ResourceKind.EMBEDDING_MODEL,
    "rows": ResourceKind.DATASET,
    "row": ResourceKind.DATASET,
    "sample": ResourceKind.DATASET,
    "get": ResourceKind.MODEL_REGISTRY,
}
_KIND_BY_ATTRIBUTE = {
    "dimensions": ResourceKind.EMBEDDING_MODEL,
    "columns": ResourceKind.DATASET,
    "aliases": ResourceKind.MODEL_REGISTRY,
}
# Classes of the MRO that are not plugin code: genwire's own base and Python's machinery.
_NOT_PLUGIN_MODULES = frozenset({"typing", "abc", "genwire.generators.base"})


class Severity(StrEnum):
    ERROR = "error"  # an undeclared literal use: a wiring error
    WARNING = "warning"  # a dynamic use, or a declared slot nothing uses
    NOTE = "note"  # the check could not read the source


class Finding(BaseModel):
    """One result of the check. ``line`` and ``col`` are 1-based; ``suggested_entry`` is
    the ``required_resources`` entry to add (``<KIND>`` when the use does not say)."""

    model_config = ConfigDict(frozen=True)

    severity: Severity
    generator: str
    file: str | None
    line: int | None
    col: int | None
    slot: str | None
    message: str
    suggested_entry: str | None = None

    @property
    def where(self) -> str:
        if self.file is None:
            return f"generator {self.generator!r}"
        parts = [printable(self.file), *(str(n) for n in (self.line, self.col) if n is not None)]
        return ":".join(parts)

    def text(self) -> str:
        """``file:line:col: generator 'x': message``: the line a user reads."""
        return f"{self.where}: generator {self.generator!r}: {self.message}"

    def __str__(self) -> str:
        return f"{self.severity.value}: {self.text()}"


# --- scanning one file ---------------------------------------------------------------------


@dataclass
class _Use:
    slot: str
    line: int
    col: int
    how: str  # the expression as written, for the message
    kinds: list[str] = field(default_factory=list)


@dataclass
class _Dynamic:
    line: int
    col: int
    what: str


@dataclass
class ClassScan:
    """What one ``class`` statement's methods do with ``self.resources``."""

    qualname: str
    start: int
    end: int
    uses: list[_Use]
    dynamic: list[_Dynamic]
    declared_at: dict[str, tuple[int, int]]  # slot -> where required_resources names it
    metadata_at: tuple[int, int] | None  # where ``metadata = ...`` is assigned

    def to_json(self) -> dict[str, Any]:
        return {
            "qualname": self.qualname,
            "start": self.start,
            "end": self.end,
            "uses": [[u.slot, u.line, u.col, u.how, u.kinds] for u in self.uses],
            "dynamic": [[d.line, d.col, d.what] for d in self.dynamic],
            "declared_at": {k: list(v) for k, v in self.declared_at.items()},
            "metadata_at": list(self.metadata_at) if self.metadata_at else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClassScan:
        return cls(
            qualname=data["qualname"],
            start=data["start"],
            end=data["end"],
            uses=[_Use(s, ln, c, h, list(k)) for s, ln, c, h, k in data["uses"]],
            dynamic=[_Dynamic(ln, c, w) for ln, c, w in data["dynamic"]],
            declared_at={k: (v[0], v[1]) for k, v in data["declared_at"].items()},
            metadata_at=(data["metadata_at"][0], data["metadata_at"][1]) if data["metadata_at"] else None,
        )


def _parents(root: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kind_of_use(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ResourceKind | None:
    """The kind the expression ``node`` (a slot's handle) is used as, if the use says."""
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr in _KIND_BY_METHOD and isinstance(parents.get(parent), ast.Call):
            return _KIND_BY_METHOD[parent.attr]
        return _KIND_BY_ATTRIBUTE.get(parent.attr)
    if (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Name)
        and parent.func.id == "len"
        and node in parent.args
    ):
        return ResourceKind.DATASET
    return None


def _self_name(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    decorators = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
    if decorators & {"staticmethod", "classmethod"}:
        return None
    args = fn.args.posonlyargs + fn.args.args
    return args[0].arg if args else None


class _MethodScanner:
    """One method (and everything nested in it): its slot uses and dynamic uses."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, scan: ClassScan, self_attrs: dict[str, str]):
        self.fn = fn
        self.scan = scan
        self.self_attrs = self_attrs  # self.<attr> = <a slot's handle>, class-wide: kind hints
        self.parents = _parents(fn)
        self.self_name = _self_name(fn)
        self.aliases: set[str] = set()  # local names bound to self.resources
        if fn.name == "__init__":
            params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            self.aliases.update(a.arg for a in params if a.arg == "resources")
        self.handles: dict[str, _Use] = {}  # local name -> the slot use it holds

    def is_resources(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.aliases
        return (
            isinstance(node, ast.Attribute)
            and node.attr in ("resources", "_resources")
            and isinstance(node.value, ast.Name)
            and node.value.id == self.self_name
            and self.self_name is not None
        )

    def run(self) -> None:
        nodes = list(ast.walk(self.fn))
        self.find_aliases(nodes)
        for node in nodes:
            if self.is_resources(node) and not self.is_alias_definition(node):
                self.classify(node)
        self.hint_from_handles(nodes)

    def find_aliases(self, nodes: list[ast.AST]) -> None:
        changed = True
        while changed:  # r = self.resources; s = r: aliases of aliases, in any order
            changed = False
            for node in nodes:
                value, targets = _assignment(node)
                if value is not None and self.is_resources(value):
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id not in self.aliases:
                            self.aliases.add(t.id)
                            changed = True

    def is_alias_definition(self, node: ast.AST) -> bool:
        value, targets = _assignment(self.parents.get(node))
        if value is node and targets and all(isinstance(t, ast.Name) for t in targets):
            return True
        if isinstance(node, ast.Name):  # the alias's own binding (a parameter is not a Name node)
            return isinstance(node.ctx, ast.Store | ast.Del)
        return False

    def classify(self, node: ast.AST) -> None:
        parent = self.parents.get(node)
        line, col = getattr(node, "lineno", self.fn.lineno), getattr(node, "col_offset", 0) + 1
        text = ast.unparse(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr.startswith("_"):
                self.dynamic(node, f"{text}.{parent.attr} reaches into genwire's internals, not a slot")
            else:
                self.use(parent.attr, parent, f"{text}.{parent.attr}")
            return
        if isinstance(parent, ast.Subscript) and parent.value is node:
            key = _const_str(parent.slice)
            if key is not None:
                self.use(key, parent, f"{text}[{key!r}]")
            else:
                self.dynamic(node, f"{text}[{ast.unparse(parent.slice)}]: a slot chosen at run time")
            return
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            i = parent.comparators.index(node)
            left = parent.left if i == 0 else parent.comparators[i - 1]
            if isinstance(parent.ops[i], ast.In | ast.NotIn):
                key = _const_str(left)
                if key is not None:
                    self.scan.uses.append(_Use(key, line, col, f"{key!r} in {text}"))
                else:
                    self.dynamic(node, f"{ast.unparse(left)} in {text}: a slot chosen at run time")
                return
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in ("getattr", "hasattr")
            and parent.args
            and parent.args[0] is node
        ):
            key = _const_str(parent.args[1]) if len(parent.args) > 1 else None
            if key is not None:
                self.use(key, parent, f"{parent.func.id}({text}, {key!r})")
            else:
                self.dynamic(node, f"{ast.unparse(parent)}: a slot chosen at run time")
            return
        if self.is_handed_to_base_init(node, parent):
            return
        self.dynamic(node, f"{text} is handed on as a whole ({_context(parent)})")

    def is_handed_to_base_init(self, node: ast.AST, parent: ast.AST | None) -> bool:
        """``super().__init__(..., resources=resources)``: the one expected hand-over."""
        call = self.parents.get(parent) if isinstance(parent, ast.keyword) else parent
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            return False
        if call.func.attr != "__init__":
            return False
        return (isinstance(parent, ast.keyword) and parent.arg == "resources") or node in call.args

    def use(self, slot: str, expr: ast.AST, how: str) -> None:
        kind = _kind_of_use(expr, self.parents)
        found = _Use(slot, getattr(expr, "lineno", 0), getattr(expr, "col_offset", 0) + 1, how)
        if kind is not None:
            found.kinds.append(kind.value)
        self.scan.uses.append(found)
        value, targets = _assignment(self.parents.get(expr))
        if value is expr:  # model = self.resources.model: its later uses say the kind
            for t in targets:
                if isinstance(t, ast.Name):
                    self.handles[t.id] = found
                elif (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == self.self_name
                    and self.self_name is not None
                ):
                    self.self_attrs[t.attr] = slot

    def dynamic(self, node: ast.AST, what: str) -> None:
        self.scan.dynamic.append(_Dynamic(getattr(node, "lineno", 0), getattr(node, "col_offset", 0) + 1, what))

    def hint_from_handles(self, nodes: list[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.handles:
                kind = _kind_of_use(node, self.parents)
                if kind is not None:
                    self.handles[node.id].kinds.append(kind.value)


def _assignment(node: ast.AST | None) -> tuple[ast.AST | None, list[ast.expr]]:
    if isinstance(node, ast.Assign):
        return node.value, list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        return node.value, [node.target]
    return None, []


def _context(parent: ast.AST | None) -> str:
    if isinstance(parent, ast.Call | ast.keyword):
        return "passed to a function"
    if isinstance(parent, ast.Assign | ast.AnnAssign):
        return "stored"
    if isinstance(parent, ast.Return):
        return "returned"
    if isinstance(parent, ast.For | ast.AsyncFor | ast.comprehension):
        return "iterated"
    return f"used in {type(parent).__name__}" if parent is not None else "used"


def _declarations(cls_node: ast.ClassDef) -> tuple[dict[str, tuple[int, int]], tuple[int, int] | None]:
    """Where ``metadata = GeneratorMetadata(required_resources={...})`` names each slot."""
    for stmt in cls_node.body:
        value, targets = _assignment(stmt)
        if not any(isinstance(t, ast.Name) and t.id == "metadata" for t in targets):
            continue
        at = (stmt.lineno, stmt.col_offset + 1)
        if isinstance(value, ast.Call):
            for kw in value.keywords:
                if kw.arg == "required_resources" and isinstance(kw.value, ast.Dict):
                    slots = {
                        key.value: (key.lineno, key.col_offset + 1)
                        for key in kw.value.keys
                        if isinstance(key, ast.Constant) and isinstance(key.value, str)
                    }
                    return slots, at
        return {}, at
    return {}, None


def _mentions_resources(fn: ast.AST, lines: list[str]) -> bool:
    """Whether the method's text holds ``resources`` at all: most methods do not, and
    reading their text is far cheaper than walking their tree."""
    start, end = getattr(fn, "lineno", 1), getattr(fn, "end_lineno", None) or len(lines)
    return any("resources" in line for line in lines[start - 1 : end])


def _scan_class(node: ast.ClassDef, qualname: str, lines: list[str]) -> ClassScan:
    declared_at, metadata_at = _declarations(node)
    scan = ClassScan(qualname, node.lineno, node.end_lineno or node.lineno, [], [], declared_at, metadata_at)
    self_attrs: dict[str, str] = {}
    scanners = [
        _MethodScanner(stmt, scan, self_attrs)
        for stmt in node.body
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and _mentions_resources(stmt, lines)
    ]
    for scanner in scanners:
        scanner.run()
    if self_attrs:  # self._model = self.resources.model in __init__; self._model.complete(...) elsewhere
        first_use = {u.slot: u for u in scan.uses}
        for fn in node.body:
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            self_name, parents = _self_name(fn), _parents(fn)
            for n in parents:
                if (
                    isinstance(n, ast.Attribute)
                    and n.attr in self_attrs
                    and isinstance(n.value, ast.Name)
                    and n.value.id == self_name
                ):
                    kind = _kind_of_use(n, parents)
                    if kind is not None:
                        first_use[self_attrs[n.attr]].kinds.append(kind.value)
    return scan


def _classes(tree: ast.Module) -> Iterator[tuple[str, ast.ClassDef]]:
    """Every ``class`` statement with the ``__qualname__`` Python gives it."""

    def walk(body: Iterable[ast.AST], prefix: str) -> Iterator[tuple[str, ast.ClassDef]]:
        for node in body:
            if isinstance(node, ast.ClassDef):
                yield prefix + node.name, node
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.AsyncWith | ast.For | ast.While):
                children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
                for handler in getattr(node, "handlers", []):
                    children.extend(handler.body)
                yield from walk(children, prefix)

    yield from walk(tree.body, "")


def scan_source(source: str | bytes, filename: str) -> list[ClassScan]:
    tree = ast.parse(source, filename=filename)
    text = source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source
    lines = text.splitlines()
    return [_scan_class(node, qualname, lines) for qualname, node in _classes(tree)]


# --- the cache ---------------------------------------------------------------------------------

_memory: dict[str, tuple[tuple[int, int], list[ClassScan]]] = {}


def _cache_dir() -> Path:
    return user_cache_dir() / "source-check"


def _disk_path(path: str) -> Path:
    return _cache_dir() / (hashlib.sha256(path.encode()).hexdigest()[:32] + ".json")


@functools.cache
def _checker_version() -> list[int]:
    """FORMAT_VERSION and this module's own mtime and size: scans made by another
    version of the scanner (an upgrade, an edit in a development checkout) are stale."""
    st = os.stat(__file__)
    return [FORMAT_VERSION, st.st_mtime_ns, st.st_size]


def _read_disk(path: str, stamp: tuple[int, int]) -> list[ClassScan] | None:
    try:
        data = json.loads(_disk_path(path).read_text(encoding="utf-8"))
        if data["version"] != _checker_version() or data["path"] != path or tuple(data["stamp"]) != stamp:
            return None
        return [ClassScan.from_json(c) for c in data["classes"]]
    except (OSError, ValueError, KeyError, TypeError):  # absent, stale or damaged: scan again
        return None


def _write_disk(path: str, stamp: tuple[int, int], scans: list[ClassScan]) -> None:
    record = {
        "version": _checker_version(),
        "path": path,
        "stamp": list(stamp),
        "classes": [s.to_json() for s in scans],
    }
    target = _disk_path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record))
        os.replace(tmp, target)
    except OSError:  # a read-only home only costs the next process a re-scan
        pass


def file_scans(path: str) -> list[ClassScan]:
    """The scans of every class in ``path``, from the cache while the file is unchanged.
    Raises OSError (unreadable) or SyntaxError (changed since import)."""
    st = os.stat(path)
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _memory.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    scans = _read_disk(path, stamp)
    if scans is None:
        scans = scan_source(Path(path).read_bytes(), path)
        _write_disk(path, stamp, scans)
    _memory[path] = (stamp, scans)
    return scans


# --- checking a generator class -----------------------------------------------------------------


def plugin_classes(cls: type) -> list[type]:
    """``cls`` and the classes it inherits from whose code is the plugin's, not genwire's."""
    return [
        k
        for k in cls.__mro__
        if k.__module__ not in _NOT_PLUGIN_MODULES and getattr(builtins, k.__name__, None) is not k
    ]


def _code_lines(klass: type) -> set[int]:
    lines = set()
    for value in vars(klass).values():
        fn = getattr(value, "__func__", value)
        fn = getattr(fn, "fget", fn)
        code = getattr(fn, "__code__", None)
        if code is not None:
            lines.add(code.co_firstlineno)
    return lines


def _source_of(klass: type) -> tuple[str | None, ClassScan | None, str]:
    """(file, scan, why not) of one class."""
    try:
        path = inspect.getsourcefile(klass)
    except TypeError:  # a built-in module, or a class with no module file
        path = None
    if path is None or not os.path.exists(path):
        module = sys.modules.get(klass.__module__)
        origin = getattr(module, "__file__", None) or klass.__module__
        return None, None, f"no Python source for class {klass.__qualname__} (from {origin}); it was not checked"
    path = os.path.abspath(path)
    try:
        scans = file_scans(path)
    except (OSError, SyntaxError, ValueError) as exc:
        return path, None, f"the source of class {klass.__qualname__} could not be read ({exc}); it was not checked"
    matches = [s for s in scans if s.qualname == klass.__qualname__]
    if len(matches) > 1:  # the same name defined twice: the one holding this class's code
        lines = _code_lines(klass)
        matches = [s for s in matches if any(s.start <= n <= s.end for n in lines)] or matches[-1:]
    if not matches:
        return (
            path,
            None,
            f"class {klass.__qualname__} has no class statement in {path} (made at run time?); it was not checked",
        )
    return path, matches[0], ""


def _entry(slot: str, kinds: set[str]) -> tuple[str, str]:
    """(the required_resources entry to add, what the message adds about its kind)."""
    if len(kinds) == 1:
        kind = ResourceKind(next(iter(kinds)))
        return f'"{slot}": ResourceKind.{kind.name}', ""
    if kinds:
        said = ", ".join(sorted(ResourceKind(k).name for k in kinds))
        return f'"{slot}": ResourceKind.<KIND>', f" (its uses disagree on the kind: {said})"
    names = ", ".join(k.name for k in ResourceKind)
    return f'"{slot}": ResourceKind.<KIND>', f" (the kind cannot be read from its uses: one of {names})"


def check_generator(cls: type) -> list[Finding]:
    """Every finding of one generator class (``cls.metadata`` must be a GeneratorMetadata)."""
    meta = cls.metadata  # type: ignore[attr-defined]
    name, declared = meta.name, meta.required_resources
    findings: list[Finding] = []
    scanned: list[tuple[str, ClassScan]] = []
    unread = False
    for klass in plugin_classes(cls):
        path, scan, why = _source_of(klass)
        if scan is None:
            unread = True
            findings.append(
                Finding(severity=Severity.NOTE, generator=name, file=path, line=None, col=None, slot=None, message=why)
            )
            continue
        assert path is not None
        scanned.append((path, scan))
    kinds: dict[str, set[str]] = {}
    for _, scan in scanned:
        for use in scan.uses:
            kinds.setdefault(use.slot, set()).update(use.kinds)
    for path, scan in scanned:
        for use in scan.uses:
            if use.slot in declared:
                continue
            entry, about = _entry(use.slot, kinds[use.slot])
            findings.append(
                Finding(
                    severity=Severity.ERROR,
                    generator=name,
                    file=path,
                    line=use.line,
                    col=use.col,
                    slot=use.slot,
                    message=f"uses resource slot {use.slot!r} ({use.how}), which required_resources does not "
                    f"declare; add {entry} to required_resources{about}",
                    suggested_entry=entry,
                )
            )
        for dyn in scan.dynamic:
            findings.append(
                Finding(
                    severity=Severity.WARNING,
                    generator=name,
                    file=path,
                    line=dyn.line,
                    col=dyn.col,
                    slot=None,
                    message=f"{dyn.what}; the check cannot read this use (the runtime guard still holds)",
                )
            )
    dynamic = any(scan.dynamic for _, scan in scanned)
    if not unread and not dynamic and scanned:  # else a slot may be used where the check cannot see
        owner = next((k for k in cls.__mro__ if "metadata" in vars(k)), cls)
        path, scan = next(((p, s) for p, s in scanned if s.qualname == owner.__qualname__), scanned[0])
        for slot in declared:
            if slot in kinds:
                continue
            line, col = scan.declared_at.get(slot) or scan.metadata_at or (scan.start, 1)
            findings.append(
                Finding(
                    severity=Severity.WARNING,
                    generator=name,
                    file=path,
                    line=line,
                    col=col,
                    slot=slot,
                    message=f"declares slot {slot!r}, which no code uses; the pre-flight checks a resource "
                    "the generator never calls (remove it from required_resources if it is not needed)",
                )
            )
    return findings


def check_generators(classes: Iterable[type]) -> list[Finding]:
    """The findings of each distinct class, in order: errors, warnings, then notes."""
    findings: list[Finding] = []
    seen: set[type] = set()
    for cls in classes:
        if cls not in seen:
            seen.add(cls)
            findings.extend(check_generator(cls))
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}
    generators = {name: i for i, name in enumerate(dict.fromkeys(f.generator for f in findings))}
    return sorted(
        findings, key=lambda f: (order[f.severity], generators[f.generator], f.file or "", f.line or 0, f.col or 0)
    )


__all__ = ["ClassScan", "Finding", "Severity", "check_generator", "check_generators", "file_scans", "plugin_classes"]
