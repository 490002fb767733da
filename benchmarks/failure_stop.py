"""Requests sent before a failure-rate stop (issue 49 item 10): judged as rows settle (the
run stops sending at once) beside judged on whole batches in row order (the baseline: the
sink's rule alone, as before), same fake server, same run.

Cases: ``every row 400`` (an instant failure for every request), ``late 400s`` (the first
200 requests answered, then every one refused) and ``scattered 3 %`` (a healthy run under
the rate: it must finish, sending each row once). 2,000 rows, batch 64, max_concurrency 16,
max_failure_rate 10 %.

    python benchmarks/failure_stop.py [--rows 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import genwire
from genwire.engine.rows.failure_stop import MIN_ROWS_FOR_RATE, FailureStop
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

ANSWER = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def late_400s(server: FakeOpenAIServer) -> None:
    server.script("writer", [FakeResponse(json=ANSWER)] * 200)  # answered first, then every one refused
    server.fail_when("writer", "", 400)


CASES: dict[str, Callable[[FakeOpenAIServer], None]] = {
    "every row 400": lambda server: server.fail_when("writer", "", 400),
    "late 400s": late_400s,
    "scattered 3 %": lambda server: server.fail_rate("writer", 0.03, (400,), seed=1),
}


def pipeline(url: str, root: Path, rows: int, concurrency: int) -> dict[str, Any]:
    prompt = {"prompt": "Say {{ i }}"}
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency, "retries": 0}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "cache": {"enabled": False},
        "pipeline": {
            "num_records": rows,
            "batch_size": 64,
            "max_failure_rate": 0.1,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "i", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "a", "generator": "llm-text", "resources": {"model": "writer"}, "params": prompt},
            ],
        },
    }


async def one(server: FakeOpenAIServer, case: str, rows: int, concurrency: int) -> tuple[int, str, float]:
    """Requests sent, how the run ended, wall seconds."""
    server.clear()
    server.reset_stats()
    CASES[case](server)
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        async with genwire.boot(pipeline(server.url, Path(folder), rows, concurrency)) as container:
            try:
                result = await container.run(skip_preflight=True, resume=False)
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
    args = parser.parse_args()
    live_above = FailureStop.live_above
    print(f"{args.rows:,} rows, batch 64, max_concurrency {args.concurrency}; load average {os.getloadavg()[0]:.1f}")
    print(f"bound when every row fails: {MIN_ROWS_FOR_RATE} decided rows + {args.concurrency} in flight")
    print(f"{'case':16} {'judged':18} {'requests':>9} {'seconds':>8}  ended")
    with FakeOpenAIServer() as server:
        for case in CASES:
            for judged in ("whole batches", "as rows settle"):
                # The baseline: the live rule never trips, so only the sink's judges (as before).
                FailureStop.live_above = (lambda self: False) if judged == "whole batches" else live_above  # type: ignore[method-assign]
                sent, ended, seconds = await one(server, case, args.rows, args.concurrency)
                print(f"{case:16} {judged:18} {sent:>9,} {seconds:>8.2f}  {ended}")
    FailureStop.live_above = live_above  # type: ignore[method-assign]


if __name__ == "__main__":
    asyncio.run(main())
