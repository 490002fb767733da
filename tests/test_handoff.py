"""The dataset hand-off (SPEC §24) of a real gated run: the examples/good-rows pipeline run
offline against genwire's fake OpenAI-compatible server, with a canary secret in its API
key's variable; then its card, its export loaded by ``datasets``, and its refusals."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from handoff_support import CANARY, SERVED_AS, GatedRun, run_good_rows

from genwire.cli.main import cli
from genwire.providers.money import usd
from genwire.testing.fake_server import FakeOpenAIServer


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedRun]:
    with FakeOpenAIServer() as server:
        yield run_good_rows(tmp_path_factory.mktemp("handoff"), server)


def front_matter(card: str) -> dict[str, object]:
    match = re.match(r"---\n(.*?)\n---\n", card, re.S)
    assert match, card[:200]
    meta = yaml.safe_load(match.group(1))
    assert isinstance(meta, dict)
    return meta


def no_canary_below(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), f"the secret is in {path}"


def test_the_card_of_a_gated_run_says_how_it_was_made(gated: GatedRun) -> None:
    from huggingface_hub import DatasetCardData

    target = gated.project / "CARD.md"
    result = CliRunner().invoke(cli, ["card", str(gated.output), "-o", str(target)])
    assert result.exit_code == 0, result.output
    card = target.read_text(encoding="utf-8")
    meta = front_matter(card)
    DatasetCardData(**meta)  # the Hub library's own model takes it
    assert meta["tags"] == ["synthetic", "genwire"] and meta["size_categories"] == ["n<1K"]
    assert meta["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}], "default": True}
    ]
    from genwire.version import __version__

    assert "* seed: `7`" in card and f"genwire version: `{__version__}`" in card
    summary = gated.summary
    candidates, kept = summary["candidates"], summary["rows_written"]
    assert f"* candidates: **{candidates}**" in card and f"* kept: **{kept}**" in card
    for gate, count in summary["rejected"].items():  # type: ignore[attr-defined]
        assert f"Rejected by `{gate}`: {count}" in card
    # Each model: the id asked, the id the server named, tokens and cost with the price source.
    models = summary["models"]
    cost = summary["cost"]["by_model"]  # type: ignore[index]
    for alias, asked in [("writer", "meta/llama-3.1-8b-instruct"), ("judge", "meta/llama-3.1-70b-instruct")]:
        row = next(line for line in card.splitlines() if line.startswith(f"| {alias} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == asked
        assert cells[5] == str(models[alias]["prompt_tokens"]) and cells[6] == str(models[alias]["completion_tokens"])
        assert cells[7] == usd(cost[alias]["usd"]) and cells[8]  # the one money format == f"models.{alias}.price"
    judge_row = next(line for line in card.splitlines() if line.startswith("| judge |"))
    assert SERVED_AS in judge_row  # what the server said, not what was asked
    graph = card.split("```mermaid\n", 1)[1].split("```", 1)[0]
    for name in ["topic", "angle", "answer", "verdict", "novel", "good", "writer", "judge", "embedder", "nim"]:
        assert f'["{name}<br/>' in graph or f'{{{{"{name}<br/>' in graph or f'(["{name}<br/>' in graph, name
    # The pipeline file as written: the reference, never the value.
    assert "api_key: ${NVIDIA_API_KEY:-none}" in card
    assert CANARY not in card
    no_canary_below(gated.project)


def test_the_card_streams_statistics_of_the_output_columns(gated: GatedRun) -> None:
    result = CliRunner().invoke(cli, ["card", str(gated.output)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in gated.output.read_text().splitlines()]
    table = result.stdout.split("## Columns", 1)[1].split("##", 1)[0]
    lines = {
        line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ") and "---" not in line
    }
    assert set(lines) == {"column", "topic", "angle", "answer", "verdict"}  # no gate column
    unique_topics = 100 * len({r["topic"] for r in rows}) / len(rows)
    assert f"| {unique_topics:.1f} |" in lines["topic"]
    mean_answer = sum(len(r["answer"]) for r in rows) / len(rows)
    assert f"| {mean_answer:.1f} |" in lines["answer"]
    assert result.stdout.count("```json\n") == 3  # three sample rows


def test_the_export_loads_with_datasets_offline(gated: GatedRun, tmp_path: Path) -> None:
    folder = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", str(gated.output), str(folder), "--with-rejected"])
    assert result.exit_code == 0, result.output
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "README.md",
        "data/train-00000-of-00001.parquet",
        "rejected/train-00000-of-00001.parquet",
    ]
    script = (
        "import datasets, json, sys\n"
        "d = datasets.load_dataset(sys.argv[1], cache_dir=sys.argv[2])\n"
        "r = datasets.load_dataset(sys.argv[1], 'rejected', cache_dir=sys.argv[2])\n"
        "print(json.dumps({'train': d['train'].to_list(), 'rejected': r['train'].to_list()}))\n"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder), str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    rows = [json.loads(line) for line in gated.output.read_text().splitlines()]
    assert loaded["train"] == rows  # every row, the output's columns only (no gate column)
    rejected = [
        json.loads(line) for line in (gated.output.parent / "good.jsonl.rejected.jsonl").read_text().splitlines()
    ]
    assert len(loaded["rejected"]) == len(rejected) == gated.summary["candidates"] - len(rows)  # type: ignore[operator]
    for got, line in zip(loaded["rejected"], rejected, strict=True):
        assert (got["candidate"], got["gate"], got["reason"]) == (line["candidate"], line["gate"], line["reason"])
        assert {k: got[k] for k in line["row"]} == line["row"]
    no_canary_below(folder)


def test_an_export_past_the_shard_size_is_several_shards(gated: GatedRun, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from genwire.engine.handoff.export import export

    done = export(gated.output, tmp_path / "x", shard_bytes=1)  # every chunk of rows its own shard
    names = [p.name for p in done.shards]
    assert names == [f"train-{i:05d}-of-{len(names):05d}.parquet" for i in range(len(names))]
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in done.shards) == done.rows == 8


def test_an_unfinished_run_is_refused_with_what_to_do(gated: GatedRun, tmp_path: Path) -> None:
    project = tmp_path / "again"
    shutil.copytree(gated.project, project)
    checkpoint = project / "out" / "good.jsonl.checkpoint"
    checkpoint.mkdir()
    (checkpoint / "meta.json").write_text("{}")  # a run over this output is under way
    for args in (
        ["export", str(project / "out" / "good.jsonl"), str(tmp_path / "x")],
        ["card", str(project / "out" / "good.jsonl")],
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert "has not finished" in result.output and "rerun the same `genwire run` command" in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_an_output_without_a_run_record_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "rows.jsonl"
    output.write_text('{"a": 1}\n')
    result = CliRunner().invoke(cli, ["card", str(output)])
    assert result.exit_code == 2 and "no run record" in result.output, result.output


def test_the_report_page_draws_the_same_wiring(gated: GatedRun) -> None:
    page = (gated.output.parent / "good.jsonl.report.html").read_text(encoding="utf-8")
    svg = page.split('data-graph="wiring"', 1)[1].split("</svg>", 1)[0]
    for node in [
        "column:topic",
        "column:answer",
        "column:verdict",
        "gate:novel",
        "gate:good",
        "model:judge",
        "provider:nim",
    ]:
        assert f'data-node="{node}"' in svg
    assert "<script" not in page
