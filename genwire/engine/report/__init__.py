"""The run report page, ``<output>.report.html`` (SPEC §19): ``write_report`` reads the
run's checkpoint folder (``report.data``) and writes one self-contained HTML file
(``report.page``, plots from ``report.svg``). The run writes it when a session ends,
whatever ended it, before a finished run removes its checkpoint; ``genwire report
OUTPUT`` writes it for a run that did not finish.

A room of the engine: may import ``engine.gates`` (what the gates' columns cost) and
``engine.records``, never a room above it (``money``, ``rows``, ``cluster``, ``run``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.metrics import RunMetrics
from genwire.providers.tracing import RunTrace
from genwire.providers.usage import ModelUsage

__all__ = ["ESTIMATE_ENDING", "end_session", "report_path", "write_report"]

ESTIMATE_ENDING = ("estimate", "an estimate's sample: its rows are kept; `genwire run` continues after them")

log = logging.getLogger("genwire.report")


def report_path(output: Path) -> Path:
    return output.with_name(output.name + ".report.html")


def write_report(
    output: Path,
    *,
    done: Callable[[int], bool] | None = None,
    counts: dict[str, Any] | None = None,
) -> Path:
    """Write the report of the run writing ``output`` from its checkpoint; returns its path.
    ``done`` and ``counts``: what the live run knows (else read from the files)."""
    from genwire.engine.report.data import collect
    from genwire.engine.report.page import render
    from genwire.engine.report.record import write_record
    from genwire.version import __version__

    data = collect(checkpoint_dir(output), output, done=done, counts=counts)
    target = report_path(output)
    temporary = target.with_name(target.name + ".tmp")
    try:
        temporary.write_text(render(data, version=__version__), encoding="utf-8")
        os.replace(temporary, target)
    except BaseException:  # a full disk, a folder in the way, a signal: no half page is left
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    # What the dataset card reads once the checkpoint is gone; after the page, so a report
    # that could not be written leaves nothing behind.
    write_record(output, data, __version__)
    return target


def end_session(
    metrics: RunMetrics | None,
    trace: RunTrace | None,
    error: BaseException | None,
    output: Path,
    *,
    done: Callable[[int], bool] | None = None,
    counts: dict[str, Any] | None = None,
    usage: dict[str, ModelUsage] | None = None,
    summary: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
    estimate: bool = False,
    reported: dict[str, str] | None = None,
) -> None:
    """The one hook every way a session ends goes through (completed, failed, stopped at
    the failure rate or a budget, interrupted, an estimate's sample): the last metrics,
    then the report page, while the checkpoint is still there. ``usage``: the run's final
    totals per alias; ``summary``: a completed run's ``--json`` summary; ``cost``: its
    ``"cost"`` object, however the session ended. Never raises: the
    run's own outcome is what the user must see. ``trace``: the run's span, ended last.

    ``estimate``: the session is ``genwire estimate``'s sample. Its ending is its own
    (``estimate``, not ``completed``), and it writes no report page: the page beside the
    output is the run's (a finished run's stays its own); the run that continues after
    the sample covers its session, and ``genwire report`` shows it meanwhile.
    ``reported``: per alias, the model id the servers named (the dataset card's)."""
    try:
        if metrics is not None:
            ending = ESTIMATE_ENDING if estimate and error is None else None
            about = {"cost": cost} if cost is not None else {}
            metrics.end(error, usage=usage, summary=summary, ending=ending, reported=reported or {}, **about)
            if estimate:
                return
            try:
                write_report(output, done=done, counts=counts)
            except Exception as exc:  # a full disk, a read-only folder: say so, keep the run's outcome
                log.warning("cannot write the run's report %s: %s", report_path(output), exc)
    finally:
        if trace is not None:
            try:
                trace.end(error)
            except Exception as exc:  # an exporter's trouble is not the run's
                log.warning("cannot end the run's trace: %s", exc)
