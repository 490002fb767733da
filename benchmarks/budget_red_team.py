"""The budget against models that do not play along (issues 41 and 49, SPEC §16), at
max_concurrency 256 against the fake server: the spend the *server* billed (its own count
of the tokens it answered with, x the price) against the cap, and the overshoot in units
of one request's worst case (SPEC: at most 1; on Ray, one per worker).

Baseline, measured in the same run: a well-behaved model (``max_tokens`` kept, ``usage``
reported). Imperfect cases, the red team's reproductions: answers growing from 5 to 2,000
tokens without ``max_tokens``; a model that answers 2,000 tokens for ``max_tokens: 50``
(with the pre-flight skipped, and on: its probe's answer must mark the model, no output
limit known); one that keeps ``max_tokens: 250`` for 1,800 answers (most of the cap) and
then answers 2,000 tokens (``max_output_tokens: 2048`` declared); ``n: 8``; answers without ``usage``. "narrowed"
is the fewest requests in flight the reservations held the model to (of 256) when the
budget left was below 256 worst cases, as the run's summary reports it.

    python benchmarks/budget_red_team.py [--cap 0.30] [--rows 2000] [--latency 0.2]
        [--engine ray --workers 2] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import genwire
from genwire.engine.run.options import RunOptions
from genwire.errors import BudgetStopped
from genwire.providers.budget import DEFAULT_OUTPUT_LIMIT
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_openai.usage import RealisticUsage

PRICE = (0.15, 0.60)  # USD per million tokens (gpt-4o-mini's)
WORST_INPUT_TOKENS = 1000  # prompts are under 100 characters: generous
SAMPLER = {"kind": "uniform", "low": 1, "high": 9, "integer": True}


def config(root: Path, url: str, rows: int, model: dict[str, Any]) -> Path:
    cfg = {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": 256}},
        "models": {
            "writer": {
                "provider": "srv",
                "model": "writer",
                "kind": "chat",
                "price": {"input_per_mtok": PRICE[0], "output_per_mtok": PRICE[1]},
                **model,
            }
        },
        "defaults": {"chat_model": "writer"},
        "pipeline": {
            "num_records": rows,
            "batch_size": 64,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "k", "generator": "sampler", "params": SAMPLER},
                {"name": "q", "generator": "llm-text", "params": {"prompt": "Write about {{ 'topic ' * k }}"}},
            ],
        },
    }
    path = root / "genwire.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


# name -> (what the server does, the model's config, one request's worst-case output tokens, pre-flight)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], int, bool]] = {
    "baseline: max_tokens kept, usage": ({"tokens": 250}, {"params": {"max_tokens": 300}}, 300, False),
    "answers growing 5 -> 2,000, no max_tokens": (
        {"tokens": 5, "grow_to": 2000, "over": 400},
        {"max_output_tokens": 2048},
        2048,
        False,
    ),
    "ignores max_tokens: 50 (answers 2,000)": (
        {"tokens": 2000, "ignore_max_tokens": True},
        {"params": {"max_tokens": 50}, "max_output_tokens": 4096},
        4096,
        False,
    ),
    "pre-flight on, ignores max_tokens: 50, no limit known": (
        {"tokens": 2000, "ignore_max_tokens": True},
        {"params": {"max_tokens": 50}},
        DEFAULT_OUTPUT_LIMIT,
        True,
    ),
    "honours max_tokens: 250 for 1,800 answers, then 2,000, max_output_tokens: 2048": (
        {"tokens": 2000, "ignore_max_tokens": True, "honoured": 1800},
        {"params": {"max_tokens": 250}, "max_output_tokens": 2048},
        2048,
        True,
    ),
    "n: 8": ({"realistic": True}, {"params": {"max_tokens": 300, "n": 8}}, 8 * 300, False),
    "no usage in answers": ({"tokens": 250, "omit_usage": True}, {"params": {"max_tokens": 300}}, 300, False),
}


async def one(name: str, cap: float, rows: int, latency: float, engine: str, workers: int) -> dict[str, Any]:
    shape, model, worst_output, preflight = CASES[name]
    shape = dict(shape)
    with FakeOpenAIServer(latency=latency) as server, tempfile.TemporaryDirectory() as tmp:
        if shape.pop("realistic", False):
            server.realistic_usage("writer", RealisticUsage(seed=3, completion_mean=200))
        if shape:
            server.shape_answers("writer", **shape)
        container = genwire.boot(config(Path(tmp), server.url, rows, model))
        started = time.perf_counter()
        stopped = False
        narrowed = "-"
        options = RunOptions(
            max_cost_usd=cap,
            skip_preflight=not preflight,
            probe_cache=False,
            engine="ray" if engine == "ray" else "local",
            ray_workers=workers if engine == "ray" else None,
        )
        async with container:
            try:
                result = await container.run(options)
            except BudgetStopped as stop:
                stopped = True
                result = stop.result
        figures = (getattr(result, "cost", None) or {}).get("narrowed")
        if figures:
            narrowed = f"{figures['in_flight']} of {figures['max_concurrency']}"
        seconds = time.perf_counter() - started
        billed = (server.prompt_tokens["writer"] * PRICE[0] + server.completion_tokens["writer"] * PRICE[1]) / 1e6
        requests = server.total_requests
    worst = (WORST_INPUT_TOKENS * PRICE[0] + worst_output * PRICE[1]) / 1e6
    allowed = worst * (workers if engine == "ray" else 1)  # one worst case per worker on Ray
    return {
        "case": name,
        "engine": engine,
        "stopped": "exit 3" if stopped else "NOT STOPPED",
        "requests": requests,
        "server-billed $": f"{billed:.4f}",
        "cap $": f"{cap:.2f}",
        "billed / cap": f"{billed / cap:.3f}",
        "bound $": f"{cap + allowed:.4f}",
        "over cap, in worst requests": f"{max(0.0, billed - cap) / worst:.2f}",
        "within bound": "yes" if billed <= cap + allowed else "NO",
        "narrowed": narrowed,
        "s": f"{seconds:.1f}",
    }


def table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    lines = [" | ".join(k.ljust(widths[k]) for k in keys), "-+-".join("-" * widths[k] for k in keys)]
    lines += [" | ".join(str(r[k]).ljust(widths[k]) for k in keys) for r in rows]
    return "\n".join(lines)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cap", type=float, default=0.30)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (--engine ray)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = parser.parse_args(argv)
    results = []
    for name in [n for n in CASES if args.only in n]:
        results.append(await one(name, args.cap, args.rows, args.latency, args.engine, args.workers))
        print(f"  {name} done", file=sys.stderr)
    print(
        f"Budget at max_concurrency 256, cap ${args.cap:g}, N={args.rows}, latency {args.latency * 1000:g} ms, "
        f"engine {args.engine}" + (f" ({args.workers} workers)" if args.engine == "ray" else "")
    )
    print(table(results))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
