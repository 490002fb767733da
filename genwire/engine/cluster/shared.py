"""What the workers of a Ray run share (SPEC §22): the budget, each model's brake, and
the endpoints out.

The budget's ``Coordinator`` is one Ray actor per capped run (one thread: its calls never
interleave); each worker's cost meter spends a *lease* of the cap.

The budget as leases
--------------------
A worker's ``CostMeter`` reserves and settles every request exactly as the local
engine's does, but its cap is the sum of the leases it was granted. When a request's
worst case does not fit in its lease, the meter asks for more (``WorkerLease.more``: one
call to the coordinator), which grants a slice of what no worker holds:
``max(LEASE_REQUESTS * the worst case, free / (2 * workers))``, at most what is free.
The leases never add up to more than the cap less what was spent before, and each worker
never spends past its lease by more than one request's estimate error (its meter's own
guarantee), so the cluster's spend never passes the cap by more than one request's worst
case per worker.

* A worker whose requests have all settled gives back what it holds unspent
  (``WorkerLease.give_back``, not awaited): a share is held only while it is used, so the
  gates' keeper (one request at a time) and a worker between blocks are not refused while
  another worker sits on room it does not need (issue 49 item 23: a keep-novel run stopped
  at 6-7 % of its cap).
* A refusal (less is free than the worst case) makes the request wait for the worker's
  own requests in flight, as locally; with none in flight the worker gives back what it
  holds unspent and, while another worker still holds a lease unspent, asks again after
  ``LEASE_WAIT_S``; once no one does, the coordinator is *exhausted*, and the worker refuses
  every later request (its rows are neither kept nor failed: a resumed run makes them). The driver
  reads the coordinator after every block and takes no new rows once it is exhausted;
  the run then stops with exit 3 as locally.
* What each request costs the coordinator: nothing while the worker's lease covers it
  (the meter's own arithmetic). A lease call is one round trip per slice: since a slice
  is a share of what is free, a run makes about ``2 * workers * ln(cap / worst case)``
  of them plus one per ``LEASE_REQUESTS`` requests near the cap; the driver adds one
  call per block. Without a cap there is no coordinator at all.

One brake per model for the cluster
-----------------------------------
A worker's gate brakes a model on its own evidence (SPEC §10: 429s that persist); the
first 429 of an overload (``ProviderGate.on_brake``) is sent straight to every other
worker (``BlockWorker.brake``; every block carries the others' handles, the
``engine.cluster.wire.Roster``): their gate for that model of that endpoint pauses for
the same ``Retry-After``, halves its concurrency and learns its rate from its own
successes, exactly as if the 429s had been its own; no other model and no other
endpoint is touched. A stray 429 sends nothing. What it costs: one message to each other
worker per overload, none per request, and no extra process. ``rate_limit`` is the
cluster's: each worker paces at its share (the Ray engine splits it).

Pools
-----
Every worker routes, cools down and fails over on its own pools (SPEC §17), starting
from what the driver knows (the pre-flight's verdicts, ``WiredPipeline.endpoint_verdicts``);
a member one worker takes out for the run (``auth``, ``not_found``: ``EndpointPool.on_out``)
is passed, the same way as a brake, to every other worker, whose pool marks it out.

A worker Ray restarts (its process died) gets the roster again with the block it re-runs
(its peers' handles, the driver's verdicts, the coordinator) before any request: its brakes
and endpoints out still reach the others, and its budget's lease is asked again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from genwire.engine.cluster.coordinator import BudgetStatus, Coordinator
from genwire.engine.money.costs import RunCosts
from genwire.engine.records.receipt import LedgerEntry
from genwire.errors import BudgetStopped
from genwire.providers.budget import CostMeter

__all__ = ["BudgetStatus", "ClusterBudget", "Coordinator", "WorkerLease", "worker_meter"]

LEASE_WAIT_S = 0.05  # a worker refused while another holds unspent room asks again after this


class WorkerLease:
    """A worker's side: its meter's cap is what it was leased; ``more`` asks for more."""

    def __init__(self, coordinator: Any, worker: int, meter: CostMeter, process: str = "") -> None:
        self._coordinator = coordinator  # a Ray actor handle
        self._worker = worker
        self._process = process  # a worker Ray restarts leases afresh; its predecessor's lease stays counted
        self._meter = meter
        self._asking: Any = None  # one lease call at a time (an asyncio.Lock, made in the loop)

    def give_back(self) -> None:
        """Nothing in flight: the rest of the lease goes back to the coordinator (not awaited;
        a later lease call of this worker reaches it after this one), so the other workers and
        the gates' keeper are not refused while this worker holds room it does not use."""
        meter = self._meter
        if self._asking is not None and self._asking.locked():
            return  # a lease call under way: its grant must not be given back before it is counted
        if meter.max_cost_usd is not None:
            meter.max_cost_usd = meter.spent_usd
        if meter.max_tokens is not None:
            meter.max_tokens = meter.spent_tokens
        self._coordinator.give_back.remote(self._worker, (meter.spent_usd, meter.spent_tokens), self._process)

    async def more(self, tokens: int, usd: float, what: tuple[str, int]) -> bool:
        if self._asking is None:
            self._asking = asyncio.Lock()
        meter = self._meter
        async with self._asking:
            if meter.fits(tokens, usd):
                return True  # another request's lease made room meanwhile
            while True:
                spent = (meter.spent_usd, meter.spent_tokens)
                idle = meter.in_flight == 0
                grant = await self._coordinator.lease.remote(
                    self._worker, spent, (usd, tokens), idle=idle, what=what, process=self._process
                )
                if grant is not None:
                    break
                if idle:  # given back: this worker's cap is what it spent
                    meter.max_cost_usd = None if meter.max_cost_usd is None else meter.spent_usd
                    meter.max_tokens = None if meter.max_tokens is None else meter.spent_tokens
                    if (await self._coordinator.status.remote()).exhausted:
                        return False
                    await asyncio.sleep(LEASE_WAIT_S)  # another worker gives its unspent share back as it settles
                    continue
                if meter.in_flight:
                    return False  # the meter waits for an answer to settle, then asks again
                # The worker's last requests settled during the call: asked again as idle, so
                # the coordinator (which the driver reads) ends the budget, not this meter alone.
            if meter.max_cost_usd is not None:
                meter.max_cost_usd += grant[0]
            if meter.max_tokens is not None:
                meter.max_tokens += grant[1]
            return True


