"""What the commands taking a genwire.yaml share: the FILE argument, the container
booted (whole, or wired without the engine) with the static check's findings on stderr,
and the ``--json`` object of a failure (stdout always holds one JSON object)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from genwire.cli.exits import emit_json
from genwire.errors import GenwireError, ProblemsError

if TYPE_CHECKING:
    from genwire.container.core import WiredPipeline

__all__ = ["FILE", "boot_app", "boot_or_report", "failure", "failure_text", "or_report", "wire", "wire_or_report"]

T = TypeVar("T")

FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))


def boot_app(file: Path) -> Any:
    """The full container (``run``): its ``run`` brings in the engine."""
    from genwire.app import boot
    from genwire.cli.findings import report_findings

    container = boot(file)
    report_findings(container.columns)  # the static check's warnings and notes, on stderr
    return container


def wire(file: Path) -> WiredPipeline:
    """The wired pipeline without the engine: what validate, plan and preflight need."""
    from genwire.cli.findings import report_findings
    from genwire.container.boot import boot_container
    from genwire.container.core import WiredPipeline

    container = boot_container(file, WiredPipeline)
    report_findings(container.columns)  # the static check's warnings and notes, on stderr
    return container


def failure(exc: GenwireError) -> dict[str, Any]:
    """The ``--json`` object of a failure: the message, and each located problem apart."""
    problems = exc.problems if isinstance(exc, ProblemsError) else [str(exc)]
    return {"ok": False, "error": str(exc), "errors": problems}


def failure_text(message: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "errors": [message]}


def boot_or_report(file: Path, as_json: bool, report: dict[str, Any]) -> Any:
    return or_report(lambda: boot_app(file), as_json, report)


def wire_or_report(file: Path, as_json: bool, report: dict[str, Any]) -> WiredPipeline:
    return or_report(lambda: wire(file), as_json, report)


def or_report(make: Callable[[], T], as_json: bool, report: dict[str, Any]) -> T:
    """``make()``, or with ``--json`` print ``report`` plus the failure first (stdout always
    holds one JSON object), then fail as usual (exit 2 for an invalid config)."""
    try:
        return make()
    except GenwireError as exc:
        if as_json:
            emit_json({**report, **failure(exc)})
        raise
