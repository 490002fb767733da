"""The generation run over real HTTP against the fake server."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import pytest

import genwire
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.testing import FakeOpenAIServer

DOCS = {
    "a.md": "Cats purr when content. They sleep most of the day.\n\nCats hunt mice at night.",
    "b.md": "Rust has no garbage collector. Ownership rules free memory.\n\nCargo builds Rust code.",
    "c.txt": "The Nile is a long river. It flows north into the Mediterranean.",
    "d.txt": "Bread rises because yeast makes gas. Bakers knead the dough.",
}


def write_docs(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    return docs


def full_pipeline(
    server: FakeOpenAIServer, root: Path, output: str = "out.jsonl", n: int = 30, max_concurrency: int = 8
) -> dict[str, Any]:
    """Every built-in generator in one pipeline."""
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": server.url,
                "max_concurrency": max_concurrency,
                "backoff_s": 0.01,
                "retries": 3,
            }
        },
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding", "dimensions": 384},
        },
        "datasets": {"corpus": {"kind": "documents", "path": str(write_docs(root)), "chunk_chars": 60}},
        "defaults": {"embedding_model": "embedder"},
        "pipeline": {
            "num_records": n,
            "seed": 3,
            "output": str(root / output),
            "batch_size": 8,
            "columns": [
                {
                    "name": "passage",
                    "generator": "seed-dataset",
                    "resources": {"dataset": "corpus"},
                    "params": {"shuffle": True},
                },
                {"name": "style", "generator": "sampler", "params": {"kind": "category", "values": ["short", "long"]}},
                {
                    "name": "n",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 1, "high": 5, "integer": True},
                },
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {
                    "name": "question",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "A {{ style }} question about: {{ passage.text }}"},
                },
                {"name": "positive_id", "generator": "template", "params": {"template": "{{ passage.id }}"}},
                {"name": "qvec", "generator": "embedding", "params": {"column": "question"}},
                {"name": "variants", "generator": "template", "params": {"template": "{{ question }}"}},
                {
                    "name": "hard_negatives",
                    "generator": "hard-negatives",
                    "resources": {"corpus": "corpus"},
                    "params": {"column": "question", "positive": "positive_id", "k": 2},
                },
            ],
        },
    }


COLUMNS = ["passage", "style", "n", "uid", "question", "positive_id", "qvec", "variants", "hard_negatives"]


async def run(cfg: dict[str, Any], **kwargs: Any) -> genwire.engine.run.conductor.RunResult:  # type: ignore[name-defined]
    container = genwire.boot(cfg)
    async with container:
        return await container.run(**kwargs)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
async def test_every_builtin_every_format(fake_openai_server: FakeOpenAIServer, tmp_path: Path, fmt: str) -> None:
    result = await run(full_pipeline(fake_openai_server, tmp_path, f"data.{fmt}", n=30))
    assert result.rows_written == 30 and result.rows_failed == 0 and result.errors_file is None
    rows = read_rows(tmp_path / f"data.{fmt}")
    assert len(rows) == 30 and list(rows[0]) == COLUMNS
    if fmt != "csv":
        for row in rows:
            assert row["question"].startswith("answer to:") and row["positive_id"] == row["passage"]["id"]
            assert len(row["qvec"]) == 384 and 1 <= row["n"] <= 5 and row["style"] in ("short", "long")
            negs = row["hard_negatives"]
            assert len(negs) == 2 and all(neg["id"] != row["positive_id"] for neg in negs)
    assert result.requests["writer"] == 30 + 1  # one per row, plus the pre-flight probe
    assert list(tmp_path.glob(".*tmp")) == []


async def test_same_seed_same_rows(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = full_pipeline(fake_openai_server, tmp_path, "a.jsonl", n=20)
    await run(cfg)
    cfg["pipeline"]["batch_size"] = 3  # batch size must not change the data
    await run(cfg, output=tmp_path / "b.jsonl")
    assert read_rows(tmp_path / "a.jsonl") == read_rows(tmp_path / "b.jsonl")


async def test_in_flight_never_exceeds_max_concurrency(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.set_latency("writer", 0.02)
    cfg = full_pipeline(fake_openai_server, tmp_path, n=120, max_concurrency=5)
    result = await run(cfg)
    assert result.rows_written == 120
    assert fake_openai_server.peak_in_flight == 5


async def test_transient_failures_lose_no_rows(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.fail_rate("writer", 0.05, statuses=(503, 502, 429), seed=1)
    result = await run(full_pipeline(fake_openai_server, tmp_path, n=200), skip_preflight=True)
    assert result.rows_written == 200 and result.rows_failed == 0
    assert result.requests["writer"] > 200  # the failures were retried


async def test_permanent_failures_go_to_errors_file(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.fail_when("writer", "Nile", 400)
    cfg = full_pipeline(fake_openai_server, tmp_path, n=40)
    cfg["pipeline"]["max_failure_rate"] = 0.5
    result = await run(cfg, skip_preflight=True)
    failed = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    written = read_rows(tmp_path / "out.jsonl")
    assert result.rows_failed == len(failed) > 0 and result.rows_written == len(written) == 40 - len(failed)
    assert all(f["column"] == "question" and f["error_class"] == "bad_response" for f in failed)
    assert all("Nile" in f["data"]["passage"]["text"] for f in failed)
    assert sorted([f["row"] for f in failed]) == [f["row"] for f in failed]  # in row order
    assert not any("Nile" in r["passage"]["text"] for r in written)


async def test_failure_rate_threshold_stops_the_run(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.fail_when("writer", "", 400)  # every row
    with pytest.raises(genwire.RunError, match="above max_failure_rate"):
        await run(full_pipeline(fake_openai_server, tmp_path, n=200), skip_preflight=True)
    assert not (tmp_path / "out.jsonl").exists()
    assert (tmp_path / "out.jsonl.errors.jsonl").exists()


async def test_an_engine_that_gives_back_fewer_rows_stops_the_run_and_the_rerun_makes_them(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch lost between the engine and the sink (the shape of a race once found on
    Ray) never ends as a finished run short of rows: the run stops with the rows it has
    kept, and the rerun makes the lost ones only."""
    from genwire.engine.rows.local import LocalBatches

    batches = LocalBatches.batches

    async def losing_the_second(self: LocalBatches, *args: Any, **kwargs: Any) -> Any:
        async for number, result in aenumerate(batches(self, *args, **kwargs)):
            if number != 1:
                yield result

    cfg = full_pipeline(fake_openai_server, tmp_path, n=40)
    with monkeypatch.context() as patched:
        patched.setattr(LocalBatches, "batches", losing_the_second)
        with pytest.raises(genwire.RunError, match=r"gave back 32 of 40 rows \(8 neither written nor failed") as info:
            await run(cfg, skip_preflight=True)
    assert "32 rows are kept" in str(info.value) and "rerun the same command" in str(info.value)
    assert not (tmp_path / "out.jsonl").exists()
    asked = fake_openai_server.requests["writer"]
    result = await run(cfg, skip_preflight=True)
    assert result.rows_written == 40 and result.rows_resumed == 32
    assert fake_openai_server.requests["writer"] - asked == 8  # the lost batch's rows, nothing else
    again = tmp_path / "again"
    again.mkdir()
    await run(full_pipeline(fake_openai_server, again, n=40), skip_preflight=True)
    assert read_rows(tmp_path / "out.jsonl") == read_rows(again / "out.jsonl")  # as if nothing was lost


