"""The static check of plugin code (SPEC §15): a generator's code against its
``required_resources``.

The check starts from the live class: every method the generator resolves through its
MRO (a subclass's override, never the parent body it replaces; a method assigned from a
module-level function; a property's getter, a lambda too) is read by ``source_scan`` with
``self`` as the generator. Every literal slot use must be declared: an undeclared one is
an error located at file:line:col with the entry to add, its kind read from how the slot
is used. Where the generator or its resources are handed to a function of the plugin's
own package (a helper module, a static method, ``super()``'s method, a helper class's
constructor and then its methods), the check follows, to a bounded depth; where it
cannot follow, that is a warning naming the line (the runtime guard still holds there),
never silence. A declared slot nothing uses is a warning; code whose source cannot be
found is a note.

What a live class's methods are, and how a call's arguments land in parameters, is
``source_members``. The rest is kept whole (~470 lines) for one role: ``_Check`` walks one
generator's code, following calls with the roles they carry, and its methods share that
walk's state (the files read, the fields known, the findings).
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FunctionType
from typing import Any

from genwire.generators.findings import Finding, Severity
from genwire.generators.metadata import ResourceKind
from genwire.generators.source_members import (
    class_methods,
    code_key,
    functions_of,
    generated_method,
    kwargs_name,
    map_args,
    map_names,
    param_names,
    resolved_names,
)
from genwire.generators.source_scan import (
    Call,
    ClassDecl,
    Dynamic,
    Entry,
    FileScan,
    Role,
    Summary,
    Use,
    file_scan,
    save_all,
)

MAX_DEPTH = 6  # calls followed from a method before the check says it stopped
# Classes of the MRO that are not plugin code: genwire's own base and Python's machinery.
_GENWIRE_BASE = "genwire.generators.base"
_NOT_PLUGIN_MODULES = frozenset({"typing", "abc", _GENWIRE_BASE})


# --- checking a generator class -----------------------------------------------------------------


def plugin_classes(cls: type) -> list[type]:
    """``cls`` and the classes it inherits from whose code is the plugin's, not genwire's."""
    return [
        k
        for k in cls.__mro__
        if k.__module__ not in _NOT_PLUGIN_MODULES and getattr(builtins, k.__name__, None) is not k
    ]


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


@dataclass
class _Context:
    """Where a summary's calls are resolved: the function's module globals, the class whose
    method it is (for ``super()``), the helper class a ``HOLDER`` is an instance of, and the
    roles of that class's attributes."""

    path: str
    globals: dict[str, Any]
    definer: type | None
    holder: type | None
    fields: dict[str, Role]
    depth: int


