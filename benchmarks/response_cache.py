"""The response cache: a rerun pays only for what changed (SPEC §12).

2,000 rows, three llm-text columns (the third reads the second) against the fake server at
50 ms a request, in one process: the first run (pays for every answer: the baseline), an
unchanged rerun with --fresh semantics (every answer from the cache), and a rerun with
the second column's prompt edited (that column and the one reading it are asked again).
Prints rows/s and requests of each, and the all-hits rerun against the first run. The
pipeline seed is in the key and stays the same across the three runs.

Then the inner loop at full speed (issue 25; fake server at 0 ms, so genwire's own cost is
what is measured): ``--big-rows`` rows (100,000 by default, ``--big-rows 0`` skips it) of a
uuid and 2 llm-text columns, beside the same pipeline with 2 template columns instead of
the model columns (the baseline), each measured in this run:

* the first run with the response cache off (baseline) and on: target on >= 90 % of off;
* the all-hits rerun against the template-only pipeline: target >= 60 %.

    python benchmarks/response_cache.py [--rows 2000] [--latency 0.05] [--concurrency 16]
                                        [--big-rows 100000] [--repeat 3]
                                        [--first-repeat 1] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
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


async def measure(path: Path, server: FakeOpenAIServer, skip_preflight: bool = False) -> tuple[float, float, int, int]:
    """Wall seconds, rows/s, requests sent, answers from the cache (pre-flight included;
    rows/s over the run itself without the pre-flight when it is skipped: no boot)."""
    server.reset_stats()
    started = time.perf_counter()
    async with genwire.boot(path) as container:
        result = await container.run(resume=False, skip_preflight=skip_preflight)
    seconds = time.perf_counter() - started
    cached = sum(u.cached for u in result.usage.values())
    rate = result.rows_per_s if skip_preflight else result.rows_written / seconds
    return seconds, rate, server.total_requests, cached


def inner_loop_config(url: str, rows: int, concurrency: int, *, models: bool, cache: bool) -> dict[str, Any]:
    """uuid + 2 columns: llm-text (``models``) or template (the baseline: no model, no cache)."""

    def column(name: str, prompt: str) -> dict[str, Any]:
        if models:
            return {"name": name, "generator": "llm-text", "params": {"prompt": prompt}}
        return {"name": name, "generator": "template", "params": {"template": prompt}}

    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "defaults": {"chat_model": "writer"},
        "cache": {"enabled": cache},
        "pipeline": {
            "num_records": rows,
            "output": "out.jsonl",
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                column("first", "Write about {{ uid }}"),
                column("second", "Summarise {{ first }}"),
            ],
        },
    }


async def inner_loop(rows: int, concurrency: int, repeat: int, first_repeat: int, profile: bool) -> None:
    with FakeOpenAIServer(latency=0.0) as server, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "genwire.yaml"

        async def timed(models: bool, cache: bool, profiler: cProfile.Profile | None = None) -> tuple[float, int, int]:
            cfg = inner_loop_config(server.url, rows, concurrency, models=models, cache=cache)
            path.write_text(yaml.safe_dump(cfg))
            if profiler is not None:
                profiler.enable()
            try:
                _, rate, requests, cached = await measure(path, server, skip_preflight=True)
            finally:
                if profiler is not None:
                    profiler.disable()
            return rate, requests, cached

        # Off and on, interleaved: each first run starts from an empty cache.
        offs, ons = [], []
        for _ in range(first_repeat):
            shutil.rmtree(path.parent / ".genwire", ignore_errors=True)
            offs.append(await timed(models=True, cache=False))
            shutil.rmtree(path.parent / ".genwire", ignore_errors=True)
            ons.append(await timed(models=True, cache=True))
        off, on = sorted(offs)[len(offs) // 2], sorted(ons)[len(ons) // 2]
        # This machine's speed drifts by tens of percent over minutes: the two cheap runs
        # are interleaved and repeated, and each one's median is compared.
        templates, all_hits = [], []
        profiler = cProfile.Profile() if profile else None
        for _ in range(repeat):
            templates.append(await timed(models=False, cache=False))
            all_hits.append(await timed(models=True, cache=True, profiler=profiler))
        template = sorted(templates)[len(templates) // 2]
        hits = sorted(all_hits)[len(all_hits) // 2]

    print()
    print(f"{rows:,} rows, uuid + 2 columns, fake server at 0 ms, max_concurrency {concurrency}")
    print(f"{'run':<48}{'rows/s':>10}{'requests':>10}{'cached':>9}")
    for name, (rate, requests, cached) in (
        (f"template columns (baseline, median of {repeat})", template),
        (f"llm-text, first run, cache off (median of {first_repeat})", off),
        (f"llm-text, first run, cache on (median of {first_repeat})", on),
        (f"llm-text, all-hits rerun (median of {repeat})", hits),
    ):
        print(f"{name:<48}{rate:>10,.0f}{requests:>10,}{cached:>9,}")
    print(f"first run, cache on vs off: {on[0] / off[0]:.0%} (target >= 90 %)")
    print(f"all-hits rerun vs template columns: {hits[0] / template[0]:.0%} (target >= 60 %)")
    if profiler is not None:
        print("\nall-hits rerun, by own time:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--big-rows", type=int, default=100_000, help="rows of the inner-loop case; 0 skips it")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved template and all-hits runs")
    parser.add_argument("--first-repeat", type=int, default=1, help="interleaved first runs, cache off and on")
    parser.add_argument("--profile", action="store_true", help="cProfile the all-hits reruns of the inner loop")
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
    if args.big_rows > 0:
        await inner_loop(args.big_rows, args.concurrency, max(1, args.repeat), max(1, args.first_repeat), args.profile)


if __name__ == "__main__":
    asyncio.run(main())
