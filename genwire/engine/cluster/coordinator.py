"""The budget's coordinator of a capped Ray run (SPEC §22): one Ray actor per run that
leases slices of the cap to the workers' meters (see ``engine.cluster.shared`` for the design).

Standard library only: its actor process boots while the workers do, and it must be
answering before their first request asks for a lease.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LEASE_REQUESTS", "BudgetStatus", "Coordinator"]

LEASE_REQUESTS = 8  # a lease covers at least this many of the asking request's worst case


@dataclass(frozen=True)
class BudgetStatus:
    exhausted: bool
    leases: int  # lease calls answered (the coordinator's work)
    refused: tuple[str, float, int] | None = None  # the request that ended it: (alias, usd, max_tokens)


Holder = tuple[int, str]  # a worker's index and its process (a worker Ray restarts is a new process)


class Coordinator:
    """The cluster's budget: caps, what was spent before the workers started, and each
    worker process's leases and reported spend. Plain Python: the Ray engine makes it an actor.

    A worker Ray restarts (its process died) asks under the same index from a new process:
    the dead one's lease stays counted whole (it may have spent all of it since it last
    said: its requests were paid for), never given back nor waited for."""

    def __init__(
        self, *, max_cost_usd: float | None, max_tokens: int | None, spent_usd: float, spent_tokens: int, workers: int
    ) -> None:
        self._caps = (max_cost_usd, max_tokens)
        self._before = (spent_usd, float(spent_tokens))
        self._workers = max(1, workers)
        self._leased: dict[Holder, list[float]] = {}  # per process: (usd, tokens) granted, less what it gave back
        self._spent: dict[Holder, tuple[float, float]] = {}  # per process: as it last reported
        self._dead: set[Holder] = set()  # processes a later one of the same worker replaced
        self.exhausted = False
        self.leases = 0
        self.refused: tuple[str, float, int] | None = None

    def begin(self, *, spent_usd: float, spent_tokens: int) -> None:
        """What was spent before the workers' first request, now that it is known (the
        coordinator is made while the pre-flight's probes are still being paid for)."""
        self._before = (spent_usd, float(spent_tokens))

    def _free(self, dim: int) -> float:
        cap = self._caps[dim]
        if cap is None:
            return math.inf
        committed = sum(
            max(leased[dim], self._spent.get(worker, (0.0, 0.0))[dim]) for worker, leased in self._leased.items()
        )
        return cap - self._before[dim] - committed

    def lease(
        self,
        worker: int,
        spent: tuple[float, int],
        need: tuple[float, int],
        *,
        idle: bool,
        what: tuple[str, int] | None = None,
        process: str = "",
    ) -> tuple[float, int] | None:
        """More room for ``worker`` (which has spent ``spent`` so far and asks for at least
        ``need``), or None. ``idle``: nothing of the worker's is in flight, so a refusal
        ends its spending: it gives back what it holds unspent and the budget is exhausted.
        ``what``: the asking request's model and ``max_tokens``, for the stop message;
        ``process``: the worker's process."""
        self.leases += 1
        holder = self._holder(worker, process)
        leased = self._leased.setdefault(holder, [0.0, 0.0])
        self._spent[holder] = (spent[0], float(spent[1]))
        free = [self._free(0), self._free(1)]
        # An idle worker has nothing reserved: the rest of its lease counts towards the request.
        short = [need[d] - (max(0.0, leased[d] - spent[d]) if idle else 0.0) for d in (0, 1)]
        if self.exhausted or any(free[d] < short[d] for d in (0, 1) if self._caps[d] is not None):
            if idle:
                for d in (0, 1):
                    leased[d] = min(leased[d], float(spent[d]))  # the unspent rest is free again
                # Spent, unless another worker still holds a share unspent: it gives that back
                # when its requests settle, and the asking worker asks again (``status``).
                if not self.exhausted and not self._held_elsewhere(holder):
                    self.exhausted = True
                    self.refused = None if what is None else (what[0], need[0], what[1])
            return None
        grant = [0.0, 0.0]
        for d in (0, 1):
            if self._caps[d] is not None:
                grant[d] = min(free[d], max(need[d] * LEASE_REQUESTS, free[d] / (2 * self._workers)))
                leased[d] += grant[d]
        return grant[0], math.floor(grant[1])

    def give_back(self, worker: int, spent: tuple[float, int], process: str = "") -> None:
        """``worker`` has nothing in flight: what it holds beyond ``spent`` is free again."""
        holder = self._holder(worker, process)
        self._spent[holder] = (spent[0], float(spent[1]))
        leased = self._leased.get(holder)
        if leased is not None:
            for d in (0, 1):
                leased[d] = min(leased[d], float(spent[d]))

    def _holder(self, worker: int, process: str) -> Holder:
        """``worker``'s process; an earlier process of the same worker is dead from now on."""
        holder = (worker, process)
        if holder not in self._leased:
            self._dead.update(other for other in self._leased if other[0] == worker)
        return holder

    def _held_elsewhere(self, holder: Holder) -> bool:
        """Whether a live process other than ``holder`` holds a lease it has not spent (as it last said)."""
        for other, leased in self._leased.items():
            spent = self._spent.get(other, (0.0, 0.0))
            if other == holder or other in self._dead:
                continue
            if any(leased[d] > spent[d] for d in (0, 1) if self._caps[d] is not None):
                return True
        return False

    def status(self) -> BudgetStatus:
        return BudgetStatus(self.exhausted, self.leases, self.refused)