@dataclass
class _Check:
    """One generator class's check: what it found, and where it has been."""

    cls: type
    roots: set[str] = field(default_factory=set)  # top-level packages of the plugin
    dirs: set[str] = field(default_factory=set)  # directories of top-level plugin modules
    uses: list[tuple[str, Use]] = field(default_factory=list)
    dynamic: list[tuple[str, Dynamic]] = field(default_factory=list)
    notes: list[tuple[str | None, str]] = field(default_factory=list)
    handles: dict[str, str] = field(default_factory=dict)
    attr_kinds: dict[str, list[str]] = field(default_factory=dict)
    done: set[tuple[Any, ...]] = field(default_factory=set)
    plugin: set[type] = field(default_factory=set)  # the plugin classes of cls's MRO
    fields: dict[type | None, dict[str, Role]] = field(default_factory=dict)  # attributes holding a role,
    # stored by any code read (the generator's under None, a helper class's under the class)
    files: dict[str, FileScan] = field(default_factory=dict)  # path -> its scan, this check

    def __post_init__(self) -> None:
        self.plugin = set(plugin_classes(self.cls))
        for klass in self.plugin:
            module = klass.__module__
            self.roots.add(module.split(".")[0])
            file = getattr(sys.modules.get(module), "__file__", None)
            if "." not in module and file:
                self.dirs.add(os.path.dirname(os.path.abspath(file)))

    def own(self, obj: object) -> bool:
        """Whether ``obj`` is code of the plugin's own package (the check follows calls there)."""
        module = getattr(obj, "__module__", None) or ""
        if module.split(".")[0] in self.roots and module not in _NOT_PLUGIN_MODULES:
            return True
        file = getattr(sys.modules.get(module), "__file__", None)
        return "." not in module and bool(file) and os.path.dirname(os.path.abspath(str(file))) in self.dirs

    def warn(self, path: str, line: int, col: int, what: str) -> None:
        self.dynamic.append((path, Dynamic(line, col, what)))

    # -- reading functions and classes --
    def source(self, fn: FunctionType) -> tuple[str, FileScan] | None:
        try:
            path = inspect.getsourcefile(fn)
        except TypeError:
            path = None
        if path is None or not os.path.exists(path):
            origin = fn.__code__.co_filename
            self.notes.append((None, f"no Python source for {fn.__qualname__} (from {origin}); it was not checked"))
            return None
        path = os.path.abspath(path)
        try:
            return path, self.scan_of(path)
        except (OSError, SyntaxError, ValueError) as exc:
            self.notes.append((path, f"the source of {fn.__qualname__} could not be read ({exc}); it was not checked"))
            return None

    def scan_of(self, path: str) -> FileScan:
        """Each file is read and hashed once per check (``files`` is shared by one call of
        ``check_generators``)."""
        scan = self.files.get(path)
        if scan is None:
            scan = self.files[path] = file_scan(path)
        return scan

    def read(self, fn: FunctionType, roles: dict[str, Role], ctx: _Context) -> Summary | None:
        found = self.source(fn)
        if found is None:
            return None
        path, scan = found
        code = fn.__code__
        key = code_key(fn)
        entry = Entry.of(roles, ctx.fields if roles else {})
        done = ("fn", path, key, entry.key, ctx.definer, ctx.holder)
        summary = scan.summary(key, entry)
        if summary is None:
            self.notes.append(
                (
                    path,
                    f"{fn.__qualname__} is not at line {code.co_firstlineno} of {path} (changed "
                    "since it was imported?); it was not checked",
                )
            )
            return None
        if done not in self.done:
            self.done.add(done)
            here = _Context(path, fn.__globals__, ctx.definer, ctx.holder, ctx.fields, ctx.depth)
            self.take(summary, here, scan)
        return summary

    def take(self, summary: Summary, ctx: _Context, scan: FileScan) -> None:
        self.uses += [(ctx.path, u) for u in summary.uses]
        self.dynamic += [(ctx.path, d) for d in summary.dynamic]
        self.handles.update(summary.handles)
        for key, role in summary.stores.items():
            owner, attr = key.split(":", 1)
            self.fields.setdefault(None if owner == Role.GEN.value else ctx.holder, {})[attr] = role
        for attr, kinds in summary.attr_kinds.items():
            self.attr_kinds.setdefault(attr, []).extend(kinds)
        for call in summary.calls:
            self.follow(call, ctx, scan)

    def read_class(self, klass: type, role: Role, init: dict[str, Role], fields: dict[str, Role], depth: int) -> None:
        """Every method ``klass`` resolves (its MRO, plugin code only), ``self`` as ``role``;
        again while its methods store roles into new attributes of ``self``."""
        keep = self.plugin.__contains__ if role is Role.GEN else self.own
        members = list(class_methods(klass, keep))
        owner = klass if role is Role.HOLDER else None
        known = self.fields.setdefault(owner, {})
        known.update(fields)
        for _ in range(4):
            fields = {**self.fields.get(None, {}), **known} if owner is not None else dict(known)
            for name, definer, fn in members:
                if generated_method(definer, name, fn):
                    continue
                params = param_names(fn)
                roles = {params[0]: role} if params else {}
                if name == "__init__" and role is Role.GEN:  # what genwire hands the constructor
                    kwargs = kwargs_name(fn)
                    roles.update({p: Role.RES for p in params if p == "resources"})
                    roles.update({kwargs: Role.KW} if kwargs else {})
                elif name == "__init__":
                    roles.update(init)
                self.read(fn, roles, _Context("", {}, definer, owner, fields, depth))
            self.read_hidden(klass, keep, role, fields, depth)
            now = {**self.fields.get(None, {}), **known} if owner is not None else dict(known)
            if now == fields:  # no method stored a role into a new attribute
                return

    def read_hidden(
        self, klass: type, keep: Callable[[type], bool], role: Role, fields: dict[str, Role], depth: int
    ) -> None:
        """The ``def`` statements in the class bodies whose function the live class does not
        show (a decorator without ``functools.wraps`` replaced it): read from the source."""
        resolved = resolved_names(klass)
        for k in klass.__mro__:
            if not keep(k):
                continue
            decl = _class_decl(k, self)
            if decl is None:
                continue
            path, found = decl
            module = sys.modules.get(k.__module__)
            for name, keys in found.methods.items():
                if resolved.get(name) is not k:
                    continue  # overridden below, or rebound
                live = {code_key(fn) for fn in functions_of(vars(k)[name])}
                for key in keys:
                    params = self.scan_of(path).params.get(key, [])
                    if key in live or not params:
                        continue
                    entry = Entry.of({params[0]: role}, fields)
                    summary = self.scan_of(path).summary(key, entry)
                    done = ("hidden", path, key, entry.key)
                    if summary is not None and done not in self.done:
                        self.done.add(done)
                        owner = klass if role is Role.HOLDER else None
                        ctx = _Context(path, vars(module) if module else {}, k, owner, fields, depth)
                        self.take(summary, ctx, self.scan_of(path))

    # -- following a call that hands a role on --
    def follow(self, call: Call, ctx: _Context, scan: FileScan) -> None:
        def stop(why: str) -> None:
            self.warn(ctx.path, call.line, call.col, f"{call.text} hands the generator or its resources on: {why}")

        if ctx.depth >= MAX_DEPTH:
            return stop(f"more than {MAX_DEPTH} calls deep, where the check stops following")
        how, name = call.callee
        deeper = _Context(ctx.path, ctx.globals, None, ctx.holder, ctx.fields, ctx.depth + 1)
        if how == "local":
            params = scan.params.get(name, [])
            roles = map_names(params, call.args, 0)
            if roles is None:
                return stop("its arguments do not match the function's parameters")
            entry = Entry.of(roles, ctx.fields)
            summary = scan.summary(name, entry)
            done = ("local", ctx.path, name, entry.key, ctx.definer, ctx.holder)
            if summary is not None and done not in self.done:
                self.done.add(done)
                self.take(
                    summary, _Context(ctx.path, ctx.globals, ctx.definer, ctx.holder, ctx.fields, deeper.depth), scan
                )
            return None
        target, offset, definer = self.resolve(how, name, ctx)
        if target is _UNRESOLVED:
            return stop(f"{name!r} cannot be resolved statically")
        if isinstance(target, type):
            if not self.own(target):
                return stop(f"{target.__module__}.{target.__qualname__} is outside the plugin's package")
            return self.construct(target, call, ctx, stop)
        fn = inspect.unwrap(target) if isinstance(target, FunctionType) else None
        if fn is None or not isinstance(fn, FunctionType):
            return stop(f"{name!r} is not a Python function the check can read")
        if fn.__module__ == _GENWIRE_BASE:  # Generator.__init__(self, resources=...): the expected hand-over
            return None
        if not self.own(fn):
            return stop(f"{fn.__module__}.{fn.__qualname__} is outside the plugin's package")
        args = list(call.args)
        if offset and how in ("self", "super"):
            args.insert(0, (-1, Role.GEN))
        elif offset and how == "holder":
            args.insert(0, (-1, Role.HOLDER))
        roles = map_args(fn, args, offset)
        if roles is None:
            return stop("its arguments do not match its parameters")
        deeper.definer = definer
        self.read(fn, roles, deeper)
        return None

    def resolve(self, how: str, name: str, ctx: _Context) -> tuple[Any, int, type | None]:
        """(the object called, how many leading parameters the call binds, the class it
        was found on)."""
        if how == "global":
            head, *rest = name.split(".")
            obj = ctx.globals.get(head, getattr(builtins, head, _UNRESOLVED))
            for part in rest:
                try:
                    obj = inspect.getattr_static(obj, part)
                except AttributeError:
                    return _UNRESOLVED, 0, None
            if isinstance(obj, staticmethod | classmethod):
                return obj.__func__, int(isinstance(obj, classmethod)), None
            return obj, 0, None
        owner = ctx.holder if how == "holder" else self.cls
        if owner is None:
            return _UNRESOLVED, 0, None
        mro = owner.__mro__
        if how == "super":
            if ctx.definer not in mro:
                return _UNRESOLVED, 0, None
            mro = mro[mro.index(ctx.definer) + 1 :]
        for klass in mro:
            if name in vars(klass):
                value = vars(klass)[name]
                if isinstance(value, staticmethod):
                    return value.__func__, 0, klass
                if isinstance(value, classmethod):
                    return value.__func__, 1, klass
                if isinstance(value, FunctionType):
                    return value, 1, klass
                return value, 0, klass
        return _UNRESOLVED, 0, None

    def construct(self, klass: type, call: Call, ctx: _Context, stop: Callable[[str], None]) -> None:
        """``Helper(self)``: its constructor and then all its methods, ``self`` a HOLDER."""
        init = inspect.getattr_static(klass, "__init__", None)
        fields: dict[str, Role] = {}
        init_args: dict[str, Role] = {}
        if dataclasses.is_dataclass(klass) and not (isinstance(init, FunctionType) and self.readable(init)):
            names = [f.name for f in dataclasses.fields(klass) if f.init]
            for at, role in call.args:
                fname = names[at] if isinstance(at, int) and at < len(names) else at
                if not isinstance(fname, str) or fname not in names:
                    return stop(f"{klass.__qualname__} has no field for argument {at!r}")
                fields[fname] = role
        elif isinstance(init, FunctionType) and self.own(init):
            mapped = map_args(init, call.args, 1)
            if mapped is None:
                return stop(f"its arguments do not match {klass.__qualname__}'s constructor")
            init_args = mapped
        else:
            return stop(f"{klass.__qualname__}'s constructor is outside the plugin's package")
        done = ("class", klass, tuple(sorted(map(str, call.args))), tuple(sorted(ctx.fields.items())))
        if done in self.done:
            return None
        self.done.add(done)
        self.read_class(klass, Role.HOLDER, init_args, fields, ctx.depth + 1)
        return None

    @staticmethod
    def readable(fn: FunctionType) -> bool:
        try:
            path = inspect.getsourcefile(fn)
        except TypeError:
            return False
        return path is not None and os.path.exists(path)


