"""What a finished run did (``RunResult``): the summary, ``--json`` (SPEC §9) and the
estimate read it. Its figures come from the run's accounting (``engine.money.accounts``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genwire.engine.records.funnel import Funnel, funnel_summary, rejected_path
from genwire.preflight.report import PreflightReport
from genwire.providers.batch.format import BatchInfo
from genwire.providers.budget import CostMeter
from genwire.providers.pool.endpoints import EndpointStats
from genwire.providers.usage import Concurrency, ModelUsage, requests_of

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """What a finished run did. ``rows_written`` counts every row in the output,
    ``rows_resumed`` those of them an earlier, interrupted run had already made."""

    output: Path
    rows_requested: int
    rows_written: int
    rows_failed: int
    errors_file: Path | None
    duration_s: float
    rows_resumed: int = 0
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    # Per provider at the end of the run: the adaptive limit it settled at, its peak and
    # its 429 pauses (this process's providers: Ray workers' are not included).
    concurrency: dict[str, Concurrency] = field(default_factory=dict)
    preflight: PreflightReport | None = None
    batches: list[BatchInfo] | None = None  # batch mode: every batch it used (None: online)
    cost: dict[str, Any] | None = None  # SPEC §16's "cost" object
    meter: CostMeter | None = None  # what the answers showed (the estimate reads it)
    finished: bool = True  # False: an estimate's sample, the checkpoint kept for the run
    # Per pooled alias, per endpoint (SPEC §17): requests, failures, latency.
    endpoints: dict[str, dict[str, EndpointStats]] = field(default_factory=dict)
    funnel: Funnel | None = None  # a gated run (SPEC §21): candidates → each gate → kept
    surplus: int = 0  # a gated run: kept candidates past the rows wanted (in the rejected file)
    # A rerun over a finished run's untouched output: nothing was done (engine.report.finished).
    already_complete: bool = False
    # Managed servers (SPEC §23) this run used: per server, how often it was restarted.
    servers: dict[str, int] = field(default_factory=dict)
    # Ray: seconds from the session's start to its workers being ready (their start-up).
    workers_start_s: float | None = None

    @property
    def rejected_file(self) -> Path:
        return rejected_path(self.output)

    @property
    def requests(self) -> dict[str, int]:
        return requests_of(self.usage)

    @property
    def preflight_s(self) -> float:
        """This session's pre-flight (0 when skipped): part of ``duration_s``."""
        return min(self.preflight.duration_s, self.duration_s) if self.preflight is not None else 0.0

    @property
    def generating_s(self) -> float:
        """This session's time after its pre-flight: what the progress bar's clock counts."""
        return self.duration_s - self.preflight_s

    @property
    def rows_per_s(self) -> float:
        """Rows made per second of generating (the pre-flight left out, as the bar does)."""
        made = self.rows_written - self.rows_resumed
        return made / self.generating_s if self.generating_s > 0 else 0.0

    def counts(self) -> dict[str, int]:
        """The row counts the report page shows."""
        return {
            "rows_written": self.rows_written,
            "rows_failed": self.rows_failed,
            "rows_resumed": self.rows_resumed,
            "rows_requested": self.rows_requested,
        }

    def summary(self) -> dict[str, Any]:
        """The machine-readable summary (``genwire run --json``; SPEC §9)."""
        return {
            "ok": True,
            "rows_written": self.rows_written,
            "rows_failed": self.rows_failed,
            "rows_resumed": self.rows_resumed,
            "duration_s": round(self.duration_s, 3),
            "output": str(self.output),
            "errors_file": str(self.errors_file) if self.errors_file else None,
            "models": {alias: self._model_summary(alias, u) for alias, u in self.usage.items()},
            **({"batches": [b.as_dict() for b in self.batches]} if self.batches is not None else {}),
            **({"cost": self.cost} if self.cost is not None else {}),
            **(funnel_summary(self.funnel, self.surplus) if self.funnel is not None else {}),
            **({"already_complete": True} if self.already_complete else {}),
            **({"servers": {name: {"restarts": n} for name, n in self.servers.items()}} if self.servers else {}),
        }

    def _model_summary(self, alias: str, usage: ModelUsage) -> dict[str, Any]:
        summary: dict[str, Any] = usage.as_dict()
        if alias in self.endpoints:
            summary["endpoints"] = {name: s.as_dict() for name, s in self.endpoints[alias].items()}
        return summary
