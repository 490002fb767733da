"""Requests sent before a failure-rate stop (issue 49 item 10): judged as rows settle (the
run stops sending at once) beside judged on whole batches in row order (the baseline: the
sink's rule alone, as before), same fake server, same run, on each engine.

Engines: ``local``, ``local gated`` (a ``keep-if`` gate after the chat column:
``num_records`` counts kept rows) and ``ray`` (2 workers on a local Ray instance started
once for the script; the baseline there is the driver judging whole blocks, as before).
Cases: ``every row 400`` (an instant failure for every request), ``late 400s`` (the first
200 requests answered, then every one refused) and ``scattered 3 %`` (a healthy run under
the rate: it must finish, sending each row once). 2,000 rows, batch 64, max_concurrency 16,
max_failure_rate 10 %.

    python benchmarks/failure_stop.py [--rows 2000] [--concurrency 16] [--engines local,gated,ray]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import genwire
from genwire.engine.cluster.driver import RayBatches
from genwire.engine.rows.failure_stop import MIN_ROWS_FOR_RATE, FailureStop
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

ANSWER = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
RAY_WORKERS = 2


def late_400s(server: FakeOpenAIServer) -> None:
    server.script("writer", [FakeResponse(json=ANSWER)] * 200)  # answered first, then every one refused
    server.fail_when("writer", "", 400)


CASES: dict[str, Callable[[FakeOpenAIServer], None]] = {
    "every row 400": lambda server: server.fail_when("writer", "", 400),
    "late 400s": late_400s,
    "scattered 3 %": lambda server: server.fail_rate("writer", 0.03, (400,), seed=1),
}
ENGINES = {"local": "local", "gated": "local gated", "ray": "ray"}


def pipeline(url: str, root: Path, rows: int, concurrency: int, *, gated: bool) -> dict[str, Any]:
    prompt = {"prompt": "Say {{ i }}"}
    columns: list[dict[str, Any]] = [
        {"name": "i", "generator": "sampler", "params": {"kind": "uuid"}},
        {"name": "a", "generator": "llm-text", "resources": {"model": "writer"}, "params": prompt},
    ]
    if gated:
        columns.append({"name": "good", "generator": "keep-if", "params": {"expression": "a|length > 0"}})
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency, "retries": 0}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "cache": {"enabled": False},
        "pipeline": {
            "num_records": rows,
            "batch_size": 64,
            "max_failure_rate": 0.1,
            "output": str(root / "out.jsonl"),
            "columns": columns,
        },
    }


@contextlib.contextmanager
def judged_on_whole_batches() -> Iterator[None]:
    """The baseline: the live rule never trips (locally) and no worker judges (Ray), so only
    the written batches are judged, as before."""
    live_above, ray_init = FailureStop.live_above, RayBatches.__init__

    def without_judge(self: RayBatches, *args: Any, **kwargs: Any) -> None:
        ray_init(self, *args, **{**kwargs, "failure_stop": None})

    FailureStop.live_above = lambda self: False  # type: ignore[method-assign]
    RayBatches.__init__ = without_judge  # type: ignore[method-assign]
    try:
        yield
    finally:
        FailureStop.live_above, RayBatches.__init__ = live_above, ray_init  # type: ignore[method-assign]


async def one(server: FakeOpenAIServer, engine: str, case: str, rows: int, concurrency: int) -> tuple[int, str, float]:
    """Requests sent, how the run ended, wall seconds."""
    server.clear()
    server.reset_stats()
    CASES[case](server)
    on_ray = {"engine": "ray", "ray_workers": RAY_WORKERS} if engine == "ray" else {}
    with tempfile.TemporaryDirectory() as folder:
        cfg = pipeline(server.url, Path(folder), rows, concurrency, gated=engine == "gated")
        started = time.perf_counter()
        async with genwire.boot(cfg) as container:
            try:
                result = await container.run(skip_preflight=True, resume=False, **on_ray)
                ended = f"finished, {result.rows_failed} failed"
            except genwire.RunError:
                ended = "stopped"
        seconds = time.perf_counter() - started
    server.wait_idle()
    return server.requests["writer"], ended, seconds


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--engines", default=",".join(ENGINES), help="of: " + ", ".join(ENGINES))
    args = parser.parse_args()
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    print(f"{args.rows:,} rows, batch 64, max_concurrency {args.concurrency}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"bound when every row fails: {MIN_ROWS_FOR_RATE} decided rows + {args.concurrency} in flight "
        f"(ray: {RAY_WORKERS} workers x {MIN_ROWS_FOR_RATE} + {args.concurrency})"
    )
    print(f"{'engine':12} {'case':16} {'judged':18} {'requests':>9} {'seconds':>8}  ended")
    if "ray" in engines:  # one instance for every Ray run of the script (as the tests' fixture)
        import ray

        from genwire.engine.cluster.instance import ensure_ray

        ensure_ray(ray, None)
    try:
        with FakeOpenAIServer() as server:
            for engine in engines:
                for case in CASES:
                    for judged in ("whole batches", "as rows settle"):
                        with judged_on_whole_batches() if judged == "whole batches" else contextlib.nullcontext():
                            sent, ended, seconds = await one(server, engine, case, args.rows, args.concurrency)
                        print(f"{ENGINES[engine]:12} {case:16} {judged:18} {sent:>9,} {seconds:>8.2f}  {ended}")
    finally:
        if "ray" in engines:
            from genwire.engine.cluster.instance import end_ray

            end_ray(ray)


if __name__ == "__main__":
    asyncio.run(main())
