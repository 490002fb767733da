"""keep-novel at scale (issue 53) and against bad embedding answers (issue 49 item 22):
runs through the CLI against the fake server (real processes, real HTTP)."""

from __future__ import annotations

import json
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support import cli, cli_here, start_cli, wait_for_rows, write

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.generators import Verdict
from genwire.generators.builtin.keep_novel import KeepNovel, KeepNovelParams
from genwire.generators.builtin.kept_index import GROWTH, IndexedKept, lists_for
from genwire.generators.resources import Resources
from genwire.testing import FakeEmbeddingModel, FakeOpenAIServer
from genwire.testing.vectors import near_duplicates

N = 24


def novel_pipeline(server: FakeOpenAIServer, root: Path, *, dimensions: int | None = None) -> dict[str, Any]:
    """``n → question (writer) → novel (keep-novel over the question)``, batches of 8."""
    embedder: dict[str, Any] = {"provider": "srv", "model": "embedder", "kind": "embedding"}
    if dimensions is not None:
        embedder["dimensions"] = dimensions
    columns = [
        {"name": "n", "generator": "sampler", "params": {"kind": "uniform", "low": 0, "high": 10**9, "integer": True}},
        {
            "name": "question",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": "Question about {{ n }}"},
        },
        {
            "name": "novel",
            "generator": "keep-novel",
            "resources": {"model": "embedder"},
            "params": {"column": "question"},
        },
    ]
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "api_key": "k", "max_concurrency": 4}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}, "embedder": embedder},
        "pipeline": {
            "num_records": N,
            "seed": 3,
            "batch_size": 8,
            "max_failure_rate": 1.0,
            "output": str(root / "out.jsonl"),
            "columns": columns,
        },
    }


@pytest.mark.parametrize("dimensions", [None, 384], ids=["dimensions-unset", "dimensions-384"])
@pytest.mark.parametrize("answer", ["wrong_dimensions", "one_wrong_dimension"])
def test_a_wrong_length_embedding_answer_fails_its_rows_and_a_healthy_rerun_asks_it_again(
    tmp_path: Path, dimensions: int | None, answer: str
) -> None:
    with FakeOpenAIServer() as server:
        healthy = write(
            novel_pipeline(server, tmp_path / "healthy", dimensions=dimensions), tmp_path / "healthy" / "genwire.yaml"
        )
        assert cli("run", healthy, "--skip-preflight").returncode == 0
        expected = (tmp_path / "healthy" / "out.jsonl").read_text()

        config = write(
            novel_pipeline(server, tmp_path / "run", dimensions=dimensions), tmp_path / "run" / "genwire.yaml"
        )
        server.script("embedder", ["ok", answer])  # the second batch's answer is 385 long (all, or its last)
        first = cli("run", config, "--skip-preflight", "--json")
        assert first.returncode == 0, first.stderr
        assert "Traceback" not in first.stderr and "plugin error" not in first.stderr
        assert json.loads(first.stdout)["rows_failed"] == 8  # the batch its answer was for
        errors = [json.loads(line) for line in (tmp_path / "run" / "out.jsonl.errors.jsonl").read_text().splitlines()]
        assert {e["column"] for e in errors} == {"novel"}
        assert all("385 dimensions" in e["error"] for e in errors), errors[0]["error"]

        server.reset_stats()
        again = cli("run", config, "--skip-preflight", "--json")  # the server is healthy now
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["rows_failed"] == 0
        assert server.requests["embedder"] >= 1  # the bad answer was not cached: asked again
    assert (tmp_path / "run" / "out.jsonl").read_text() == expected


# --- the index path: the exact path's verdicts, whatever the batching --------------------------

VECTORS = near_duplicates(3000, 384, share=0.3, clusters=50, seed=11)


