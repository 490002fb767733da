"""Pre-flight wall time for N chat models at 200 ms latency, against the fake server,
beside a sequential one-after-another baseline (what data-designer 0.9.7 does) measured
in the same run with the same client.

    python benchmarks/preflight_scaling.py [--latency 0.2] [--sizes 1 20 100]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import genwire
from genwire.testing import FakeOpenAIServer


def config(url: str, n: int) -> dict[str, Any]:
    models = {f"m{i}": {"provider": "srv", "model": f"model-{i}", "kind": "chat"} for i in range(n)}
    columns = [
        {"name": f"c{i}", "generator": "llm-text", "resources": {"model": f"m{i}"}, "params": {"prompt": "x"}}
        for i in range(n)
    ]
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": max(n, 1)}},
        "models": models,
        "pipeline": {"columns": columns},
        "preflight": {"concurrency": max(n, 1), "timeout_s": 30, "deadline_s": 120},
    }


async def concurrent(url: str, n: int) -> tuple[float, bool]:
    container = genwire.boot(config(url, n))
    async with container:
        started = time.perf_counter()
        report = await container.preflight()
        return time.perf_counter() - started, report.ok


async def sequential(url: str, n: int) -> float:
    """Baseline: the same probes through the same clients, one after another."""
    container = genwire.boot(config(url, n))
    async with container:
        started = time.perf_counter()
        for i in range(n):
            await container.resource(f"m{i}").complete("Reply with one short word.", max_tokens=16)
        return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 20, 100])
    args = parser.parse_args()
    with FakeOpenAIServer(latency=args.latency) as server:
        print(f"pre-flight of N chat models, {args.latency * 1000:.0f} ms latency each (fake server, 127.0.0.1)")
        print(f"{'N':>5} {'sequential (s)':>15} {'genwire (s)':>12} {'speed-up':>9} {'ok':>4}")
        for n in args.sizes:
            await concurrent(server.url, n)  # warm-up: imports, first connections
            seq = await sequential(server.url, n)
            took, ok = await concurrent(server.url, n)
            print(f"{n:>5} {seq:>15.3f} {took:>12.3f} {seq / took:>8.1f}x {ok!s:>4}")


if __name__ == "__main__":
    asyncio.run(main())
