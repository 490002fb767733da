"""Run throughput of an llm-text column against the fake server: rows/s beside the
theoretical limit (max_concurrency / latency) measured in the same run.

    python benchmarks/run_throughput.py [--latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import genwire
from genwire.testing import FakeOpenAIServer


def config(url: str, concurrency: int, rows: int, out: Path) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "num_records": rows,
            "output": str(out),
            "columns": [
                {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
                {
                    "name": "text",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Write about {{ topic }}"},
                },
            ],
        },
    }


async def measure(url: str, concurrency: int, rows: int, out: Path) -> float:
    container = genwire.boot(config(url, concurrency, rows, out))
    async with container:
        result = await container.run(skip_preflight=True)
    assert result.rows_written == rows, result
    return result.rows_per_s


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    with FakeOpenAIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        print(f"llm-text column, fake server at {args.latency * 1000:.0f} ms per request")
        print(f"{'max_concurrency':>15} {'rows':>6} {'limit rows/s':>13} {'genwire rows/s':>15} {'of limit':>9}")
        for concurrency, rows in ((16, 400), (64, 1600)):
            limit = concurrency / args.latency
            rate = await measure(server.url, concurrency, rows, Path(tmp) / f"out-{concurrency}.jsonl")
            print(f"{concurrency:>15} {rows:>6} {limit:>13.1f} {rate:>15.1f} {rate / limit:>8.1%}")


if __name__ == "__main__":
    asyncio.run(main())
