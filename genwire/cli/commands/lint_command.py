"""``genwire lint FILE_OR_MODULE... [--json]``: the static check of plugin code (SPEC §15)
for plugin authors without a config, and how the check's warnings reach the other commands.

Exit 0 when no error was found (warnings and notes are printed), 1 on an error, 2 when a
target cannot be loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from genwire.cli.exits import write_json
from genwire.errors import exception_text
from genwire.generators.base import Generator
from genwire.generators.discovery import check_generator_class
from genwire.generators.source_check import Finding, Severity, check_generators


class LintInputError(Exception):
    """A target that cannot be loaded: a missing file, an import that fails."""


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise LintInputError(f"{path}: no such file")
    if path.suffix != ".py":
        raise LintInputError(f"{path}: not a Python file (give a .py path or a dotted module name)")
    resolved = path.resolve()
    dotted = _package_module(resolved)
    if dotted is not None:  # a module of a package: imported by its name, so its relative imports work
        root, name = dotted
        sys.path.insert(0, str(root))
        try:
            return _import_module(name)
        finally:
            sys.path.remove(str(root))
    # A name of its own per path: two plugin files called dedup.py never share a module.
    name = f"genwire_lint_{resolved.stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise LintInputError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up while it runs
    sys.path.insert(0, str(resolved.parent))  # as `python FILE` would: siblings import
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise LintInputError(f"{path}: import failed: {_import_error(exc)}") from None
    finally:
        sys.path.remove(str(resolved.parent))
    return module


def _package_module(path: Path) -> tuple[Path, str] | None:
    """(the directory holding the top package, the dotted module name) of a file inside a
    package (its directory has an ``__init__.py``), else None."""
    if not path.stem.isidentifier():
        return None
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) < 2 and path.name != "__init__.py":
        return None
    return (folder, ".".join(parts)) if parts else None


def _import_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would
    try:
        return importlib.import_module(name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise LintInputError(f"module {name!r}: import failed: {_import_error(exc)}") from None


def _import_error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError at {exc.filename}:{exc.lineno}:{exc.offset}: {exc.msg}"
    return exception_text(exc)


def load_target(target: str) -> ModuleType:
    """A ``.py`` path (or an existing file), else a dotted module name."""
    looks_like_path = target.endswith(".py") or os.sep in target or Path(target).exists()
    return _import_file(Path(target)) if looks_like_path else _import_module(target)


def generators_in(module: ModuleType) -> list[type[Generator[Any]]]:
    """Generator classes defined in ``module`` (imported ones belong to their own module),
    with usable metadata; a base class without metadata is checked through its subclasses."""
    found = []
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if obj is Generator or not issubclass(obj, Generator) or obj.__module__ != module.__name__:
            continue
        if check_generator_class(obj, obj.__qualname__) is None:
            found.append(obj)
    return found


def _summary(checked: list[str], findings: list[Finding]) -> str:
    counts = {s: sum(f.severity is s for f in findings) for s in Severity}
    parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in counts.items()]
    return f"checked {len(checked)} generator{'s' if len(checked) != 1 else ''} ({', '.join(checked)}): " + ", ".join(
        parts
    )


def lint_targets(targets: tuple[str, ...], as_json: bool) -> None:
    """The ``genwire lint`` command (its options are declared in ``authoring_commands``)."""
    classes: list[type[Generator[Any]]] = []
    try:
        for target in targets:
            classes.extend(generators_in(load_target(target)))
        if not classes:
            raise LintInputError(f"no Generator subclass with metadata is defined in {', '.join(targets)}")
    except LintInputError as exc:
        if as_json:
            write_json({"ok": False, "error": str(exc), "generators": [], "findings": []})
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    checked = [cls.metadata.name for cls in classes]
    findings = check_generators(classes)
    ok = not any(f.severity is Severity.ERROR for f in findings)
    if as_json:
        report = {"ok": ok, "generators": checked, "findings": [f.model_dump(mode="json") for f in findings]}
        write_json(report, indent=2)
    else:
        for f in findings:
            click.echo(str(f))
        click.echo(_summary(checked, findings))
    sys.exit(0 if ok else 1)
