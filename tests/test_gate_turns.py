"""GateTurns (engine/gates/turns.py): batches pass an in-order gate in index order, however
they arrive, and a pass wakes the next batch alone."""

from __future__ import annotations

import asyncio
import random

from genwire.engine.gates.turns import GateTurns


async def nothing() -> None:
    """The gate's first-turn preparation: nothing to remember here."""


async def test_batches_pass_in_index_order_however_they_arrive_and_a_retried_lower_batch_goes_first() -> None:
    turns = GateTurns(["novel"])
    passed: list[int] = []
    keys = list(range(0, 640, 64))
    for key in keys:
        turns.enter(key)

    async def batch(key: int, delay: float) -> None:
        await asyncio.sleep(delay)
        await turns.turn("novel", key, nothing)
        passed.append(key)
        turns.passed("novel", key)
        turns.leave(key)

    rng = random.Random(5)
    tasks = [asyncio.create_task(batch(key, rng.random() / 100)) for key in reversed(keys[1:])]
    await asyncio.sleep(0.02)  # the higher batches wait at the gate, parked
    assert turns.parked == len(keys) - 1 and passed == []
    turns.enter(-64)  # a lower batch (a retried one) enters late: it goes first
    tasks.append(asyncio.create_task(batch(-64, 0)))
    tasks.append(asyncio.create_task(batch(0, 0)))
    await asyncio.gather(*tasks)
    assert passed == [-64, *keys] and turns.parked == 0


async def test_a_cancelled_waiter_holds_no_gate_up() -> None:
    turns = GateTurns(["g"])
    for key in (0, 1, 2):
        turns.enter(key)
    order: list[int] = []

    async def batch(key: int) -> None:
        try:
            await turns.turn("g", key, nothing)
            order.append(key)
            turns.passed("g", key)
        finally:
            turns.leave(key)

    one, two = asyncio.create_task(batch(1)), asyncio.create_task(batch(2))
    await asyncio.sleep(0)
    one.cancel()
    await asyncio.sleep(0)
    await batch(0)
    await asyncio.wait_for(two, timeout=5)
    assert order == [0, 2] and turns.parked == 0
