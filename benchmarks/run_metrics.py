"""What the run's metrics and report page cost (SPEC §19): rows/s with them on (the
default) and off (``RunOptions(metrics=False)``: no metrics.jsonl, no report page), each
measured in this run, interleaved and repeated (this machine's speed drifts).

* all-hits rerun: benchmarks/response_cache.py's inner loop (uuid + 2 llm-text columns,
  fake server at 0 ms) rerun with every answer from the response cache: the budget is
  5 % (on >= 95 % of off);
* first run, 100,000 rows, cache off: every request sent;
* imperfect: the first run with 2 % of the requests answered 429 and 1 % 500 (retried),
  and one model 4x slower than the other.

    python benchmarks/run_metrics.py [--hit-rows 20000] [--rows 100000] [--repeat 3]

``--rows 0``: the all-hits case alone (``--repeat`` times at least 5).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import genwire
from genwire.testing import FakeOpenAIServer


def config(url: str, rows: int, *, cache: bool, two_models: bool = False) -> dict[str, Any]:
    second = "judge" if two_models else "writer"
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": 64, "backoff_s": 0.01}},
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "judge": {"provider": "srv", "model": "judge", "kind": "chat"},
        },
        "cache": {"enabled": cache},
        "pipeline": {
            "num_records": rows,
            "output": "out.jsonl",
            "max_failure_rate": 0.5,
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {
                    "name": "first",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Write about {{ uid }}"},
                },
                {
                    "name": "second",
                    "generator": "llm-text",
                    "resources": {"model": second},
                    "params": {"prompt": "Summarise {{ first }}"},
                },
            ],
        },
    }


async def rows_per_s(path: Path, metrics: bool) -> float:
    started = time.perf_counter()
    async with genwire.boot(path) as container:
        result = await container.run(resume=False, skip_preflight=True, metrics=metrics)
    report = path.parent / "out.jsonl.report.html"
    assert report.exists() == metrics, "metrics=False writes no report; metrics=True does"
    report.unlink(missing_ok=True)
    return result.rows_written / (time.perf_counter() - started)


async def compare(name: str, path: Path, repeat: int) -> None:
    ons, offs = [], []
    for _ in range(repeat):
        offs.append(await rows_per_s(path, metrics=False))
        ons.append(await rows_per_s(path, metrics=True))
    off, on = sorted(offs)[len(offs) // 2], sorted(ons)[len(ons) // 2]
    print(f"{name:<52}{off:>12,.0f}{on:>12,.0f}{on / off:>10.1%}")


async def main(hit_rows: int, rows: int, repeat: int) -> None:
    print(f"{'case (median of runs, interleaved)':<52}{'off rows/s':>12}{'on rows/s':>12}{'on/off':>10}")
    with FakeOpenAIServer(latency=0.0) as server, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "genwire.yaml"
        path.write_text(yaml.safe_dump(config(server.url, hit_rows, cache=True)))
        shutil.rmtree(path.parent / ".genwire", ignore_errors=True)
        await rows_per_s(path, metrics=False)  # fills the cache
        await compare(f"all-hits rerun, {hit_rows:,} rows (budget: >= 95 %)", path, max(repeat, 5))

        if not rows:
            return
        path.write_text(yaml.safe_dump(config(server.url, rows, cache=False)))
        await compare(f"first run, {rows:,} rows, every request sent", path, 1)

        imperfect = max(rows // 5, 1000)
        server.fail_rate("writer", 0.03, statuses=(429, 429, 500), seed=1)
        server.set_latency("judge", 0.004)
        server.set_latency("writer", 0.001)
        path.write_text(yaml.safe_dump(config(server.url, imperfect, cache=False, two_models=True)))
        await compare(f"imperfect: {imperfect:,} rows, 429s, 500s, a slow model", path, repeat)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hit-rows", type=int, default=20_000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.hit_rows, args.rows, args.repeat))
