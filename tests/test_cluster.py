"""The coordinator of a Ray run (SPEC §22), without Ray: its leases never add up to more
than the cap, and a worker with nothing in flight that it cannot serve ends the budget."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from genwire.engine.cluster import Coordinator, worker_meter
from genwire.errors import BudgetExhausted
from genwire.providers.budget import CostMeter
from genwire.providers.pricing import Price

PRICE = Price(1e-6, 2e-6, 0.0, 0.0, "test")


def test_leases_never_add_up_to_more_than_the_cap_less_what_was_spent_before() -> None:
    coordinator = Coordinator(max_cost_usd=1.0, max_tokens=None, spent_usd=0.2, spent_tokens=0, workers=2)
    granted = 0.0
    for turn in range(200):
        grant = coordinator.lease(turn % 2, (0.0, 0), (0.01, 0), idle=False)
        if grant is None:
            break
        granted += grant[0]
    assert granted == pytest.approx(0.8) and grant is None
    assert not coordinator.status().exhausted  # both workers may still have requests in flight


def test_an_idle_worker_refused_gives_back_what_it_holds_unspent_and_ends_the_budget() -> None:
    coordinator = Coordinator(max_cost_usd=1.0, max_tokens=None, spent_usd=0.0, spent_tokens=0, workers=1)
    first = coordinator.lease(0, (0.0, 0), (0.1, 0), idle=False)
    assert first is not None and first[0] == pytest.approx(0.8)  # 8 times the worst case asked
    assert coordinator.lease(0, (0.3, 0), (0.5, 0), idle=True) is None  # 0.2 free, 0.5 asked
    assert coordinator.status().exhausted
    assert coordinator.lease(1, (0.0, 0), (0.01, 0), idle=False) is None  # no one gets more
    assert coordinator._free(0) == pytest.approx(0.7)  # only what worker 0 spent stays committed


class _Handle:
    """A Ray actor handle's shape over a plain coordinator: ``handle.lease.remote(...)``."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.coordinator, name)

        class Remote:
            @staticmethod
            async def remote(*args: Any, **kwargs: Any) -> Any:
                return method(*args, **kwargs)

        return Remote


async def test_two_worker_meters_spend_the_cluster_cap_and_no_more() -> None:
    cap = 0.1  # about 160 requests
    coordinator = Coordinator(max_cost_usd=cap, max_tokens=None, spent_usd=0.0, spent_tokens=0, workers=2)
    meters = [CostMeter({"m": PRICE}) for _ in range(2)]
    for i, meter in enumerate(meters):
        worker_meter(meter, (True, False), _Handle(coordinator), i)

    async def spend(meter: CostMeter) -> int:
        sent = 0
        while True:
            try:
                hold = await meter.reserve("m", 400, 100)
            except BudgetExhausted:
                return sent
            await asyncio.sleep(0)
            meter.settle(hold, (400, 100), 0.01)  # the worst case, less its margin
            sent += 1

    sent = await asyncio.gather(*(spend(m) for m in meters))
    assert all(sent)  # both workers spent
    spent = sum(m.spent_usd for m in meters)
    assert spent <= cap
    _, worst = meters[0].worst_case("m", 400, 100)
    # Near the cap: what no worker could use is less than a worst case free, plus less than
    # one in each worker's lease.
    assert spent > cap - 3 * worst
    assert coordinator.status().exhausted
