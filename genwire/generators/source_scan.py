"""What one function's code does with a generator and its resources, read with ``ast``
(SPEC §15); ``source_check`` resolves what this finds against the live classes.

A function is read under an *entry*: which of its parameters hold the generator (``GEN``),
its resources (``RES``), an object whose attributes hold them (``HOLDER``: a helper's
``self``), or ``__init__``'s ``**kwargs`` (``KW``); and which attributes of a ``GEN`` or
``HOLDER`` value hold what (``fields``). The summary lists literal slot uses, uses the
check cannot read (warnings), attributes the function stores a role into, and the calls
that hand a role on (``source_check`` follows those into the plugin's own package).

Reading a file is the cost, so each file's summaries are cached in memory and on disk,
keyed by the file's content hash (never its size and mtime: ``cp -p`` keeps both).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.config.paths import user_cache_dir
from genwire.generators.scan_function import (
    FunctionNode,
    assignment_parts,
    function_key,
    key_of,
    may_matter,
    param_names,
    read_function,
)
from genwire.generators.scan_model import (
    FORMAT_VERSION,
    KIND_BY_ATTRIBUTE,
    KIND_BY_CALLER,
    KIND_BY_METHOD,
    Call,
    ClassDecl,
    Dynamic,
    Entry,
    Role,
    Summary,
    Use,
)

# --- reading one file --------------------------------------------------------------------------


def _declarations(cls_node: ast.ClassDef) -> tuple[dict[str, tuple[int, int]], tuple[int, int] | None]:
    """Where ``metadata = GeneratorMetadata(required_resources={...})`` names each slot."""
    for stmt in cls_node.body:
        value, targets = assignment_parts(stmt)
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


def _static_or_class(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    names = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in fn.decorator_list}
    return bool(names & {"staticmethod", "classmethod"})


def _classes(tree: ast.Module) -> list[ClassDecl]:
    """Every ``class`` statement with the ``__qualname__`` Python gives it."""
    found: list[ClassDecl] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                declared_at, metadata_at = _declarations(node)
                qualname = prefix + node.name
                decl = ClassDecl(qualname, node.lineno, node.end_lineno or node.lineno, declared_at, metadata_at)
                for stmt in node.body:  # plain methods, to read when a decorator hides them at run time
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and not _static_or_class(stmt):
                        decl.methods.setdefault(stmt.name, []).append(key_of(stmt))
                found.append(decl)
                walk(node.body, f"{qualname}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.AsyncWith | ast.For | ast.While):
                children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
                for handler in getattr(node, "handlers", []):
                    children.extend(handler.body)
                walk(children, prefix)

    walk(tree.body, "")
    return found


@dataclass
class FileScan:
    """One file: its class statements, its functions' parameters, and the summaries read
    so far (``function key|entry key`` -> summary), filled in as the check asks."""

    path: str
    digest: str
    classes: list[ClassDecl]
    params: dict[str, list[str]]  # function key -> its parameter names
    summaries: dict[str, Summary]
    tree: ast.Module | None = None  # parsed only when a summary is missing
    by_key: dict[str, list[FunctionNode]] | None = None
    lines: list[str] | None = None  # the source's lines, while it is being read
    dirty: bool = False

    def summary(self, key: str, entry: Entry) -> Summary | None:
        """``None`` when the file has no function ``key`` (the file changed since import)."""
        cache_key = f"{key}|{entry.key}"
        hit = self.summaries.get(cache_key)
        if hit is not None:
            return hit
        nodes = self.functions().get(key)
        if not nodes and key.endswith(":<lambda>"):
            nodes = self.lambdas().get(key)
        if not nodes:
            return None
        merged = Summary()
        for node in nodes:  # two lambdas on one line: both are read
            if not may_matter(self.text_of(node), entry):
                continue
            part = read_function(node, entry)
            merged.uses += part.uses
            merged.dynamic += part.dynamic
            merged.stores.update(part.stores)
            merged.calls += part.calls
            merged.handles.update(part.handles)
            for attr, kinds in part.attr_kinds.items():
                merged.attr_kinds.setdefault(attr, []).extend(kinds)
        self.summaries[cache_key] = merged
        self.dirty = True
        return merged

    def text_of(self, node: FunctionNode) -> str:
        if self.lines is None:
            self.lines = Path(self.path).read_bytes().decode("utf-8", errors="replace").splitlines()
        first = node.lineno  # the body only: the signature names every parameter
        if not isinstance(node, ast.Lambda) and node.body[0].lineno > node.lineno:
            first = node.body[0].lineno
        return "\n".join(self.lines[first - 1 : node.end_lineno or node.lineno])

    def parsed(self) -> ast.Module:
        if self.tree is None:
            self.tree = ast.parse(Path(self.path).read_bytes(), filename=self.path)
        return self.tree

    def functions(self) -> dict[str, list[FunctionNode]]:
        """The file's ``def`` statements by key, parsed once."""
        if self.by_key is None:
            self.by_key = {}
            for node in _defs(self.parsed().body):
                self.by_key.setdefault(key_of(node), []).append(node)
        return self.by_key

    def lambdas(self) -> dict[str, list[FunctionNode]]:
        """The file's lambdas by key: a walk of the whole tree, only when one is asked for."""
        found: dict[str, list[FunctionNode]] = {}
        for node in ast.walk(self.parsed()):
            if isinstance(node, ast.Lambda):
                found.setdefault(key_of(node), []).append(node)
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "version": checker_version(),
            "path": self.path,
            "digest": self.digest,
            "classes": [[c.qualname, c.start, c.end, c.declared_at, c.metadata_at, c.methods] for c in self.classes],
            "params": self.params,
            "summaries": {k: v.to_json() for k, v in self.summaries.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileScan:
        return cls(
            path=data["path"],
            digest=data["digest"],
            classes=[
                ClassDecl(q, s, e, {k: (v[0], v[1]) for k, v in d.items()}, (m[0], m[1]) if m else None, dict(f))
                for q, s, e, d, m, f in data["classes"]
            ],
            params={k: list(v) for k, v in data["params"].items()},
            summaries={k: Summary.from_json(v) for k, v in data["summaries"].items()},
        )


def scan_source(source: bytes, path: str, digest: str) -> FileScan:
    tree = ast.parse(source, filename=path)
    scan = FileScan(path, digest, _classes(tree), {}, {}, tree=tree, dirty=True)
    scan.lines = source.decode("utf-8", errors="replace").splitlines()
    scan.params = {key: param_names(nodes[0]) for key, nodes in scan.functions().items()}
    return scan


def _defs(body: list[ast.stmt]) -> list[FunctionNode]:
    """Every ``def`` among the statements of ``body``, at any depth (statements only: far
    cheaper than walking every expression)."""
    found: list[FunctionNode] = []
    stack: list[ast.stmt] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(node)
        for name in ("body", "orelse", "finalbody"):
            stack.extend(getattr(node, name, ()))
        for handler in getattr(node, "handlers", ()):
            stack.extend(handler.body)
        for case in getattr(node, "cases", ()):
            stack.extend(case.body)
    return found


# --- the cache ---------------------------------------------------------------------------------

_memory: dict[str, FileScan] = {}  # path -> the scan of its content when last read


def _cache_dir() -> Path:
    return user_cache_dir() / "source-check"


def _disk_path(path: str) -> Path:
    return _cache_dir() / (hashlib.sha256(path.encode()).hexdigest()[:32] + ".json")


@functools.cache
def checker_version() -> list[Any]:
    """FORMAT_VERSION and the content hash of the checker's own code: records made by
    another version of it (an upgrade, an edit in a development checkout) are stale."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("scan_model.py", "scan_function.py", "source_scan.py", "source_check.py", "source_members.py"):
        try:
            digest.update((here / name).read_bytes())
        except OSError:
            digest.update(name.encode())
    return [FORMAT_VERSION, digest.hexdigest()[:16]]


def _read_disk(path: str, digest: str) -> FileScan | None:
    try:
        data = json.loads(_disk_path(path).read_text(encoding="utf-8"))
        if data["version"] != checker_version() or data["path"] != path or data["digest"] != digest:
            return None
        return FileScan.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError):  # absent, stale or damaged: scan again
        return None


def save(scan: FileScan) -> None:
    """Write the file's record if the check read something new in it."""
    if not scan.dirty:
        return
    target = _disk_path(scan.path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(scan.to_json()))
        os.replace(tmp, target)
        scan.dirty = False
    except OSError:  # a read-only home only costs the next process a re-scan
        pass


def save_all() -> None:
    for scan in list(_memory.values()):
        save(scan)


def file_scan(path: str) -> FileScan:
    """The scan of ``path`` as its content is now: from memory or disk while the content
    hash matches (the file is read and hashed every time; a few microseconds per KB).
    Raises OSError (unreadable) or SyntaxError (changed since import)."""
    source = Path(path).read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    hit = _memory.get(path)
    if hit is not None and hit.digest == digest:
        return hit
    scan = _read_disk(path, digest) or scan_source(source, path, digest)
    _memory[path] = scan
    return scan


__all__ = [
    "KIND_BY_ATTRIBUTE",
    "KIND_BY_CALLER",
    "KIND_BY_METHOD",
    "Call",
    "ClassDecl",
    "Dynamic",
    "Entry",
    "FileScan",
    "Role",
    "Summary",
    "Use",
    "file_scan",
    "function_key",
    "read_function",
    "save",
    "save_all",
]
