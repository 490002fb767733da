"""Pre-flight wall time for N chat models at 200 ms latency, against the fake server,
beside a sequential one-after-another baseline (what data-designer 0.9.7 does) measured
in the same run with the same client.

    python benchmarks/preflight_scaling.py [--latency 0.2] [--sizes 1 20 100]

The last row, 20x2, gives each model a plain and a structured request shape: shapes are
probed concurrently like models, so it should take about as long as 20 models.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import genwire
from genwire.testing import FakeOpenAIServer

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def config(url: str, n: int, shapes: bool = False) -> dict[str, Any]:
    """N models, one llm-text column each; with ``shapes`` also an llm-structured column
    each, so every model is probed twice (plain + structured shape)."""
    models = {f"m{i}": {"provider": "srv", "model": f"model-{i}", "kind": "chat"} for i in range(n)}
    columns = [
        {"name": f"c{i}", "generator": "llm-text", "resources": {"model": f"m{i}"}, "params": {"prompt": "x"}}
        for i in range(n)
    ]
    if shapes:
        columns += [
            {
                "name": f"s{i}",
                "generator": "llm-structured",
                "resources": {"model": f"m{i}"},
                "params": {"prompt": "x", "schema": SCHEMA},
            }
            for i in range(n)
        ]
    probes = max(n, 1) * (2 if shapes else 1)
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": probes}},
        "models": models,
        "pipeline": {"columns": columns},
        "preflight": {"concurrency": probes, "timeout_s": 30, "deadline_s": 120},
    }


async def concurrent(url: str, n: int, shapes: bool = False) -> tuple[float, bool]:
    container = genwire.boot(config(url, n, shapes))
    async with container:
        started = time.perf_counter()
        report = await container.preflight(use_cache=False)
        return time.perf_counter() - started, report.ok


async def sequential(url: str, n: int, shapes: bool = False) -> float:
    """Baseline: the same probes through the same clients, one after another."""
    container = genwire.boot(config(url, n, shapes))
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA, "strict": True}}
    async with container:
        started = time.perf_counter()
        for i in range(n):
            model = container.resource(f"m{i}")
            await model.complete("Reply with one short word.", max_tokens=16)
            if shapes:
                await model.complete("Reply with a small JSON object.", max_tokens=256, response_format=fmt)
        return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 20, 100])
    args = parser.parse_args()
    with FakeOpenAIServer(latency=args.latency) as server:
        print(f"pre-flight of N chat models, {args.latency * 1000:.0f} ms latency each (fake server, 127.0.0.1)")
        print(f"{'N':>5} {'sequential (s)':>15} {'genwire (s)':>12} {'speed-up':>9} {'ok':>4}")
        cases = [(n, False) for n in args.sizes] + [(20, True)]
        for n, shapes in cases:
            await concurrent(server.url, n, shapes)  # warm-up: imports, first connections
            seq = await sequential(server.url, n, shapes)
            took, ok = await concurrent(server.url, n, shapes)
            label = f"{n}x2" if shapes else str(n)  # x2: a plain and a structured shape each
            print(f"{label:>5} {seq:>15.3f} {took:>12.3f} {seq / took:>8.1f}x {ok!s:>4}")


if __name__ == "__main__":
    asyncio.run(main())
