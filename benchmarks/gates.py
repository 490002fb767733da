"""Quality gates (SPEC §21): what a gate costs per candidate, and how well the estimate
projects a gated run.

1. Gate overhead per candidate, in process: ``keep-if``, ``keep-unique`` and ``keep-novel``
   (384-d vectors) deciding batches of 64 candidates, the stateful gates with 0 and with
   20,000 kept rows (the imperfect case: every candidate compared with all of them), against
   a ``template`` column (no gate) measured in the same run as the baseline; memory is the
   gate's state (tracemalloc) once it holds the kept rows. keep-novel's embedding calls go
   to an in-process fake whose own cost is measured apart and subtracted.
2. The estimate's projection against the run: ``genwire estimate -k 60`` then ``genwire run``
   of ``n -> question (priced) -> keep-if`` at acceptance 70 % (happy), 30 % and 10 % (few
   kept in the sample: a wide interval), N = 100, against the fake server: projected
   candidates and cost vs what the run took.

    python benchmarks/gates.py [--kept 20000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from genwire.generators.base import Generator
from genwire.generators.builtin.keep_if import KeepIf
from genwire.generators.builtin.keep_novel import KeepNovel
from genwire.generators.builtin.keep_unique import KeepUnique
from genwire.generators.builtin.template import Template
from genwire.generators.resources import Resources
from genwire.testing import FakeEmbeddingModel, FakeOpenAIServer

BATCH = 64


class TimedEmbeddings(FakeEmbeddingModel):
    """The fake's vectors, with the time spent making them (not the gate's) counted apart."""

    def __init__(self) -> None:
        super().__init__(dimensions=384)
        self.spent = 0.0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await super().embed(texts)
        finally:
            self.spent += time.perf_counter() - started


def build(cls: type[Generator[Any]], params: dict[str, Any], resources: dict[str, Any] | None = None) -> Any:
    return cls(
        column="g",
        params=cls.params_model.model_validate(params),
        resources=Resources(cls.metadata.name, "g", resources or {}),
    )


def rows(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"text": f"candidate text number {i} about topic {i % 997}", "score": i % 5 + 1}
        for i in range(start, start + count)
    ]


async def per_candidate(gen: Any, start: int, rounds: int, model: TimedEmbeddings | None) -> float:
    """Microseconds per candidate over ``rounds`` batches of fresh candidates, after one
    batch not counted (imports and first-call costs)."""
    await gen.generate_batch(rows(start, BATCH), list(range(start, start + BATCH)))
    gc.collect()
    if model is not None:
        model.spent = 0.0
    started = time.perf_counter()
    for r in range(rounds):
        first = start + (r + 1) * BATCH
        await gen.generate_batch(rows(first, BATCH), list(range(first, first + BATCH)))
    took = time.perf_counter() - started - (model.spent if model is not None else 0.0)
    return took / (rounds * BATCH) * 1e6


async def fill(gen: Any, kept: int) -> float:
    """Let ``kept`` distinct candidates through; returns the state's memory in MB."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await gen.remember(rows(0, kept), list(range(kept)))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / 1e6


async def overhead(kept: int, rounds: int) -> list[tuple[str, str, float, str]]:
    out: list[tuple[str, str, float, str]] = []
    baseline = build(Template, {"template": "{{ text }}"})
    out.append(("template (baseline, not a gate)", "-", await per_candidate(baseline, 0, rounds, None), "-"))
    keep_if = build(KeepIf, {"expression": "score >= 4 and text|length > 10"})
    out.append(("keep-if", "-", await per_candidate(keep_if, 0, rounds, None), "-"))
    for size in (0, kept):
        unique = build(KeepUnique, {"column": "text", "normalize": True})
        memory = await fill(unique, size) if size else 0.0
        us = await per_candidate(unique, kept + 1, rounds, None)
        out.append(("keep-unique", f"{size:,}", us, f"{memory:.1f} MB"))
    for size in (0, kept):
        model = TimedEmbeddings()
        novel = build(KeepNovel, {"column": "text"}, {"model": model})
        memory = await fill(novel, size) if size else 0.0
        us = await per_candidate(novel, kept + 1, rounds, model)
        out.append(("keep-novel (384-d, embedding excluded)", f"{size:,}", us, f"{memory:.1f} MB"))
    return out


def pipeline(url: str, root: Path, percent: int, wanted: int) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "api_key": "k", "max_concurrency": 16}},
        "models": {
            "writer": {
                "provider": "srv",
                "model": "writer",
                "kind": "chat",
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0},
            }
        },
        "pipeline": {
            "num_records": wanted,
            "seed": 3,
            "batch_size": 16,
            "output": str(root / "out.jsonl"),
            "columns": [
                {
                    "name": "n",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 0, "high": 10**9, "integer": True},
                },
                {
                    "name": "question",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "About {{ n }}"},
                },
                {"name": "keep", "generator": "keep-if", "params": {"expression": f"n % 100 < {percent}"}},
            ],
        },
    }


def genwire(*args: str | Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"genwire {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def projection(percent: int, wanted: int, sample: int) -> tuple[int, int, float, float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer() as server:
        root = Path(tmp)
        config = root / "genwire.yaml"
        config.write_text(yaml.safe_dump(pipeline(server.url, root, percent, wanted)), encoding="utf-8")
        estimate = genwire("estimate", config, "-k", str(sample))
        run = genwire("run", config)
    gates = estimate["gates"]
    projected = estimate["candidates_needed"]["expected"]
    return (
        percent,
        sample,
        estimate["acceptance"]["rate"],
        projected,
        run["candidates"],
        gates["cost_usd"],
        run["cost"]["total_usd"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kept", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--wanted", type=int, default=100)
    parser.add_argument("--sample", type=int, default=60)
    args = parser.parse_args()

    print(f"1. gate overhead per candidate (batches of {BATCH}; {args.rounds} batches each)")
    print(f"{'gate':42} {'kept rows':>10} {'µs/candidate':>13} {'state memory':>13}")
    for name, kept, us, memory in asyncio.run(overhead(args.kept, args.rounds)):
        print(f"{name:42} {kept:>10} {us:>13.1f} {memory:>13}")

    print(f"\n2. estimate -k {args.sample} vs the run, N = {args.wanted} kept rows (fake server)")
    print(
        f"{'acceptance':>10} {'measured':>9} {'projected cand.':>16} {'actual cand.':>13} {'error':>7} "
        f"{'projected $':>12} {'actual $':>10} {'error':>7}"
    )
    for percent in (70, 30, 10):
        _, _, rate, projected, actual, cost, paid = projection(percent, args.wanted, args.sample)
        cand_error = (projected - actual) / actual
        cost_error = (cost - paid) / paid if cost is not None and paid else float("nan")
        print(
            f"{percent:>9}% {rate:>9.1%} {projected:>16,} {actual:>13,} {cand_error:>+7.0%} "
            f"{cost:>12.6f} {paid:>10.6f} {cost_error:>+7.0%}"
        )


if __name__ == "__main__":
    main()
