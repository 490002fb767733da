"""The failure-rate stop on the Ray engine (issue 49 item 10): each worker judges the rows it
settles with the same rule as the local engine and stops sending at once, tells the other
workers and the driver; so with a 400 on every row the cluster sends at most each worker's
sample plus one round of ``max_concurrency`` (split between the workers), where judging
whole blocks on the driver sent every block in flight. Real HTTP against the fake server,
which counts the requests; the Ray instance and its actors are the ones ``test_ray``'s
fixtures start and check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_failure_stop import CONCURRENCY, config, gated
from test_ray import WORKERS, ray_cluster, ray_workers  # noqa: F401 - the fixtures

import genwire
from genwire.engine.rows.failure_stop import MIN_ROWS_FOR_RATE, FailureStop
from genwire.testing import FakeOpenAIServer


async def run_on_ray(cfg: dict[str, Any]) -> Any:
    async with genwire.boot(cfg) as container:
        return await container.run(engine="ray", ray_workers=WORKERS, skip_preflight=True)


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.mark.parametrize("with_gate", [False, True])
async def test_a_ray_run_with_a_400_on_every_row_stops_within_each_workers_sample_and_one_round(
    ray_workers: Any,  # noqa: F811 - the fixture
    server: FakeOpenAIServer,
    tmp_path: Path,
    with_gate: bool,
) -> None:
    """With a gate, ``num_records`` counts kept rows: the plan's first window is one
    candidate per row wanted (1,000), all sent before the first block was judged."""
    server.fail_when("writer", "", 400)
    cfg = config(server, tmp_path, 1000)
    if with_gate:
        cfg = gated(cfg)
    with pytest.raises(genwire.RunError, match=r"stopped after \d+ rows: \d+ failed \(100%\), above max_failure_rate"):
        await run_on_ray(cfg)
    server.wait_idle()
    # Each worker's judge stops it within its sample and its share of max_concurrency, by
    # construction (whatever reaches it from the others, and whenever).
    assert server.requests["writer"] <= WORKERS * MIN_ROWS_FOR_RATE + CONCURRENCY
    failed = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert len(failed) == server.requests["writer"]  # a row never sent is not failed: dropped for the rerun

    server.clear()  # the fault clears: the rerun makes every row, the dropped ones too
    result = await run_on_ray(cfg)
    assert result.rows_written == 1000 and result.rows_failed == 0


async def test_a_ray_run_with_scattered_failures_below_the_rate_finishes(
    ray_workers: Any,  # noqa: F811 - the fixture
    server: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    server.fail_rate("writer", 0.03, (400,), seed=1)
    result = await run_on_ray(config(server, tmp_path, 640))
    assert result.rows_written + result.rows_failed == 640
    assert 0 < result.rows_failed < 64
    assert server.requests["writer"] == 640  # each row sent once


async def test_a_stopping_driver_starts_no_block_and_after_a_reopen_makes_the_dropped_rows(
    ray_workers: Any,  # noqa: F811 - the fixture
    server: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    """While the session's judge is stopping the driver starts no block; once the written
    rows did not confirm the stop (rows decided from the cache after it), the session asks
    the same engine again for the dropped rows: its workers (ended with the first call)
    start again, with judges of their own that know nothing of the stop."""
    from genwire.engine.cluster.driver import RayBatches

    judge = FailureStop(0.1)

    async def rows(engine: RayBatches, indices: range) -> list[int]:
        return [row async for result in engine.batches(iter(indices), 16) for row in result.indices]

    async with genwire.boot(config(server, tmp_path, 128)) as container:
        engine = RayBatches(container, None, WORKERS, failure_stop=judge)
        try:
            assert await rows(engine, range(64)) == list(range(64))
            judge.halt()
            assert await rows(engine, range(64, 128)) == []
            assert server.requests["writer"] == 64
            judge.reopen()
            assert await rows(engine, range(64, 128)) == list(range(64, 128))
        finally:
            await engine.aclose()
    assert server.requests["writer"] == 128
