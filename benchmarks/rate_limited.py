"""Rate adaptation (SPEC §10), three situations, each against a baseline of the same run:

1. **At the limit.** An endpoint that admits R requests/s (429 + Retry-After: 1 beyond
   it); 200 llm-text rows at 20 ms latency. Rows/s against R, failed rows, and 429s as a
   share of all requests, for (a) the adaptation switched off (each request retries on
   its own, bounded by ``retries``: the baseline), (b) adaptive with no ``rate_limit``,
   (c) adaptive with ``requests_per_minute: 60·R``.
2. **Sporadic 429s.** A fast endpoint (10 ms, ``max_concurrency: 32``) that answers 2 %
   of requests, at random, with 429 + Retry-After: 1 (and one with 5 % mixed faults);
   1,500 and 6,000 rows. Rows/s against the same run without those faults, measured in
   the same process; the budget (once a test's assert, a race on a loaded machine): the
   adaptive run within 80 % of the ceiling, clean time / (clean time + Retry-After).
3. **Per model.** Two models on one provider (``max_concurrency: 32``), one behind a
   5 requests/s limit: the unlimited model's requests/s beside the limited one's load,
   against its requests/s alone.

    python benchmarks/rate_limited.py [--only limit|sporadic|per-model] [--sporadic-rows 1500 6000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import genwire
from genwire.errors import RunStopped
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

ROWS = 200
LATENCY_S = 0.02
ADAPTIVE = "2 % 429s, adaptive"
BUDGET = 0.8  # of the ceiling: the adaptive run's rows/s against the clean run's


def config(url: str, concurrency: int, out: Path, provider_extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency, **provider_extra},
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "num_records": ROWS,
            "output": str(out),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {
                    "name": "text",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Write about {{ uid }}"},
                },
            ],
        },
    }


async def measure(server: FakeOpenAIServer, rate: float, concurrency: int, extra: dict[str, Any]) -> str:
    server.reset_stats()
    server.rate_limit(None)
    server.rate_limit(rate)  # a full bucket: each case starts alike
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(server.url, concurrency, Path(tmp) / "out.jsonl", extra)
        async with genwire.boot(cfg) as container:
            try:
                result = await container.run(skip_preflight=True)
                rows_per_s, failed, note = result.rows_per_s, result.rows_failed, ""
            except RunStopped as exc:
                rows_per_s, failed, note = 0.0, ROWS - exc.kept, f"  stopped above max_failure_rate ({exc.kept} kept)"
    share = server.rate_limited / max(1, server.total_requests)
    return f"{rows_per_s:>9.1f} {rows_per_s / rate:>8.0%} {failed:>7} {share:>7.0%} {server.total_requests:>9}{note}"


async def run_rows(url: str, rows: int, provider_extra: dict[str, Any]) -> tuple[float, int, dict[str, Any]]:
    """One run of ``rows`` llm-text rows: rows/s, failed rows, and the writer's usage."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(url, 32, Path(tmp) / "out.jsonl", provider_extra)
        cfg["pipeline"]["num_records"] = rows
        cfg["pipeline"]["max_failure_rate"] = 1.0
        async with genwire.boot(cfg) as container:
            result = await container.run(skip_preflight=True)
        usage = result.usage["writer"].as_dict()
        pauses = sum(c.pauses for c in result.concurrency.values())
        return result.rows_per_s, result.rows_failed, {**usage, "pauses": pauses}


async def sporadic(sizes: list[int]) -> None:
    stray = FakeResponse(429, headers={"Retry-After": "1"})
    print("\nllm-text rows, 10 ms latency, max_concurrency 32; 2 % of answers a random 429 + Retry-After: 1")
    print(
        "(ceiling: a stray 429 among the last rows delays the run's end by its Retry-After, so no client that "
        "honours it beats clean time / (clean time + 1 s))"
    )
    print(
        f"{'rows':>6} {'case':<36} {'rows/s':>9} {'of clean':>9} {'ceiling':>8} {'failed':>7} {'429s':>6} "
        f"{'pauses':>7} {'budget':>7}"
    )
    with FakeOpenAIServer(latency=0.01) as server:
        await run_rows(server.url, 200, {})  # warm-up: imports, first connections
        for rows in sizes:
            clean, _, _ = await run_rows(server.url, rows, {})
            ceiling = (rows / clean) / (rows / clean + 1.0)
            baseline = "clean (no 429s): the baseline"
            print(f"{rows:>6} {baseline:<36} {clean:>9.1f} {1:>9.0%} {'':>8} {0:>7} {0:>6} {0:>7}")
            cases: list[tuple[str, float, list[Any], dict[str, Any]]] = [
                (ADAPTIVE, 0.02, [stray], {}),
                ("2 % 429s, adapt_to_rate_limits off", 0.02, [stray], {"adapt_to_rate_limits": False, "retries": 5}),
                ("5 % mixed faults (503, 429, reset)", 0.05, [503, stray, "reset"], {}),
            ]
            for name, share, faults, provider in cases:
                server.fail_rate("writer", share, faults, seed=7)
                rate, failed, usage = await run_rows(server.url, rows, provider)
                server.clear()
                budget = "" if name != ADAPTIVE else ("met" if rate / clean >= BUDGET * ceiling else "MISSED")
                print(
                    f"{rows:>6} {name:<36} {rate:>9.1f} {rate / clean:>9.0%} {ceiling:>8.0%} {failed:>7} "
                    f"{usage['rate_limited']:>6} {usage['pauses']:>7} {budget:>7}"
                )


