"""``genwire estimate`` and ``genwire report`` exit as ``run`` does (issue 41 items 8 and
22): a failed pre-flight, an unwritable ``-o``, a ``-n`` beyond what a row index can
number, Ctrl-C and SIGTERM each end with one message (no traceback), the exit code of the
same ending of ``run``, and under ``--json`` exactly one JSON object on stdout. Real
processes, real signals, the fake server."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support import cli, start_cli, write

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.testing import FakeOpenAIServer


def one_object(stdout: str) -> dict[str, Any]:
    value, end = json.JSONDecoder().raw_decode(stdout.strip())
    assert end == len(stdout.strip()), f"more than one JSON object on stdout: {stdout!r}"
    assert isinstance(value, dict)
    return value


def pipeline(server: FakeOpenAIServer, root: Path, model: str = "writer", n: int = 40) -> Path:
    return write(
        {
            "providers": {"srv": {"kind": "openai", "base_url": server.url, "api_key": "sk-x", "retries": 0}},
            "models": {model: {"provider": "srv", "model": model, "kind": "chat"}},
            "pipeline": {
                "num_records": n,
                "batch_size": 2,
                "output": str(root / "out.jsonl"),
                "columns": [
                    {"name": "i", "generator": "sampler", "params": {"kind": "uuid"}},
                    {
                        "name": "a",
                        "generator": "llm-text",
                        "resources": {"model": model},
                        "params": {"prompt": "Say {{ i }}"},
                    },
                ],
            },
        },
        root / "genwire.yaml",
    )


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer(latency=0.01) as srv:
        yield srv


def test_a_failed_preflight_exits_1_with_one_json_object(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.fail_when("writer", "", 401)
    done = cli("estimate", pipeline(server, tmp_path), "--json")
    assert done.returncode == 1, done.stderr
    summary = one_object(done.stdout)
    assert summary["ok"] is False and "pre-flight failed" in summary["error"]
    assert [c["status"] for c in summary["preflight"]["checks"]] == ["failed"]
    assert "Traceback" not in done.stderr and "NameError" not in done.stderr
    assert "error: pre-flight failed" in done.stderr


def test_an_unwritable_output_exits_2_with_one_json_object(server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    done = cli("estimate", pipeline(server, tmp_path), "--json", "-o", tmp_path / "afile" / "out.jsonl")
    assert done.returncode == 2, done.stderr
    assert "is a file, not a directory" in one_object(done.stdout)["error"]
    assert "Traceback" not in done.stderr
    assert server.requests == {}  # refused before anything was paid


def test_too_many_rows_exits_1_with_one_json_object(server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = cli("estimate", pipeline(server, tmp_path), "--json", "-n", str(10**30))
    assert done.returncode == 1, done.stderr
    assert "more rows than a row index can number" in one_object(done.stdout)["error"]
    assert "Traceback" not in done.stderr


def test_without_json_an_error_is_one_line_on_stderr(server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = cli("estimate", pipeline(server, tmp_path), "-n", str(10**30))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip().splitlines()[0]]
    assert done.stderr.startswith("error: num_records")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_sampling_keeps_the_rows_and_exits_like_run(
    server: FakeOpenAIServer, tmp_path: Path, signum: int, code: int
) -> None:
    server.set_latency("writer", 0.3)
    path = pipeline(server, tmp_path)
    proc = start_cli("estimate", path, "--json", "-k", "40")
    directory = checkpoint_dir(tmp_path / "out.jsonl")
    deadline = time.monotonic() + 120
    while not any(directory.glob("rows-*.jsonl")) or os.path.getsize(next(directory.glob("rows-*.jsonl"))) == 0:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no row was ever kept"
        time.sleep(0.05)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    summary = one_object(stdout)
    assert summary["ok"] is False and summary["error"] == "interrupted"
    assert summary["rows_kept"] >= 1 and summary["checkpoint"] == str(directory)
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(f"interrupted: {summary['rows_kept']} of 40 rows kept in ")
    # The rows the sample kept are the run's: it continues after them.
    done = cli("run", path, "--json")
    assert done.returncode == 0, done.stderr
    assert one_object(done.stdout)["rows_resumed"] == summary["rows_kept"]


def test_a_report_that_cannot_be_written_leaves_no_temporary_file(tmp_path: Path) -> None:
    """The page is written beside its target and renamed over it; when the rename fails
    (the target is a folder) the command says so, exit 2, and no ``.tmp`` is left."""
    output = tmp_path / "out.jsonl"
    checkpoint_dir(output).mkdir()
    (tmp_path / "out.jsonl.report.html").mkdir()
    done = cli("report", output)
    assert done.returncode == 2, done.stderr
    assert "cannot write the report" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl.checkpoint", "out.jsonl.report.html"]


# --- an estimate is its own ending (issue 41 item 10) ---------------------------------------


def test_an_estimate_is_its_own_ending_and_keeps_a_finished_runs_report(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    path = pipeline(server, tmp_path, n=6)
    output = tmp_path / "out.jsonl"
    page = output.with_name("out.jsonl.report.html")
    done = cli("run", path, "--json")
    assert done.returncode == 0, done.stderr
    finished = page.read_text(encoding="utf-8")
    assert 'data-metric="outcome">completed<' in finished

    # An estimate over the finished run's output: it samples rows into a new checkpoint,
    # and the finished run's report stays the page beside its output.
    done = cli("estimate", path, "--json", "-k", "2", "-n", "8")
    assert done.returncode == 0, done.stderr
    assert page.read_text(encoding="utf-8") == finished
    assert not page.with_name(page.name + ".tmp").exists()
    lines = [json.loads(x) for x in (checkpoint_dir(output) / "metrics.jsonl").read_text().splitlines()]
    ends = [line for line in lines if line["kind"] == "end"]
    assert [e["outcome"] for e in ends] == ["estimate"]
    assert "genwire run" in ends[0]["message"]

    # Its session, asked for, is badged as what it was: an estimate, not a completed run.
    done = cli("report", output)
    assert done.returncode == 0, done.stderr
    sampled = page.read_text(encoding="utf-8")
    assert 'data-metric="outcome">estimate<' in sampled
