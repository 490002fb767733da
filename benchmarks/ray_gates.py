"""Quality gates on Ray (SPEC §21, §22): kept rows/s of a gated run on 2 Ray workers against
the local engine on the same work, in the same run, against the fake server (real HTTP on
127.0.0.1), and whether the output is the local engine's.

    python benchmarks/ray_gates.py [--rows 400] [--latency 0.02] [--concurrency 16]

Three cases, each a whole run (the Ray ones include booting the actors, a second or two;
Ray itself is started once, before the table):

* ``stateless``: ``n -> keep-if (2 in 3) -> echo (llm-text) -> keep-if (4 in 5)``: the gates
  run on the workers with the other columns; the driver only schedules and counts.
* ``in-order``: the same plus ``keep-unique`` and ``keep-novel`` (the fake server's
  embeddings): judged in index order by the keeper actor, one call per batch and gate.
* ``worker killed`` (the imperfect case): ``in-order`` with one worker process killed
  midway (``os._exit`` in a column past the first in-order gate): Ray restarts it and
  re-runs its block, the keeper gives the re-run batches their first verdicts.

"same" says whether the rows file equals the local engine's byte for byte.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import genwire
from genwire.generators import Generator, GeneratorMetadata
from genwire.testing import FakeOpenAIServer

HERE = Path(__file__).resolve().parent


class DieFromParams(BaseModel):
    marker: str
    at_or_after: int


class DieFrom(Generator[DieFromParams]):
    """Kills its worker process the first time it meets a row this high (one marker file)."""

    metadata = GeneratorMetadata(name="bench-die-from", description="crash", required_resources={})
    params_model = DieFromParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [0 for _ in rows]

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        if any(i >= self.params.at_or_after for i in indices):
            try:
                os.close(os.open(self.params.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return [0 for _ in rows]
            os._exit(1)
        return [0 for _ in rows]


def config(url: str, args: argparse.Namespace, out: Path, *, in_order: bool, die: Path | None) -> dict[str, Any]:
    values = [f"a{i}" for i in range(4 * args.rows)]  # and as many echoes: a few repeats each
    columns: list[dict[str, Any]] = [
        {"name": "n", "generator": "sampler", "params": {"kind": "uniform", "low": 0, "high": 10**9, "integer": True}},
        {"name": "a", "generator": "sampler", "params": {"kind": "category", "values": values}},
        {"name": "most", "generator": "keep-if", "params": {"expression": "n % 3 != 0"}},
    ]
    if in_order:
        columns.append({"name": "new_a", "generator": "keep-unique", "params": {"column": "a"}})
    if die is not None:
        columns.append(
            {"name": "die", "generator": "bench-die-from", "params": {"marker": str(die), "at_or_after": args.rows}}
        )
    columns += [
        {
            "name": "echo",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": "Say {{ n % " + str(4 * args.rows) + " }}"},
        },
        {"name": "fifths", "generator": "keep-if", "params": {"expression": "n % 5 != 0"}},
    ]
    if in_order:
        columns.append(
            {
                "name": "new_echo",
                "generator": "keep-novel",
                "resources": {"model": "embedder"},
                "params": {"column": "echo"},
            }
        )
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": args.concurrency}},
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding"},
        },
        "cache": {"enabled": False},
        "pipeline": {"num_records": args.rows, "seed": 7, "batch_size": 16, "output": str(out), "columns": columns},
    }


async def measure(cfg: dict[str, Any], engine: str) -> tuple[float, Any]:
    container = genwire.boot(cfg, generators=[DieFrom])
    async with container:
        started = time.perf_counter()
        extra: dict[str, Any] = {"ray_workers": 2} if engine == "ray" else {}
        result = await container.run(engine=engine, skip_preflight=True, **extra)
        return time.perf_counter() - started, result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    import ray

    # The workers import this file's generators from its directory: on their path through
    # the environment the local Ray inherits (as a plugin installed on every node), not a job
    # runtime_env, whose agent adds 0.7-1 s to every worker's start.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    sys.path.insert(0, str(HERE))
    print(
        f"{args.rows} kept rows, fake server latency {args.latency * 1000:.0f} ms, max_concurrency {args.concurrency}"
    )
    header = f"{'case':<16}{'engine':<8}{'kept':>6}{'candidates':>12}{'wall s':>9}{'kept/s':>9}{'vs local':>10}  same"
    print(header)
    print("-" * len(header))
    with FakeOpenAIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases = [("stateless", False, False), ("in-order", True, False), ("worker killed", True, True)]
        for name, in_order, kill in cases:
            outputs = {}
            local_rate = None
            for engine in ("local", "ray"):
                if kill and engine == "local":
                    engine_cfg = config(server.url, args, root / f"{name}-local.jsonl", in_order=in_order, die=None)
                else:
                    die = root / f"{name}-died" if kill else None
                    engine_cfg = config(server.url, args, root / f"{name}-{engine}.jsonl", in_order=in_order, die=die)
                wall, result = await measure(engine_cfg, engine)
                out = Path(engine_cfg["pipeline"]["output"])
                outputs[engine] = [
                    {k: v for k, v in row.items() if k != "die"}
                    for row in map(json.loads, out.read_text().splitlines())
                ]
                rate = result.rows_written / wall
                local_rate = rate if engine == "local" else local_rate
                ratio = f"{rate / local_rate:.0%}" if local_rate else ""
                same = "" if engine == "local" else ("yes" if outputs["ray"] == outputs["local"] else "NO")
                candidates = result.funnel.decided if result.funnel is not None else 0
                figures = f"{result.rows_written:>6}{candidates:>12}{wall:>9.2f}{rate:>9.1f}{ratio:>10}"
                print(f"{name:<16}{engine:<8}{figures}  {same}")
    ray.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
