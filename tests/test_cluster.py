"""The coordinator of a Ray run (SPEC §22), without Ray: its leases never add up to more
than the cap, and a worker with nothing in flight that it cannot serve ends the budget."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from genwire.engine.cluster.shared import Coordinator, worker_meter
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
    assert coordinator.lease(0, (0.3, 0), (0.8, 0), idle=True) is None  # 0.2 free and 0.5 its own, 0.8 asked
    assert coordinator.status().exhausted
    assert coordinator.lease(1, (0.0, 0), (0.01, 0), idle=False) is None  # no one gets more
    assert coordinator._free(0) == pytest.approx(0.7)  # only what worker 0 spent stays committed


def test_an_idle_worker_refused_while_another_holds_room_unspent_waits_for_it_and_the_budget_goes_on() -> None:
    """Issue 49 item 23: the gates' keeper (one request at a time: always idle) asked for room
    the workers' leases held unspent, and ended the budget at 6-7 % of the cap."""
    coordinator = Coordinator(max_cost_usd=1.0, max_tokens=None, spent_usd=0.0, spent_tokens=0, workers=2)
    assert coordinator.lease(0, (0.0, 0), (0.1, 0), idle=False) is not None  # 0.8 leased
    assert coordinator.lease(1, (0.0, 0), (0.1, 0), idle=False) is not None  # the 0.2 left
    assert coordinator.lease(2, (0.0, 0), (0.05, 0), idle=True) is None  # the keeper: nothing free
    assert not coordinator.status().exhausted  # worker 0 holds 0.8 it has not spent
    coordinator.give_back(0, (0.1, 0))  # worker 0's requests settled: it spent 0.1
    assert coordinator.lease(2, (0.0, 0), (0.05, 0), idle=True) is not None
    coordinator.give_back(1, (0.2, 0))
    coordinator.give_back(2, (0.05, 0))
    assert coordinator.lease(0, (0.1, 0), (0.7, 0), idle=True, what=("m", 16)) is None  # 0.65 free
    assert coordinator.status().exhausted and coordinator.status().refused == ("m", 0.7, 16)
    assert coordinator.status().exhausted


def test_a_worker_ray_restarts_leaves_its_dead_processs_lease_counted_and_waits_for_no_one() -> None:
    """A worker Ray restarts asks under the same index from a new process, having spent
    nothing yet: what the dead process was leased stays counted (it may have spent it all),
    and its unspent rest never holds the budget open (no one will give it back)."""
    coordinator = Coordinator(max_cost_usd=1.0, max_tokens=None, spent_usd=0.0, spent_tokens=0, workers=2)
    assert coordinator.lease(0, (0.0, 0), (0.05, 0), idle=False, process="a") == (pytest.approx(0.4), 0)
    # Process a dies holding its lease; process b has spent nothing yet.
    coordinator.give_back(0, (0.0, 0), process="b")
    assert coordinator._free(0) == pytest.approx(0.6)  # a's lease is not forgotten
    assert coordinator.lease(0, (0.0, 0), (0.8, 0), idle=True, process="b") is None  # 0.6 free, 0.8 asked
    assert coordinator.status().exhausted  # not waiting for a to give its lease back


class _Handle:
    """A Ray actor handle's shape over a plain coordinator: ``handle.lease.remote(...)``."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.coordinator, name)

        class Remote:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> asyncio.Future[Any]:
                """Sent at once, as Ray sends it (awaited or not), its answer awaitable."""
                answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                answer.set_result(method(*args, **kwargs))
                return answer

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


async def test_a_worker_whose_answers_settle_during_a_refused_lease_call_ends_the_budget_at_the_coordinator() -> None:
    """The worker asked with requests in flight (not idle: no verdict on the budget), and
    they all settled while the call was on its way: the meter then has nothing in flight,
    so it gives up - and the coordinator, which the driver reads, must know the budget is
    over, or the driver ends the run as finished with rows missing (found under load)."""
    meter = CostMeter({"m": PRICE})
    _, worst = meter.worst_case("m", 400, 100)
    coordinator = Coordinator(max_cost_usd=4 * worst, max_tokens=None, spent_usd=0.0, spent_tokens=0, workers=1)
    holds: list[Any] = []

    class SettlingOnTheWay(_Handle):
        def __getattr__(self, name: str) -> Any:
            method = getattr(self.coordinator, name)

            class Remote:
                @staticmethod
                def remote(*args: Any, **kwargs: Any) -> asyncio.Future[Any]:
                    while holds:  # the answers in flight arrive while the call is on its way
                        meter.settle(holds.pop(), (400, 100), 0.01)
                    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    answer.set_result(method(*args, **kwargs))
                    return answer

            return Remote

    worker_meter(meter, (True, False), SettlingOnTheWay(coordinator), 0)
    meter.settle(await meter.reserve("m", 400, 100), (400, 100), 0.01)  # a model's first request goes alone
    with pytest.raises(BudgetExhausted):
        while True:
            holds.append(await meter.reserve("m", 400, 100))
    assert meter.in_flight == 0
    assert coordinator.status().exhausted  # the driver learns the budget stopped the run


async def test_a_receipt_covering_several_seconds_is_spread_over_them_in_the_report(tmp_path: Any) -> None:
    """Issue 49 item 13: a worker's receipt carries when its figures began (``since``); the
    driver's metrics line spans them, so the requests-per-second plot spreads them over
    those seconds instead of piling them into the driver's current one."""
    import time

    from genwire.engine.records.metrics import RunMetrics
    from genwire.engine.records.receipt import ReceiptBook
    from genwire.engine.report.data import collect
    from genwire.providers.usage import ModelUsage

    usage = {"writer": ModelUsage()}
    metrics = RunMetrics(tmp_path, lambda: usage, lambda: (0, 0)).start(num_records=12, engine="ray")
    book = ReceiptBook()  # a worker's, made as its session starts
    await asyncio.sleep(3.0)  # the worker paid for 12 answers over these seconds, the driver heard of none
    usage["writer"].requests = 12
    receipt = book.take(usage, {})
    assert receipt.since is not None and time.time() - receipt.since >= 3.0
    metrics.spans(receipt.since)
    metrics.end(None)
    bins = collect(tmp_path, tmp_path / "out.jsonl").bins(count=10_000)
    rates = [b.requests.get("writer", 0) / b.width for b in bins]
    assert round(sum(rates)) == 12
    assert max(rates) <= 12 / 3 + 1.5, rates  # not 12 in the last second


@pytest.mark.parametrize("workers_start_s", [9.0, None])
def test_the_estimate_table_says_the_ray_workers_start_up_is_in_its_duration(workers_start_s: float | None) -> None:
    """Issue 49 item 20: a Ray estimate's duration includes the start-up, and says so."""
    from genwire.cli.commands.estimate_command import estimate_table
    from genwire.engine.money.estimate import Estimate

    found = Estimate(
        sample_rows=1, sample_failed=0, sample_duration_s=10.0, sample_cost_usd=None, rows_total=2, rows_done=1,
        rows_left=1, batch=False, models=[], providers=[], requests=0, input_tokens=0, output_tokens=0,
        cost_usd=None, worst_cost_usd=None, duration_s=10.5, binding_limit="max_concurrency 8 (srv)",
        workers_start_s=workers_start_s,
    )  # fmt: skip
    caption = str(estimate_table(found).caption)
    assert caption.startswith("duration ≈ 10.5 s, bound by max_concurrency 8 (srv)")
    assert ("includes the Ray workers' start-up, 9.0 s in the sample" in caption) == (workers_start_s is not None)