async def drive(model: Any, requests: int, workers: int) -> float:
    """``requests`` completions through ``workers`` concurrent callers: requests/s."""
    counter = iter(range(requests))

    async def worker() -> None:
        for i in counter:
            await model.complete(f"p{i}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return requests / (time.perf_counter() - started)


async def per_model() -> None:
    free_requests, limited_rate = 1500, 5.0
    print(
        f"\ntwo models on one provider (max_concurrency 32, 10 ms latency); 'limited' admits {limited_rate:g} "
        "requests/s (429 + Retry-After: 1 beyond)"
    )
    print(f"{'case':<40} {'free requests/s':>16} {'of solo':>8} {'limited answered':>19}")
    models = {name: {"provider": "srv", "model": name, "kind": "chat"} for name in ("free", "limited")}
    with FakeOpenAIServer(latency=0.01) as server:
        server.rate_limit(limited_rate, model="limited")
        cfg = {
            "providers": {"srv": {"kind": "openai", "base_url": server.url, "max_concurrency": 32}},
            "models": models,
            "pipeline": {"columns": [{"name": "x", "generator": "sampler", "params": {"kind": "uuid"}}]},
        }
        async with genwire.boot(cfg) as container:
            free, limited = container.resource("free"), container.resource("limited")
            await drive(free, 200, 16)  # warm-up
            solo = await drive(free, free_requests, 32)
            print(f"{'free alone: the baseline':<40} {solo:>16.1f} {1:>8.0%} {'-':>19}")
            limited_task = asyncio.ensure_future(drive(limited, 10_000, 32))
            await asyncio.sleep(2.0)  # the limited model is at its limit before we measure
            beside = await drive(free, free_requests, 32)
            limited_task.cancel()
            await asyncio.gather(limited_task, return_exceptions=True)
            done = server.requests["limited"] - server.rate_limited
            print(f"{'free beside limited (at its limit)':<40} {beside:>16.1f} {beside / solo:>8.0%} {done:>19}")


async def at_the_limit() -> None:
    cases = [
        ("(a) per-request retries", {"adapt_to_rate_limits": False}),
        ("(b) adaptive", {}),
        ("(c) adaptive + rpm 60·R", None),
    ]
    with FakeOpenAIServer(latency=LATENCY_S) as server:
        print(
            f"{ROWS} llm-text rows, {LATENCY_S * 1000:.0f} ms latency; "
            "server admits R requests/s, then 429 + Retry-After: 1"
        )
        print(
            f"{'R':>3} {'in flight':>9} {'case':<26} {'rows/s':>9} {'of R':>8} {'failed':>7} {'429s':>7} "
            f"{'requests':>9}"
        )
        for rate, concurrency in ((20.0, 16), (5.0, 64)):
            for name, extra in cases:
                extra = extra if extra is not None else {"rate_limit": {"requests_per_minute": 60 * rate}}
                line = await measure(server, rate, concurrency, extra)
                print(f"{rate:>3.0f} {concurrency:>9} {name:<26} {line}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["limit", "sporadic", "per-model"])
    parser.add_argument("--sporadic-rows", type=int, nargs="+", default=[1500, 6000], help="rows of the sporadic runs")
    args = parser.parse_args()
    if args.only in (None, "limit"):
        await at_the_limit()
    if args.only in (None, "sporadic"):
        await sporadic(args.sporadic_rows)
    if args.only in (None, "per-model"):
        await per_model()


if __name__ == "__main__":
    asyncio.run(main())
