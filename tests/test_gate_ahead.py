"""An in-order gate's order-free work (``Generator.ahead``) runs for the batches behind the
one being judged, before their turn: the engine does not hold it behind the gate."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import genwire
from genwire.engine.rows.runner import BatchRunner
from genwire.generators.base import Generator
from genwire.generators.metadata import GeneratorMetadata


class WaitsForTheNextBatch(Generator[Any]):
    """Keeps every row; batch 0's verdict waits until batch 4's ``ahead`` has run (a gate
    whose batches behind it were held until its turn would never see it)."""

    metadata = GeneratorMetadata(name="waits-for-next", description="test gate", required_resources={}, gate=True)
    in_order = True
    ahead_of: list[int] = []
    next_ahead: asyncio.Event | None = None

    async def ahead(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> None:
        type(self).ahead_of.append(indices[0])
        if indices[0] == 4 and type(self).next_ahead is not None:
            type(self).next_ahead.set()

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        if indices[0] == 0 and type(self).next_ahead is not None:
            await asyncio.wait_for(type(self).next_ahead.wait(), timeout=60)
        return [True for _ in rows]


async def test_the_batch_behind_does_its_order_free_work_while_the_first_is_judged(tmp_path: Path) -> None:
    WaitsForTheNextBatch.next_ahead = asyncio.Event()
    WaitsForTheNextBatch.ahead_of = []
    cfg = {
        "pipeline": {
            "num_records": 8,
            "seed": 1,
            "batch_size": 4,
            "output": str(tmp_path / "out.jsonl"),
            "columns": [
                {"name": "n", "generator": "sampler", "params": {"kind": "uniform", "low": 0, "high": 9}},
                {"name": "gate", "generator": "waits-for-next"},
            ],
        }
    }
    async with genwire.boot(cfg, generators=(WaitsForTheNextBatch,)) as container:
        runner = BatchRunner(container)
        first, behind = await asyncio.gather(runner.run([0, 1, 2, 3]), runner.run([4, 5, 6, 7]))
    assert first.indices == [0, 1, 2, 3] and behind.indices == [4, 5, 6, 7]
    assert sorted(WaitsForTheNextBatch.ahead_of) == [0, 4]