def worker_meter(meter: CostMeter, caps: tuple[bool, bool], coordinator: Any, worker: int, process: str = "") -> None:
    """Make ``meter`` spend leases of the cluster's cap (``caps``: usd capped, tokens capped)
    for ``worker``'s process ``process``."""
    meter.max_cost_usd = 0.0 if caps[0] else None
    meter.max_tokens = 0 if caps[1] else None
    lease = WorkerLease(coordinator, worker, meter, process)
    meter.more_room, meter.on_idle = lease.more, lease.give_back


class ClusterBudget:
    """The driver's ``Budget`` for a Ray run: the run's ``RunCosts`` (the ledger, the
    receipts' spend, the stop message) and the coordinator's word on exhaustion."""

    def __init__(self, costs: RunCosts) -> None:
        self.costs = costs
        self._exhausted = False
        self.leases = 0

    @property
    def capped(self) -> bool:
        return self.costs.meter.capped

    @property
    def caps(self) -> tuple[bool, bool]:
        """A cost cap, a token cap."""
        meter = self.costs.meter
        return meter.max_cost_usd is not None, meter.max_tokens is not None

    def coordinator_args(self, workers: int) -> dict[str, Any]:
        """The ``Coordinator``'s arguments for a cluster of ``workers``: what the driver's
        meter spent so far (earlier sessions, the probes) is not leased."""
        meter = self.costs.meter
        return {
            "max_cost_usd": meter.max_cost_usd,
            "max_tokens": meter.max_tokens,
            "spent_usd": meter.spent_usd,
            "spent_tokens": meter.spent_tokens,
            "workers": workers,
        }

    def note(self, status: BudgetStatus) -> None:
        """The coordinator's status, read by the Ray engine after every block."""
        self._exhausted = self._exhausted or status.exhausted
        if status.refused is not None:  # the stop message says what one request may cost, as locally
            self.costs.meter.refused_elsewhere(*status.refused)
        self.leases = status.leases

    def exhausted(self) -> bool:
        return self._exhausted or self.costs.exhausted()

    def hold_rows(self, rows_done: int, rows_live: int, batch_rows: int) -> bool:
        return self.exhausted() or self.costs.hold_rows(rows_done, rows_live, batch_rows)

    def paid_elsewhere(self, entry: LedgerEntry) -> None:
        self.costs.paid_elsewhere(entry)

    def stopped(self, checkpoint: Path, kept: int, total: int, result: Any = None) -> BudgetStopped:
        return self.costs.stopped(checkpoint, kept, total, result)