class TableEmbeddings(FakeEmbeddingModel):
    """Text ``"row i"`` embeds as ``VECTORS[i]``: near-duplicates a test chose."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [VECTORS[int(t.split()[1])].tolist() for t in texts]


def novel_gate(**params: Any) -> KeepNovel:
    return KeepNovel(
        column="novel",
        params=KeepNovelParams.model_validate({"column": "text", **params}),
        resources=Resources("keep-novel", "novel", {"model": TableEmbeddings()}),
    )


async def verdicts(gate: KeepNovel, candidates: range, batch: int) -> list[tuple[bool, str]]:
    out = []
    for start in range(candidates.start, candidates.stop, batch):
        indices = list(range(start, min(start + batch, candidates.stop)))
        for value in await gate.generate_batch([{"text": f"row {i}"} for i in indices], indices):
            assert isinstance(value, Verdict), value
            out.append((value.keep, value.reason))
    return out


async def test_the_index_path_rejects_what_every_row_compared_rejects_however_batched() -> None:
    exact = await verdicts(novel_gate(index="exact"), range(3000), 64)
    rejected = sum(not keep for keep, _ in exact)
    assert 200 < rejected < 900  # the data holds near-duplicates on both sides of the threshold
    indexed = await verdicts(novel_gate(index_from=64), range(3000), 64)  # trained on the first 64
    assert await verdicts(novel_gate(index_from=64), range(3000), 7) == indexed  # the same, batched otherwise
    missed = sum(e != i for e, i in zip(exact, indexed, strict=True))
    assert missed <= rejected // 100  # >= 99 % of the exact gate's rejections, each with its reason
    # auto: every row compared up to 1,000 kept rows, then the index; where it switches
    # depends on the kept rows alone, not on where a batch starts.
    auto = await verdicts(novel_gate(index_from=1000), range(3000), 64)
    assert await verdicts(novel_gate(index_from=1000), range(3000), 13) == auto
    assert auto[:1200] == exact[:1200]


def clusters(gate: KeepNovel) -> int:
    kept = gate._kept
    assert isinstance(kept, IndexedKept)
    return kept.clusters


async def test_the_index_learns_more_clusters_as_the_kept_rows_grow_and_judges_the_same_however_batched() -> None:
    # 2 clusters from 64 rows; 16 from the first 640, trained beside from there, in use from 800
    gate = novel_gate(index_from=64)
    whole = await verdicts(gate, range(3000), 64)
    assert clusters(gate) == lists_for(GROWTH * 64) == 16
    assert await verdicts(novel_gate(index_from=64), range(3000), 5) == whole


async def test_a_gate_that_remembers_an_earlier_session_judges_as_an_uninterrupted_one() -> None:
    # index_from 100: retrained from the first flush (rows join 256 at a time) at or past 1,000
    # kept rows, 1,124, in use from 1,636, while the resumed gate replays the earlier ones
    whole = await verdicts(novel_gate(index_from=100), range(3000), 64)
    resumed = novel_gate(index_from=100)
    earlier = [i for i, (keep, _) in enumerate(whole[:2100]) if keep]  # what passed before the kill
    assert len(earlier) > 1636
    await resumed.remember([{"text": f"row {i}"} for i in earlier], earlier)
    assert clusters(resumed) == lists_for(1124) == 32
    assert await verdicts(resumed, range(2100, 3000), 50) == whole[2100:]


# --- a run through the index, killed at half -----------------------------------------------


def repeating_pipeline(server: FakeOpenAIServer, root: Path, concurrency: int) -> dict[str, Any]:
    """keep-novel through its index from 64 kept rows (rows join it 256 at a time, and it is
    retrained from 640) over questions that repeat (``n`` in 0..839: a repeated question is a
    cosine of 1)."""
    cfg = novel_pipeline(server, root)
    cfg["providers"]["srv"]["max_concurrency"] = concurrency
    cfg["pipeline"].update(num_records=560, batch_size=16, max_failure_rate=0.0)
    cfg["pipeline"]["columns"][0]["params"].update(high=839)
    cfg["pipeline"]["columns"][2]["params"].update(index_from=64)
    return cfg


def test_kill_9_at_half_of_a_run_through_the_index_resumes_to_the_uninterrupted_output(tmp_path: Path) -> None:
    with FakeOpenAIServer(latency=0.005) as server:
        reference = write(repeating_pipeline(server, tmp_path / "ref", 64), tmp_path / "ref" / "genwire.yaml")
        done = cli_here("run", reference, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["rejected"]["novel"] > 50  # the gate had work to do

        config = write(repeating_pipeline(server, tmp_path / "run", 8), tmp_path / "run" / "genwire.yaml")
        proc = start_cli("run", config)
        wait_for_rows(checkpoint_dir(tmp_path / "run" / "out.jsonl"), 300, proc)  # past the graph's first rows
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        assert not (tmp_path / "run" / "out.jsonl").exists()
        server.wait_idle()
        again = cli_here("run", config)
        assert again.returncode == 0, again.stderr
    assert (tmp_path / "run" / "out.jsonl").read_text() == (tmp_path / "ref" / "out.jsonl").read_text()
