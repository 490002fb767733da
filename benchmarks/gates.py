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

3. At scale (issue 53): keep-novel's two ways of comparing at ``--kept`` kept rows, on
   synthetic 384-d vectors with topics and 20 % near-duplicates (``genwire.testing.vectors.
   near_duplicates``): every row (``index: exact``, the baseline) against the HNSW index,
   per candidate (the gate's calls: one search a batch of 64, the exact check of near hits), its
   recall of the exact gate's rejections, its memory and build time. Two query sets: mixed
   (20 % near-duplicates at cosines 0.85-0.99) and borderline (every candidate a
   near-duplicate at 0.90-0.94, the imperfect case). Then keep-near-unique per candidate at
   ``--kept`` kept texts (40 words, a third of the candidates near-duplicates).

    python benchmarks/gates.py [--kept 20000] [--rounds 20] [--parts overhead estimate scale]

Part 3 builds its index with single-threaded adds, as the gate does: ``--kept 200000`` took
12 minutes on a 2-core machine at load 10-12 (3 ms an add); ``--kept 1000000`` builds five
times as many rows and holds 3.5 GB at once (the vectors, every row's matrix and the index).
``--parts scale`` runs part 3 alone.
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

import numpy as np
import numpy.typing as npt
import yaml

from genwire.generators.base import Generator
from genwire.generators.builtin.keep_if import KeepIf
from genwire.generators.builtin.keep_near_unique import KeepNearUnique
from genwire.generators.builtin.keep_novel import INDEX_FROM, KeepNovel
from genwire.generators.builtin.keep_unique import KeepUnique
from genwire.generators.builtin.kept_index import IndexedKept
from genwire.generators.builtin.kept_vectors import ExactKept
from genwire.generators.builtin.template import Template
from genwire.generators.resources import Resources
from genwire.testing import FakeEmbeddingModel, FakeOpenAIServer
from genwire.testing.vectors import near_duplicates

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
    parser.add_argument("--queries", type=int, default=2000, help="candidates timed in part 3")
    parser.add_argument("--parts", nargs="+", default=["overhead", "estimate", "scale"])
    parser.add_argument("--hnsw", action="store_true", help="part 3 also times the HNSW graph (needs usearch)")
    args = parser.parse_args()
    if "overhead" in args.parts:
        overhead_part(args)
    if "estimate" in args.parts:
        estimate_part(args)
    if "scale" in args.parts:
        scale_part(args.kept, args.queries, hnsw=args.hnsw)


def overhead_part(args: argparse.Namespace) -> None:
    print(f"1. gate overhead per candidate (batches of {BATCH}; {args.rounds} batches each)")
    print(f"{'gate':42} {'kept rows':>10} {'µs/candidate':>13} {'state memory':>13}")
    for name, kept, us, memory in asyncio.run(overhead(args.kept, args.rounds)):
        print(f"{name:42} {kept:>10} {us:>13.1f} {memory:>13}")


def estimate_part(args: argparse.Namespace) -> None:
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


def queries_of(kept: npt.NDArray[np.float32], count: int, low: float, high: float, share: float) -> Any:
    """``count`` candidates: a ``share`` of them near-duplicates of kept rows at cosines in
    [low, high), the others new rows of the same topics."""
    fresh = near_duplicates(count, kept.shape[1], share=0.0, seed=99)
    rng = np.random.default_rng(7)
    again = rng.random(count) < share
    sources = kept[rng.integers(0, len(kept), count)]
    noise = rng.standard_normal(sources.shape, dtype=np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    cosine = rng.uniform(low, high, count).astype(np.float32)
    moved = sources + noise * np.sqrt(1 / cosine**2 - 1)[:, None]
    moved /= np.linalg.norm(moved, axis=1, keepdims=True)
    return np.where(again[:, None], moved, fresh).astype(np.float32)


def scale_part(
    kept: int, count: int, threshold: float = 0.92, *, index_from: int = INDEX_FROM, hnsw: bool = False
) -> None:
    print(f"\n3. at scale: {kept:,} kept rows, {count:,} candidates timed (384-d, threshold {threshold})")
    started = time.perf_counter()
    vectors = near_duplicates(kept, 384, share=0.2, seed=1)
    exact = ExactKept()
    exact.add_many(vectors, list(range(kept)))
    # CPU time of this thread: the figures hold on a machine shared with other jobs
    built = time.thread_time()
    index = IndexedKept(vectors[:index_from], list(range(index_from)))  # trained on the first rows, as the gate
    trained_s = time.thread_time() - built
    grown = time.thread_time()
    index.add_many(vectors[index_from:], list(range(index_from, kept)))
    add_us = (time.thread_time() - grown) / max(1, kept - index_from) * 1e6
    kinds: list[tuple[str, Any]] = [("index (faiss IVF-PQ)", index)]
    if hnsw:
        kinds.append(("HNSW (usearch, ef 128)", HnswKept(vectors)))
    del vectors
    print(
        f"index trained on {index_from:,} rows in {trained_s:.1f} s; a row added in {add_us:.0f} µs (one thread); "
        f"memory: index {index.memory_bytes / 1e6:,.0f} MB (exact vectors on disk), "
        f"every row {kept * 384 * 4 / 1e6:,.0f} MB"
    )
    print(f"{'candidates':12} {'way':24} {'µs/candidate':>13} {'+ add':>7} {'rejected':>9} {'recall':>8}")
    matrix = exact.matrix()
    for name, low, high, share in (("mixed", 0.85, 0.99, 0.2), ("borderline", 0.90, 0.94, 1.0)):
        queries = queries_of(matrix, count, low, high, share)
        gc.collect()
        exact_us, truth = judged(exact, queries, threshold)
        rejected = sum(s >= threshold for s in truth)
        print(f"{name:12} {'every row (exact)':24} {exact_us:>13.1f} {'-':>7} {rejected:>9,} {'-':>8}")
        for way, kept_rows in kinds:
            way_us, found = judged(kept_rows, queries, threshold)
            caught = sum(e >= threshold and f >= threshold for e, f in zip(truth, found, strict=True))
            wrong = sum(f >= threshold > e for e, f in zip(truth, found, strict=True))
            assert not wrong, "the index rejected a row the exact gate keeps: hits are verified exactly"
            recall = f"{caught / rejected:.2%}" if rejected else "-"
            adds = add_us if kept_rows is index else kept_rows.add_us
            print(f"{'':12} {way:24} {way_us:>13.1f} {adds:>7.0f} {rejected:>9,} {recall:>8}")
    del exact, index, matrix, kinds
    gc.collect()
    near_unique(kept, count)
    print(f"part 3 took {time.perf_counter() - started:.0f} s")


def judged(kept: Any, queries: npt.NDArray[np.float32], threshold: float) -> tuple[float, list[float]]:
    """(CPU µs a candidate, each candidate's closest cosine) in batches of 64, as the gate asks."""
    started = time.thread_time()
    found = [
        s
        for start in range(0, len(queries), BATCH)
        for s, _ in kept.closest_each(queries[start : start + BATCH], threshold)
    ]
    return (time.thread_time() - started) / len(queries) * 1e6, found


class HnswKept:
    """The HNSW graph this gate used before (usearch, int8, its default graph settings),
    for the comparison only: an exact check of its 16 nearest, as the gate did."""

    def __init__(self, vectors: npt.NDArray[np.float32]) -> None:
        from usearch.index import Index

        self._vectors = vectors
        self._index = Index(ndim=vectors.shape[1], metric="cos", dtype="i8", expansion_add=128, expansion_search=64)
        started = time.thread_time()
        for start in range(0, len(vectors), 256):
            keys = np.arange(start, min(start + 256, len(vectors)), dtype=np.uint64)
            self._index.add(keys, vectors[start : start + 256], threads=1)
        self.add_us = (time.thread_time() - started) / len(vectors) * 1e6

    def closest_each(self, vectors: npt.NDArray[np.float32], floor: float) -> list[tuple[float, int]]:
        found: Any = self._index.search(vectors, 16, threads=1)
        out = []
        for i, vector in enumerate(vectors):
            keys = np.sort(found.keys[i][: int(found.counts[i])]).astype(np.int64)
            scores = self._vectors[keys] @ vector
            best = int(scores.argmax())
            out.append((float(scores[best]), int(keys[best])))
        return out


def near_unique(kept: int, count: int) -> None:
    import random

    rng = random.Random(3)
    words = [f"w{i}" for i in range(20_000)]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(40))

    gate = build(KeepNearUnique, {"column": "text"})
    t = time.perf_counter()
    asyncio.run(gate.remember([{"text": text()} for _ in range(kept)], list(range(kept))))
    fill_s = time.perf_counter() - t
    kept_texts = [text() for _ in range(64)]
    candidates = []
    for i in range(count):
        if i % 3 == 2:  # a near-duplicate: a few words of a recent text changed
            words_of = kept_texts[rng.randrange(len(kept_texts))].split()
            for _ in range(rng.randint(0, 3)):
                words_of[rng.randrange(40)] = rng.choice(words)
            candidates.append({"text": " ".join(words_of)})
        else:
            candidates.append({"text": text()})
    t = time.perf_counter()
    for start in range(0, count, BATCH):
        indices = list(range(kept + start, kept + min(start + BATCH, count)))
        asyncio.run(gate.generate_batch(candidates[start : start + BATCH], indices))
    us = (time.perf_counter() - t) / count * 1e6
    print(f"keep-near-unique: {us:.1f} µs a candidate at {kept:,} kept texts (filled in {fill_s:.0f} s)")


if __name__ == "__main__":
    main()