async def aenumerate(items: Any) -> Any:
    number = 0
    async for item in items:
        yield number, item
        number += 1


async def test_cancelled_run_leaves_no_partial_output(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.set_latency("writer", 0.05)
    container = genwire.boot(full_pipeline(fake_openai_server, tmp_path, n=400, max_concurrency=4))
    async with container:
        task = asyncio.create_task(container.run(skip_preflight=True))
        await asyncio.sleep(0.6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not (tmp_path / "out.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


async def test_failing_preflight_stops_before_generation(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.script("embedder", [401])
    with pytest.raises(genwire.PreflightError) as info:
        await run(full_pipeline(fake_openai_server, tmp_path, n=10))
    assert info.value.report.check("embedder").error_class == "auth"
    assert fake_openai_server.requests["writer"] == 1  # the probe only: no generation request
    assert not (tmp_path / "out.jsonl").exists()


class Snoop(Generator[Any]):
    metadata = GeneratorMetadata(name="snoop", description="x", required_resources={"model": ResourceKind.CHAT_MODEL})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        slot = "embedder"  # a name known at run time only: the static check warns, the runtime guard stops it
        return [await self.resources[slot].embed([str(r)]) for r in rows]


async def test_undeclared_access_fails_the_run(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = full_pipeline(fake_openai_server, tmp_path, n=5)
    cfg["pipeline"]["columns"].append({"name": "snoop", "generator": "snoop", "resources": {"model": "writer"}})
    container = genwire.boot(cfg, generators=[Snoop])
    async with container:
        with pytest.raises(genwire.UndeclaredResourceError, match="'snoop'"):
            await container.run()
    assert not (tmp_path / "out.jsonl").exists()


class Miscount(Generator[Any]):
    metadata = GeneratorMetadata(name="miscount", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [1]


class Crash(Generator[Any]):
    metadata = GeneratorMetadata(name="crash", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        raise ZeroDivisionError("oops")


@pytest.mark.parametrize(
    ("cls", "message"),
    [(Miscount, "returned 1 values for 4 rows"), (Crash, "'crash'.*raised in generate\\(\\): ZeroDivisionError: oops")],
)
async def test_plugin_bugs_fail_the_run_clearly(tmp_path: Path, cls: type[Generator[Any]], message: str) -> None:
    cfg = {
        "pipeline": {
            "num_records": 4,
            "output": str(tmp_path / "o.jsonl"),
            "columns": [{"name": "x", "generator": cls.metadata.name}],
        }
    }
    container = genwire.boot(cfg, generators=[cls])
    async with container:
        with pytest.raises(genwire.PluginError, match=message):
            await container.run()
    assert not (tmp_path / "o.jsonl").exists()


async def test_bad_output_extension_fails_before_any_request(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    with pytest.raises(genwire.RunError, match=r"'\.txt' is not a known format; use \.jsonl, \.csv or \.parquet"):
        await run(full_pipeline(fake_openai_server, tmp_path, n=5), output=tmp_path / "out.txt")
    assert fake_openai_server.total_requests == 0  # not even the pre-flight was paid for
