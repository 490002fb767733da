"""How close ``genwire estimate`` comes to what the run then costs, and how far a budget
can be overshot (SPEC §16), measured against the fake server with realistic ``usage``.

Part 1, accuracy: for each pipeline and K in (5, 20, 50), the estimate's sample of K rows
(kept), then the run of the remaining rows; the projection (input and output tokens,
cost, duration) against what the server counted and how long the run took, as an error
in percent. Pipelines: short prompts (one chat column), long varied prompts (two chat
columns, the second reading the first, and an embedding column: the done-means
pipeline), and a multi-call plugin (1-3 calls per row). Each run also checks that no
request was sent for the sampled rows.

Part 2, budget: the long-prompts pipeline with ``--max-cost`` at 40 % of the projected
cost, at max_concurrency 1, 16, 64 and 256: the spend the server counted (its usage x
price, the estimate's sample and the probes included, as the ledger counts them) against
the cap, the overshoot in units of one request's worst case (SPEC: at most 1), then a
rerun with a higher cap: every row once, and the ledger equal to the server's count.

    python benchmarks/estimate_accuracy.py [--rows 2000] [--budget-rows 1000] [--latency 0.2] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

import genwire
from genwire.engine.money.estimate import Estimate, estimate_of
from genwire.engine.run.options import RunOptions
from genwire.errors import BudgetStopped
from genwire.generators.base import Generator
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.providers.request_context import cached_rows
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_openai.usage import RealisticUsage

PRICES = {"writer": (0.15, 0.60), "embedder": (0.02, 0.0)}  # USD per million tokens
MAX_TOKENS = 300


class RefineParams(BaseModel):
    column: str


class Refine(Generator[RefineParams]):
    """A plugin that calls its model 1-3 times per row (the row decides), each call
    refining the last answer."""

    metadata = GeneratorMetadata(
        name="refine", description="refines a draft 1-3 times", required_resources={"model": ResourceKind.CHAT_MODEL}
    )
    params_model = RefineParams

    @classmethod
    def reads(cls, params: RefineParams) -> set[str]:
        return {params.column}

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, list(range(len(rows))))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        async def one(row: dict[str, Any], index: int) -> str:
            text = str(row[self.params.column])
            with cached_rows((index,)):
                for step in range(1 + len(text) % 3):
                    text = await self.resources.model.complete(f"Improve this draft (pass {step}): {text[:1500]}")
            return text

        return list(await asyncio.gather(*(one(r, i) for r, i in zip(rows, indices, strict=True))))


STRAY = "long+3%-errors"  # the imperfect case: stray 503s and 429s, retried (not billed)


def pipeline(kind: str) -> list[dict[str, Any]]:
    words = {"name": "n", "generator": "sampler", "params": {"kind": "uniform", "low": 1, "high": 120, "integer": True}}
    if kind == "short":
        pick = {"name": "fruit", "generator": "sampler", "params": {"kind": "category", "values": ["apple", "pear"]}}
        return [pick, {"name": "q", "generator": "llm-text", "params": {"prompt": "Name a dish with {{ fruit }}."}}]
    if kind in ("long", STRAY):
        return [
            words,
            {
                "name": "q",
                "generator": "llm-text",
                "params": {"prompt": "Write one question about this passage: {{ 'lorem ipsum dolor sit amet ' * n }}"},
            },
            {"name": "a", "generator": "llm-text", "params": {"prompt": "Answer in detail: {{ q }}"}},
            {"name": "e", "generator": "embedding", "params": {"column": "a"}},
        ]
    return [
        words,
        {"name": "draft", "generator": "llm-text", "params": {"prompt": "Draft about {{ 'the sea ' * n }}"}},
        {"name": "final", "generator": "refine", "params": {"column": "draft"}},
    ]


def write_config(root: Path, url: str, kind: str, rows: int, concurrency: int) -> Path:
    models: dict[str, Any] = {
        "writer": {"provider": "srv", "model": "writer", "kind": "chat", "params": {"max_tokens": MAX_TOKENS}},
        "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding"},
    }
    for alias, (inp, out) in PRICES.items():
        models[alias]["price"] = {"input_per_mtok": inp, "output_per_mtok": out}
    cfg = {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency}},
        "models": models,
        "defaults": {"chat_model": "writer", "embedding_model": "embedder"},
        "pipeline": {
            "num_records": rows,
            "seed": 7,
            "output": str(root / "out.jsonl"),
            "max_failure_rate": 0.0,
            "columns": pipeline(kind),
        },
    }
    path = root / "genwire.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def server_usd(server: FakeOpenAIServer) -> float:
    return sum(
        server.prompt_tokens[m] * PRICES[m][0] / 1e6 + server.completion_tokens[m] * PRICES[m][1] / 1e6 for m in PRICES
    )


def err(projected: float, actual: float) -> str:
    return f"{(projected - actual) / actual * 100:+.1f}%" if actual else "n/a"


async def accuracy(server: FakeOpenAIServer, kind: str, k: int, rows: int, concurrency: int) -> dict[str, Any]:
    server.reset_stats()
    server.fail_rate("writer", 0.03 if kind == STRAY else 0.0, [503, 429], seed=k)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), server.url, kind, rows, concurrency)
        container = genwire.boot(path, generators=[Refine])
        async with container:
            sample = await container.run(RunOptions(sample_rows=k))
            found: Estimate = estimate_of(container, sample)
            before_in = sum(server.prompt_tokens.values())
            before_out = sum(server.completion_tokens.values())
            before_usd = server_usd(server)
            before_requests = server.total_requests
            full = await container.run(RunOptions())
    run_in = sum(server.prompt_tokens.values()) - before_in
    run_out = sum(server.completion_tokens.values()) - before_out
    run_usd = server_usd(server) - before_usd
    preflight_s = full.preflight.duration_s if full.preflight else 0.0
    run_s = full.duration_s - preflight_s
    probes = 2 if kind in ("long", STRAY) else 1
    sent = server.total_requests - before_requests - probes  # retried attempts included
    return {
        "pipeline": kind,
        "K": k,
        "in est": found.input_tokens,
        "in real": run_in,
        "in err": err(found.input_tokens, run_in),
        "out err": err(found.output_tokens, run_out),
        "cost est": found.cost_usd or 0.0,
        "cost real": run_usd,
        "cost err": err(found.cost_usd or 0.0, run_usd),
        "worst/real": f"{(found.worst_cost_usd or 0.0) / run_usd:.2f}x" if run_usd else "n/a",
        "s est": found.duration_s,
        "s real": run_s,
        "s err": err(found.duration_s, run_s),
        "binding": found.binding_limit,
        "resumed": full.rows_resumed,
        "requests": f"{sent} sent / {found.requests} projected",
    }


async def budget(server: FakeOpenAIServer, concurrency: int, rows: int) -> dict[str, Any]:
    server.reset_stats()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), server.url, "long", rows, concurrency)
        container = genwire.boot(path)
        async with container:
            sample = await container.run(RunOptions(sample_rows=20))
            found = estimate_of(container, sample)
            projected = (found.cost_usd or 0.0) + (sample.cost or {}).get("this_session_usd", 0.0)
            cap = 0.4 * projected
            worst_request = MAX_TOKENS * PRICES["writer"][1] / 1e6 + 3000 * PRICES["writer"][0] / 1e6
            stopped = None
            started = time.perf_counter()
            try:
                await container.run(RunOptions(max_cost_usd=cap))
            except BudgetStopped as exc:
                stopped = exc
            stop_s = time.perf_counter() - started
            spent_at_stop = server_usd(server)
            final = await container.run(RunOptions(max_cost_usd=projected * 3))
            assert final.cost is not None
            ledger = final.cost["total_usd"]
            out = [json.loads(line)["n"] for line in (Path(tmp) / "out.jsonl").read_text().splitlines()]
    return {
        "concurrency": concurrency,
        "cap $": cap,
        "stopped": "exit 3" if stopped else "NOT STOPPED",
        "rows kept": stopped.kept if stopped else rows,
        "server $ at stop": spent_at_stop,
        "overshoot": f"{(spent_at_stop - cap) / cap * 100:+.2f}%",
        "in worst requests": f"{(spent_at_stop - cap) / worst_request:+.2f}",
        "stop s": stop_s,
        "rerun rows": len(out),
        "ledger = server": abs(ledger - server_usd(server)) < 1e-9,
    }


def table(rows: list[dict[str, Any]]) -> str:
    heads = list(rows[0])

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4f}" if value < 10 else f"{value:,.1f}"
        return str(value)

    cells = [[cell(r[h]) for h in heads] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--budget-rows", type=int, default=1000)
    # The server shares this process's CPU: a latency that leaves the CPU mostly idle, as
    # a remote endpoint would (at 50 ms x 64 in flight the fake server itself binds).
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--budget-latency", type=float, default=0.005)
    parser.add_argument("--ks", default="5,20,50")
    parser.add_argument("--concurrencies", default="1,16,64,256")
    parser.add_argument("--pipelines", default=f"short,long,multi-call,{STRAY}")
    args = parser.parse_args(argv)
    with FakeOpenAIServer(latency=args.latency) as server:
        server.realistic_usage("*", RealisticUsage(seed=3))
        results = []
        for kind in args.pipelines.split(","):
            for k in map(int, args.ks.split(",")):
                results.append(await accuracy(server, kind, k, args.rows, args.concurrency))
                print(f"  {kind} K={k} done", file=sys.stderr)
        print(f"Estimate vs run, N={args.rows}, latency {args.latency * 1000:g} ms, max_concurrency {args.concurrency}")
        print(table(results))
        server.set_latency("writer", args.budget_latency)
        server.set_latency("embedder", args.budget_latency)
        caps = []
        for concurrency in map(int, args.concurrencies.split(",")):
            caps.append(await budget(server, concurrency, args.budget_rows))
            print(f"  budget at concurrency {concurrency} done", file=sys.stderr)
        latency = f"latency {args.budget_latency * 1000:g} ms"
        print(f"\nBudget at 40 % of the projected cost, N={args.budget_rows}, {latency}")
        print(table(caps))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