_UNRESOLVED = object()


def _class_decl(klass: type, check: _Check) -> tuple[str, ClassDecl] | None:
    try:
        path = inspect.getsourcefile(klass)
        if path is None:
            return None
        path = os.path.abspath(path)
        decls = [c for c in check.scan_of(path).classes if c.qualname == klass.__qualname__]
    except (TypeError, OSError, SyntaxError, ValueError):
        return None
    if len(decls) > 1:  # the same name defined twice: the one holding this class's code
        lines = {fn.__code__.co_firstlineno for v in vars(klass).values() for fn in functions_of(v)}
        decls = [c for c in decls if any(c.start <= n <= c.end for n in lines)] or decls[-1:]
    return (path, decls[0]) if decls else None


def check_generator(cls: type, files: dict[str, FileScan] | None = None) -> list[Finding]:
    """Every finding of one generator class (``cls.metadata`` must be a GeneratorMetadata)."""
    meta = cls.metadata  # type: ignore[attr-defined]
    name, declared = meta.name, meta.required_resources
    check = _Check(cls, files={} if files is None else files)
    check.read_class(cls, Role.GEN, {}, {}, 0)
    findings: set[Finding] = set()
    kinds: dict[str, set[str]] = {}
    for _, use in check.uses:
        kinds.setdefault(use.slot, set()).update(use.kinds)
    for attr, slot in check.handles.items():
        kinds.setdefault(slot, set()).update(check.attr_kinds.get(attr, []))

    def add(severity: Severity, file: str | None, at: tuple[int, int] | None, slot: str | None, message: str) -> None:
        line, col = at if at is not None else (None, None)
        entry = _entry(slot, kinds[slot])[0] if severity is Severity.ERROR and slot is not None else None
        findings.add(
            Finding(
                severity=severity,
                generator=name,
                file=file,
                line=line,
                col=col,
                slot=slot,
                message=message,
                suggested_entry=entry,
            )
        )

    for path, use in check.uses:
        if use.slot not in declared:
            entry, about = _entry(use.slot, kinds[use.slot])
            message = (
                f"uses resource slot {use.slot!r} ({use.how}), which required_resources does not declare; "
                f"add {entry} to required_resources{about}"
            )
            add(Severity.ERROR, path, (use.line, use.col), use.slot, message)
    for path, dyn in check.dynamic:
        what = f"{dyn.what}; the check cannot read this use (the runtime guard still holds)"
        add(Severity.WARNING, path, (dyn.line, dyn.col), None, what)
    for where, why in check.notes:
        add(Severity.NOTE, where, None, None, why)
    if not check.notes and not check.dynamic:  # else a slot may be used where the check cannot see
        owner = next((k for k in cls.__mro__ if "metadata" in vars(k)), cls)
        decl = _class_decl(owner, check)
        for slot in declared:
            if slot in kinds:
                continue
            file, at = None, None
            if decl is not None:
                file = decl[0]
                at = decl[1].declared_at.get(slot) or decl[1].metadata_at or (decl[1].start, 1)
            message = (
                f"declares slot {slot!r}, which no code uses; the pre-flight checks a resource the generator "
                "never calls (remove it from required_resources if it is not needed)"
            )
            add(Severity.WARNING, file, at, slot, message)
    if files is None:
        save_all()
    return sorted(findings, key=lambda f: (f.file or "", f.line or 0, f.col or 0, f.slot or "", f.message))


def check_generators(classes: Iterable[type]) -> list[Finding]:
    """The findings of each distinct class, in order: errors, warnings, then notes."""
    findings: list[Finding] = []
    seen: set[type] = set()
    files: dict[str, FileScan] = {}
    for cls in classes:
        if cls not in seen:
            seen.add(cls)
            findings.extend(check_generator(cls, files))
    save_all()
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}
    generators = {name: i for i, name in enumerate(dict.fromkeys(f.generator for f in findings))}
    return sorted(
        findings, key=lambda f: (order[f.severity], generators[f.generator], f.file or "", f.line or 0, f.col or 0)
    )


__all__ = ["Finding", "Severity", "check_generator", "check_generators", "plugin_classes"]
