"""What a run says (issue 41 item 25): where its report page is, a failure rate at (not
above) its limit, plurals that agree, the setting a pre-flight timeout names, the paid
answers an early Ctrl-C leaves in the response cache, and which figures of a resumed run
are this session's and which the whole run's. Real processes against the fake server."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support import cli_here, start_cli, write

from genwire.testing import FakeOpenAIServer


def pipeline(server: FakeOpenAIServer, root: Path, n: int, **extra: Any) -> Path:
    columns = [
        {"name": "i", "generator": "sampler", "params": {"kind": "uuid"}},
        {"name": "a", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "Say {{ i }}"}},
        {"name": "b", "generator": "llm-text", "resources": {"model": "critic"}, "params": {"prompt": "Judge {{ a }}"}},
    ]
    config: dict[str, Any] = {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "api_key": "sk-x", "retries": 0}},
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "critic": {"provider": "srv", "model": "critic", "kind": "chat"},
        },
        "cache": {"dir": str(root / "responses")},
        "pipeline": {"num_records": n, "batch_size": 4, "output": str(root / "out.jsonl"), "columns": columns},
    }
    for key, value in extra.items():
        config.setdefault(key, {}).update(value)
    return write(config, root / "genwire.yaml")


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer(latency=0.01) as srv:
        yield srv


def test_a_finished_run_says_where_its_report_is_and_plurals_agree(server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = cli_here("run", pipeline(server, tmp_path, 1), "--no-response-cache", "--skip-preflight")
    assert done.returncode == 0, done.stderr
    page = tmp_path / "out.jsonl.report.html"
    assert f"report page: {page}" in done.stdout and page.is_file()
    assert "1 request (0 retries" in done.stdout and "1 requests" not in done.stdout
    # --json: stdout is the object; the page is named on stderr.
    done = cli_here("run", pipeline(server, tmp_path, 1), "--json", "--fresh")
    assert done.returncode == 0 and json.loads(done.stdout)["ok"] is True
    assert f"report page: {page}" in done.stderr
    # The page's pre-flight: "2 checks", not "2 check(s)".
    assert re.search(r">2 checks(<| in)", page.read_text(encoding="utf-8"))


def test_every_row_failed_at_a_rate_of_100_percent_says_at_not_above(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.fail_when("critic", "Judge", 400)
    path = pipeline(server, tmp_path, 3, pipeline={"max_failure_rate": 1.0})
    done = cli_here("run", path)
    assert done.returncode == 1, done.stderr
    assert "3 of 3 rows failed (100%), at max_failure_rate 100%" in done.stderr
    assert f"report page: {tmp_path / 'out.jsonl.report.html'}" in done.stderr


def test_a_preflight_timeout_names_the_setting_that_raises_it(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.set_latency("critic", 30)
    done = cli_here("preflight", pipeline(server, tmp_path, 2, preflight={"timeout_s": 1, "deadline_s": 20}))
    assert done.returncode == 1, done.stderr
    said = " ".join((done.stdout + done.stderr).split())  # the table wraps its cells
    assert "preflight.timeout_s 1 per check" in said and "preflight.deadline_s 20" in said


def test_ctrl_c_before_any_row_says_how_many_paid_answers_the_cache_holds(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.set_latency("critic", 120)  # no row can finish: each waits for its critic
    path = pipeline(server, tmp_path, 8, preflight={"timeout_s": 1, "deadline_s": 5})
    proc = start_cli("run", path, "--skip-preflight")
    deadline = time.monotonic() + 60
    while server.requests.get("critic", 0) < 8:  # every writer answer is in, the critics pending
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, server.requests
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "nothing to resume" not in stderr
    assert "interrupted before any row was kept; the response cache holds the 8 answers paid for so far" in stderr
    assert len(stderr.strip().splitlines()) == 1  # one line, the report page's place in it
    assert stderr.strip().endswith(f"; report page: {tmp_path / 'out.jsonl.report.html'}")
    # And it does: the rerun asks the writer nothing.
    server.set_latency("critic", 0.01)
    asked = server.requests["writer"]
    done = cli_here("run", path, "--skip-preflight")
    assert done.returncode == 0, done.stderr
    assert server.requests["writer"] == asked


def test_a_resumed_run_says_which_figures_are_this_sessions(server: FakeOpenAIServer, tmp_path: Path) -> None:
    path = pipeline(server, tmp_path, 8)
    done = cli_here("estimate", path, "-k", "4")  # the first session: 4 rows kept
    assert done.returncode == 0, done.stderr
    done = cli_here("run", path)
    assert done.returncode == 0, done.stderr
    assert "Run summary (rows: the whole run; time, requests and tokens: this session)" in done.stdout
    assert "model writer (this session)" in done.stdout
    assert "Cost of the whole run (every session; this session's share below)" in done.stdout
    assert "total (whole run)" in done.stdout and "this session" in done.stdout
