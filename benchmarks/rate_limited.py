"""Runs against an endpoint that admits R requests/s (429 + Retry-After: 1 beyond it).

200 llm-text rows at 20 ms latency. For each case: rows/s against R, failed rows, and
429s as a share of all requests, for (a) the adaptation switched off (each request
retries on its own, bounded by ``retries``: the baseline), (b) adaptive with no
``rate_limit``, (c) adaptive with ``requests_per_minute: 60·R``.

    python benchmarks/rate_limited.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import genwire
from genwire.errors import RunStopped
from genwire.testing import FakeOpenAIServer

ROWS = 200
LATENCY_S = 0.02


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


async def main() -> None:
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


if __name__ == "__main__":
    asyncio.run(main())
