"""The response cache: a rerun pays only for what changed (SPEC §12).

2,000 rows, three llm-text columns (the third reads the second) against the fake server at
50 ms a request, in one process: the first run (pays for every answer: the baseline), an
unchanged rerun with --fresh semantics (every answer from the cache), and a rerun with
the second column's prompt edited (that column and the one reading it are asked again).
Prints rows/s and requests of each, and the all-hits rerun against the first run.

    python benchmarks/response_cache.py [--rows 2000] [--latency 0.05] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import genwire
from genwire.testing import FakeOpenAIServer


def config(url: str, rows: int, concurrency: int, second_prompt: str) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "defaults": {"chat_model": "writer"},
        "pipeline": {
            "num_records": rows,
            "output": "out.jsonl",
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "first", "generator": "llm-text", "params": {"prompt": "Write about {{ uid }}"}},
                {"name": "second", "generator": "llm-text", "params": {"prompt": second_prompt}},
                {"name": "third", "generator": "llm-text", "params": {"prompt": "Critique {{ second }}"}},
            ],
        },
    }


async def measure(path: Path, server: FakeOpenAIServer) -> tuple[float, float, int, int]:
    """Wall seconds, rows/s, requests sent, answers from the cache (pre-flight included)."""
    server.reset_stats()
    started = time.perf_counter()
    async with genwire.boot(path) as container:
        result = await container.run(resume=False)
    seconds = time.perf_counter() - started
    cached = sum(u.cached for u in result.usage.values())
    return seconds, result.rows_written / seconds, server.total_requests, cached


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with FakeOpenAIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "genwire.yaml"

        def write(second_prompt: str) -> None:
            path.write_text(yaml.safe_dump(config(server.url, args.rows, args.concurrency, second_prompt)))

        write("Summarise {{ first }}")
        first = await measure(path, server)
        rerun = await measure(path, server)
        write("Shorten {{ first }}")
        edited = await measure(path, server)

    print(
        f"{args.rows:,} rows, 3 llm-text columns, {args.latency * 1000:.0f} ms per request, "
        f"max_concurrency {args.concurrency}"
    )
    print(f"{'run':<36}{'wall s':>9}{'rows/s':>10}{'requests':>10}{'cached':>9}")
    for name, (seconds, rate, requests, cached) in (
        ("first run (pays for all: baseline)", first),
        ("unchanged rerun (--fresh)", rerun),
        ("second column's prompt edited", edited),
    ):
        print(f"{name:<36}{seconds:>9.2f}{rate:>10,.0f}{requests:>10,}{cached:>9,}")
    speedup = first[0] / rerun[0]
    print(
        f"all-hits rerun: {speedup:.1f}x faster than the first run (target >= 20x), "
        f"{rerun[1]:,.0f} rows/s (target >= 2,000)"
    )
    print(f"edit: {edited[2]:,} requests for {2 * args.rows:,} changed answers plus the pre-flight")


if __name__ == "__main__":
    asyncio.run(main())
