"""A run's accounting in one place (SPEC §16, §19, §22): usage, cost and the ledger, the
per-second metrics, a pool's per-endpoint figures and the run's trace.

The local engine's clients feed it as they go (the container's usage, the cost meter
attached to every HTTP provider); on Ray the driver is its one writer: each worker sends
what it paid for with its rows (``engine.records.receipt``) and the driver ``feed``s it here.
The summary, ``--json``, the report page, the OTel run span and the budget all read
this object, so a Ray run carries the same figures as a local run of the same work.

The budget is read and written through ``Budget`` (``RunCosts`` keeps it in this
process; a cluster-wide coordinator can stand behind the same calls).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from genwire.container.core import WiredPipeline
from genwire.engine.money.costs import RunCosts
from genwire.engine.records.metrics import RunMetrics
from genwire.engine.records.receipt import (
    Endpoints,
    LedgerEntry,
    Receipt,
    add_endpoints,
    add_seconds,
    add_stats,
    cluster_concurrency,
    latest_gates,
)
from genwire.engine.report import end_session
from genwire.errors import BudgetStopped
from genwire.providers.budget.meter import CostMeter
from genwire.providers.pool.endpoints import EndpointStats
from genwire.providers.tracing import RunTrace, start_run_trace
from genwire.providers.usage import Concurrency, ModelUsage, merge_usage

__all__ = ["Budget", "RunAccounts"]

log = logging.getLogger("genwire.accounts")


class Budget(Protocol):
    """What the engine asks of the budget (SPEC §16), wherever its reservations are held."""

    def exhausted(self) -> bool: ...

    def hold_rows(self, rows_done: int, rows_live: int, batch_rows: int) -> bool: ...

    def paid_elsewhere(self, entry: LedgerEntry) -> None: ...

    def stopped(self, checkpoint: Path, kept: int, total: int, result: Any = None) -> BudgetStopped: ...


class RunAccounts:
    """The accounting of one session of a run: ``open`` it over the checkpoint, ``start``
    it, ``feed`` it workers' receipts, read it, ``end`` it whatever happens."""

    def __init__(self, container: WiredPipeline, *, max_cost_usd: float | None, engine: str) -> None:
        """Prices resolved; a cap the engine cannot keep is refused here, before anything is opened."""
        self.container = container
        self.costs = RunCosts(container, max_cost_usd=max_cost_usd, engine=engine)
        self.budget: Budget = self.costs  # a Ray run's: the cluster's (engine.cluster.shared.ClusterBudget)
        self.metrics: RunMetrics | None = None
        self.trace: RunTrace | None = None
        self._workers_usage: dict[str, ModelUsage] = {}  # what Ray's workers' receipts said
        self._workers_endpoints: Endpoints = {}
        self._workers_cpu_s: dict[int, float] = {}  # per worker: its process's CPU time
        self._workers_gates: dict[int, dict[str, Concurrency]] = {}  # per worker: its providers' gates

    # --- the session ---------------------------------------------------------------------

    def open(self, directory: Path, *, probing: bool) -> None:
        """The ledger of the checkpoint ``directory``: earlier sessions' spend counts."""
        self.costs.open(directory, probing=probing)

    def start(
        self,
        directory: Path,
        *,
        metrics: bool,
        rows: Callable[[], tuple[int, int]],
        num_records: int,
        engine: str,
        resumed: int,
        **about: Any,
    ) -> None:
        """The metrics (per second, into the checkpoint; ``rows``: written and failed so
        far; ``about``: the session line's other fields) and the run's span."""
        if metrics:
            self.metrics = RunMetrics(directory, self.usage, rows).start(
                num_records=num_records, engine=engine, **about
            )
        self.trace = start_run_trace(
            {"genwire.rows.requested": num_records, "genwire.engine": engine, "genwire.resumed": resumed}
        )

    def note(self, kind: str, **payload: Any) -> None:
        if self.metrics is not None:
            self.metrics.note(kind, **payload)

    def attach(self) -> None:
        """Every HTTP provider the run uses meters its requests from now on (probes too)."""
        self.costs.attach()

    def begin_rows(self) -> None:
        """The pre-flight is over: the estimate measures rows, not probes."""
        self.costs.meter.begin_rows()

    def detach(self) -> None:
        self.costs.detach()
        # The estimate's CPU bound: the busiest process's (the workers run side by side).
        meter = self.costs.meter
        meter.rows_cpu_s = max(meter.rows_cpu_s, *self._workers_cpu_s.values(), 0.0)

    # --- what the workers paid for ---------------------------------------------------------

    def feed(self, receipt: Receipt) -> None:
        """A Ray worker's receipt: into the usage, the ledger and the budget, the metrics
        and the per-endpoint figures, as if this process had made its requests."""
        for alias, usage in receipt.usage.items():
            self._workers_usage.setdefault(alias, ModelUsage()).add(usage)
        add_endpoints(self._workers_endpoints, receipt.endpoints)
        for entry in receipt.paid:
            self.budget.paid_elsewhere(entry)
        meter = self.costs.meter
        if receipt.narrowed is not None and meter.narrowed is None:  # said here: the summary's, the terminal's
            # The worker's figure is what was left of its lease of the cap, not the cluster's.
            meter.narrowed = dataclasses.replace(receipt.narrowed, left_usd=None)
            log.warning("%s (on worker %d: its lease of the cap)", meter.narrowed.text(), receipt.worker)
        add_stats(self.costs.meter, receipt.stats)  # what the estimate measures
        self._workers_cpu_s[receipt.worker] = self._workers_cpu_s.get(receipt.worker, 0.0) + receipt.cpu_s
        if receipt.concurrency:
            self._workers_gates[receipt.worker] = latest_gates(
                self._workers_gates.get(receipt.worker, {}), receipt.concurrency
            )
        if self.metrics is not None:
            add_seconds(self.metrics.recorder, receipt.seconds)
            if receipt.since is not None:
                self.metrics.spans(receipt.since)

    # --- what it says ----------------------------------------------------------------------

    @property
    def meter(self) -> CostMeter:
        return self.costs.meter

    @property
    def paid(self) -> bool:
        """Some answer was paid for in this run (the checkpoint keeps the ledger)."""
        return self.costs.paid

    def usage(self) -> dict[str, ModelUsage]:
        """Per model alias: this process's clients' and every worker's."""
        return merge_usage([self.container.usage_by_model(), self._workers_usage])

    def endpoints(self) -> dict[str, dict[str, EndpointStats]]:
        """Per pooled alias, per endpoint: this process's pools' and every worker's."""
        total: Endpoints = {}
        add_endpoints(total, self.container.endpoint_stats())
        add_endpoints(total, self._workers_endpoints)
        return dict(sorted(total.items()))

    def concurrency(self) -> dict[str, Concurrency]:
        """This process's gates, with a Ray run's workers' (their peaks add up)."""
        return cluster_concurrency(self.container.concurrency(), self._workers_gates)

    def cost(self, usage: dict[str, ModelUsage]) -> dict[str, Any]:
        """The summary's ``"cost"`` (SPEC §16)."""
        return self.costs.report(usage)

    # --- the end ---------------------------------------------------------------------------

    def end(
        self,
        error: BaseException | None,
        output: Path,
        *,
        done: Callable[[int], bool],
        counts: dict[str, Any],
        summary: dict[str, Any] | None = None,
        estimate: bool = False,
    ) -> None:
        """However the session ended: the last metrics, the report page, the run's span
        (with each model's figures). Never raises. ``estimate``: the session was an
        estimate's sample, its own ending (``report.end_session``)."""
        usage = self.usage()
        if self.trace is not None:
            try:
                self.trace.traced.set(trace_figures(usage))
            except Exception as exc:  # an exporter's trouble is not the run's
                log.warning("cannot add the run's figures to its trace: %s", exc)
        try:  # what it cost so far, however it ended: the page of a failed pre-flight knows its prices too
            cost: dict[str, Any] | None = self.cost(usage)
        except Exception as exc:
            log.warning("cannot add the run's cost to its report: %s", exc)
            cost = None
        end_session(
            self.metrics,
            self.trace,
            error,
            output,
            done=done,
            counts=counts,
            usage=usage,
            summary=summary,
            cost=cost,
            estimate=estimate,
            reported=self.container.reported_models(),
        )


def trace_figures(usage: dict[str, ModelUsage]) -> dict[str, int]:
    """The run span's per-model figures: requests and tokens of each alias."""
    figures: dict[str, int] = {}
    for alias, u in usage.items():
        figures[f"genwire.model.{alias}.requests"] = u.requests
        figures[f"genwire.model.{alias}.input_tokens"] = u.prompt_tokens
        figures[f"genwire.model.{alias}.output_tokens"] = u.completion_tokens
        figures[f"genwire.model.{alias}.cached"] = u.cached
    return figures
