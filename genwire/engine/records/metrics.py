"""A run's metrics, appended to ``<output>.checkpoint/metrics.jsonl`` as it goes (SPEC §19).

One JSON object a line, each with a ``kind``:

* ``session``: a ``genwire run`` over this checkpoint began (``session`` counts them: a
  resumed run appends, so the report covers every session);
* ``tick``: one interval (``dt`` seconds, ending at ``t``, Unix time) per model alias:
  ``sent``/``answered`` attempts, ``in_flight`` at its end and ``peak_in_flight``,
  ``latency`` buckets (``providers.metrics.latency_bucket``) of the answered, failed
  attempts by class (``errors``) and requests that gave up (``gave_up``), plus the
  differences of every counter of ``ModelUsage`` (requests, retries, rate_limited,
  tokens, cached, batched, and ``usd`` once the clients count cost: any number it
  carries is carried here); ``rows`` written and failed in the interval;
* ``preflight``: the pre-flight's report;
* ``end``: how the session ended (``outcome``, ``message``) and, for a finished run, its
  ``--json`` summary.

Bounded: aggregates, not a line per request; an interval with nothing in it writes no
line, and after ``LINES_PER_STEP`` ticks in a session the interval doubles (a week-long
session still writes a few thousand lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from contextvars import Token
from pathlib import Path
from typing import IO, Any

from genwire.errors import BudgetStopped, CandidatesExhausted, RunStopped
from genwire.providers.metrics import AliasSecond, RequestRecorder, start_recording, stop_recording
from genwire.providers.usage import ModelUsage

__all__ = ["BUDGET_OUTCOME", "METRICS_FILE", "RunMetrics", "outcome_of"]

METRICS_FILE = "metrics.jsonl"
BUDGET_OUTCOME = "stopped at the budget"  # the report page badges it as its own ending
TICK_S = 1.0
LINES_PER_STEP = 3600
log = logging.getLogger("genwire.metrics")

Counters = dict[str, dict[str, float]]


def _counters(usage: dict[str, ModelUsage]) -> Counters:
    """Every number ``ModelUsage`` carries, per alias (new fields are picked up as they come)."""
    return {
        alias: {k: v for k, v in vars(u).items() if type(v) in (int, float)}  # bool is not a count
        for alias, u in usage.items()
    }


def outcome_of(error: BaseException | None) -> tuple[str, str]:
    """(outcome, message) of a session that ended with ``error`` (None: it completed)."""
    if error is None:
        return "completed", ""
    if not isinstance(error, Exception):  # Ctrl-C, SIGTERM, a cancelled task
        return "interrupted", "interrupted; rerun the same command to resume"
    if isinstance(error, CandidatesExhausted):  # a gated run's cap on candidates: exit 3 too
        return "stopped at max_candidates", str(error)
    if isinstance(error, BudgetStopped):  # its own ending: nothing failed, a higher cap goes on
        return BUDGET_OUTCOME, str(error)
    outcome = "stopped" if isinstance(error, RunStopped) else "failed"
    return outcome, str(error) or type(error).__name__


class RunMetrics:
    """The metrics of one session: ``start`` it once the checkpoint is open, ``end`` it
    whatever happens (the report is written then, before a finished run removes its
    checkpoint)."""

    def __init__(
        self,
        directory: Path,
        usage: Callable[[], dict[str, ModelUsage]],
        rows: Callable[[], tuple[int, int]],
    ) -> None:
        self.directory = directory
        self.path = directory / METRICS_FILE
        self.recorder = RequestRecorder()
        self._usage = usage
        self._rows = rows
        self._last_usage = _counters(usage())
        self._last_rows = rows()
        self._handle: IO[bytes] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._token: Token[RequestRecorder | None] | None = None
        self._interval = TICK_S
        self._ticks = 0
        self._last_t = time.time()
        self._from = self._last_t  # the earliest moment the current interval's figures cover
        self._began = self._last_t
        self.session = 1

    def start(self, **about: Any) -> RunMetrics:
        """Open the file, write the session line, record this task's requests (and those
        of the tasks it starts) and tick once a second."""
        self.session = _sessions(self.path) + 1
        self._began = self._from = self._last_t = time.time()
        try:
            self._handle = self.path.open("ab")
        except OSError as exc:  # the run goes on; its report will say less
            log.warning("cannot write %s (%s): the run's report will lack its metrics", self.path, exc)
        self._write({"kind": "session", "session": self.session, "t": round(self._last_t, 3), **about})
        self._token = start_recording(self.recorder)
        self._ticker = asyncio.create_task(self._tick_forever())
        return self

    def spans(self, since: float) -> None:
        """Figures added to this interval happened since ``since`` (Unix time: a Ray
        worker's receipt, which may cover several seconds, e.g. its last at close). The
        interval's line then spans them (its ``dt``), so the report spreads them over the
        seconds they happened in rather than piling them into the last one."""
        self._from = max(self._began, min(self._from, since))

    def note(self, kind: str, **payload: Any) -> None:
        self._write({"kind": kind, "session": self.session, **payload})

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.tick()
            self._ticks += 1
            if self._ticks % LINES_PER_STEP == 0:
                self._interval *= 2

    def tick(self, usage: dict[str, ModelUsage] | None = None) -> None:
        """Write the interval since the last tick (``usage``: the final totals, when the
        run knows more than its own clients, e.g. Ray's workers)."""
        now = time.time()
        seconds = self.recorder.take()
        counters = _counters(usage if usage is not None else self._usage())
        models: dict[str, dict[str, Any]] = {}
        for alias in sorted({*seconds, *counters, *self.recorder.in_flight}):
            line = _model_line(
                seconds.get(alias),
                counters.get(alias, {}),
                self._last_usage.get(alias, {}),
                self.recorder.in_flight.get(alias, 0),
            )
            if line:
                models[alias] = line
        self._last_usage = counters
        written, failed = self._rows()
        rows = {"written": written - self._last_rows[0], "failed": failed - self._last_rows[1]}
        self._last_rows = (written, failed)
        if models or rows["written"] or rows["failed"]:
            self._write(
                {
                    "kind": "tick",
                    "session": self.session,
                    "t": round(now, 3),
                    "dt": round(now - min(self._last_t, self._from), 3),
                    "rows": rows,
                    "models": models,
                }
            )
        self._last_t = self._from = now

    def end(
        self,
        error: BaseException | None,
        *,
        usage: dict[str, ModelUsage] | None = None,
        ending: tuple[str, str] | None = None,
        **about: Any,
    ) -> None:
        """The last tick and the ``end`` line; stop recording. ``ending``: (outcome,
        message) when the session ended its own way (an estimate's sample), else read from
        ``error``. Never raises: the run's own outcome is what the user must see."""
        try:
            if self._ticker is not None:
                self._ticker.cancel()
                self._ticker = None
            if self._token is not None:
                stop_recording(self._token)
                self._token = None
            self.tick(usage)
            outcome, message = ending or outcome_of(error)
            self.note("end", t=round(time.time(), 3), outcome=outcome, message=message, **about)
        except Exception as exc:  # a full disk must not hide the run's own error
            log.warning("cannot finish the run's metrics in %s: %s", self.path, exc)
        finally:
            if self._handle is not None:
                with contextlib.suppress(OSError):
                    self._handle.close()
                self._handle = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._handle is None:
            return
        try:
            self._handle.write(json.dumps(record, separators=(",", ":"), default=str).encode() + b"\n")
            self._handle.flush()  # to the OS at once: a kill -9 keeps every tick written
        except OSError as exc:
            log.warning("cannot write %s (%s): the run's report will lack its later metrics", self.path, exc)
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None


def _model_line(
    second: AliasSecond | None, counters: dict[str, float], last: dict[str, float], in_flight: int
) -> dict[str, Any]:
    line: dict[str, Any] = {}
    for name, value in counters.items():
        change = value - last.get(name, 0)
        if change:
            line[name] = change
    if second is not None:
        for name in ("sent", "answered", "peak_in_flight"):
            if getattr(second, name):
                line[name] = getattr(second, name)
        for name in ("latency", "errors", "gave_up"):
            if getattr(second, name):
                line[name] = getattr(second, name)
    if in_flight:
        line["in_flight"] = in_flight
    return line


def _sessions(path: Path) -> int:
    """Sessions the file already holds (0 when there is none)."""
    count = 0
    with contextlib.suppress(OSError), path.open("rb") as handle:
        for line in handle:
            if line.startswith(b'{"kind":"session"'):
                count += 1
    return count
