"""Each example runs offline: retrieval on the embedded models (tests/test_local_pipeline.py),
the judge pipeline against genwire's fake OpenAI-compatible server, as its README says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import yaml
from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.testing import FakeOpenAIServer

REPO = Path(__file__).parent.parent
JUDGE = REPO / "examples" / "judge"
GOOD_ROWS = REPO / "examples" / "good-rows"


def test_every_example_is_run_by_a_test() -> None:
    examples = sorted(p.parent.name for p in (REPO / "examples").glob("*/genwire.yaml"))
    # retrieval: tests/test_local_pipeline.py; tools: tests/test_tools.py; judge, good-rows: below.
    assert examples == ["good-rows", "judge", "retrieval", "tools"], "a new example needs a test that runs it offline"


def test_the_judge_example_runs_offline(tmp_path: Path, fake_openai_server: FakeOpenAIServer) -> None:
    project = tmp_path / "judge"
    shutil.copytree(JUDGE, project, ignore=shutil.ignore_patterns("out", ".genwire"))
    result = CliRunner(env={"GENWIRE_BASE_URL": fake_openai_server.url}).invoke(
        cli, ["run", str(project / "genwire.yaml"), "-n", "6", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows_written"] == 6 and summary["rows_failed"] == 0
    schema = yaml.safe_load((JUDGE / "genwire.yaml").read_text())["pipeline"]["columns"][2]["params"]["schema"]
    rows = [json.loads(line) for line in (project / "out" / "judged.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    for row in rows:
        assert row["answer"].strip()
        jsonschema.validate(row["verdict"], schema)
        assert row["score"] == str(row["verdict"]["score"])
    # The judge was asked with the schema as response_format (and probed with it first);
    # the writer never was.
    judge_bodies = [body for model, body in fake_openai_server.bodies if model == "meta/llama-3.1-70b-instruct"]
    writer_bodies = [body for model, body in fake_openai_server.bodies if model == "meta/llama-3.1-8b-instruct"]
    assert len(judge_bodies) == 7 and len(writer_bodies) == 7  # 6 rows and one pre-flight probe each
    assert all(b["response_format"]["json_schema"]["schema"] == schema for b in judge_bodies)
    assert not any("response_format" in b for b in writer_bodies)


def test_the_good_rows_example_keeps_n_rows_every_gate_passed(
    tmp_path: Path, fake_openai_server: FakeOpenAIServer
) -> None:
    project = tmp_path / "good-rows"
    shutil.copytree(GOOD_ROWS, project, ignore=shutil.ignore_patterns("out", ".genwire"))
    fake_openai_server.vary_structured("*")  # as `python -m genwire.testing.serve --vary-structured`
    result = CliRunner(env={"GENWIRE_BASE_URL": fake_openai_server.url}).invoke(
        cli, ["run", str(project / "genwire.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows_written"] == 8 and set(summary["rejected"]) <= {"novel", "good"}
    assert summary["rejected"].get("good", 0) > 0  # the judge's scores vary: some are below 4
    rows = [json.loads(line) for line in (project / "out" / "good.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and len({r["answer"] for r in rows}) == 8
    assert all(r["verdict"]["score"] >= 4 and "novel" not in r and "good" not in r for r in rows)
    rejected = (project / "out" / "good.jsonl.rejected.jsonl").read_text().splitlines()
    assert summary["candidates"] == 8 + len(rejected)
