"""Batch-API mode (SPEC §14) over real HTTP against the fake server's Files and Batches
API, through the CLI (real processes, a real kill -9) and the API."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import genwire
from genwire.engine.batch_journal import JOURNAL_NAME
from genwire.engine.checkpoint import checkpoint_dir
from genwire.testing import FakeOpenAIServer

KEY = "sk-batch-canary-5f0e1d2c3b4a"
N = 40


def pipeline(server: FakeOpenAIServer, root: Path, n: int = N, **batch: Any) -> dict[str, Any]:
    """Two chat columns, the second reading the first; batch settings for tests."""
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": server.url,
                "api_key": KEY,
                "max_concurrency": 8,
                "backoff_s": 0.01,
                "retries": 1,
                "batch": {"poll_interval_s": 0.05, **batch},
            }
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "defaults": {"chat_model": "writer"},
        "pipeline": {
            "num_records": n,
            "seed": 3,
            "batch_size": 8,
            "max_failure_rate": 1.0,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "first", "generator": "llm-text", "params": {"prompt": "Write about {{ topic }} {{ uid }}"}},
                {"name": "second", "generator": "llm-text", "params": {"prompt": "Summarise {{ first }}"}},
            ],
        },
    }


def write(cfg: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def run_json(*args: str | Path) -> dict[str, Any]:
    proc = cli("run", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def online_output(server: FakeOpenAIServer, cfg: dict[str, Any], root: Path) -> str:
    """The same pipeline run online to another file, with its own response cache."""
    where = root / "online"
    proc = cli("run", write(cfg, where / "genwire.yaml"), "-o", where / "out.jsonl", "--no-response-cache")
    assert proc.returncode == 0, proc.stderr
    return (where / "out.jsonl").read_text(encoding="utf-8")


def test_two_dependent_columns_run_in_two_rounds_with_no_online_generation_and_the_online_output(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        summary = run_json(config, "--batch")
        assert server.requests["writer"] == 1  # the pre-flight's probe only: no online generation
        assert server.batches.lines["writer"] == 2 * N
        assert server.batches.uploads == server.batches.created == 2  # one batch per round
        assert summary["rows_written"] == N
        assert summary["models"]["writer"]["batched"] == 2 * N
        assert summary["models"]["writer"]["requests"] == 1
        batches = summary["batches"]
        assert [b["status"] for b in batches] == ["completed", "completed"]
        assert [b["requests"] for b in batches] == [N, N] == [b["completed"] for b in batches]
        batch_out = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
        assert not checkpoint_dir(tmp_path / "out.jsonl").exists()

        server.reset_stats()
        assert batch_out == online_output(server, cfg, tmp_path)
        assert server.requests["writer"] == 1 + 2 * N and server.batches.created == 0


def start_cli(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "genwire.cli.main", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(what: str, check: Any, proc: subprocess.Popen[str] | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc is None or proc.poll() is None, f"the run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def journal_events(directory: Path) -> list[str]:
    path = directory / JOURNAL_NAME
    if not path.exists():
        return []
    return [json.loads(line)["event"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_a_kill_9_while_a_batch_is_open_then_a_rerun_reattaches_and_pays_nothing_twice(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        server.batches.hold()
        proc = start_cli("run", config, "--batch")
        # The batch is in the journal before the run waits on it.
        wait_until("the first batch in the journal", lambda: "batch" in journal_events(directory), proc)
        wait_until("the run to poll its batch", lambda: server.batches.retrievals >= 2, proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        assert server.batches.uploads == server.batches.created == 1

        polls = server.batches.retrievals
        again = start_cli("run", config, "--batch", "--json")
        wait_until("the rerun to poll the open batch", lambda: server.batches.retrievals >= polls + 3, again)
        assert server.batches.uploads == server.batches.created == 1  # re-attached: nothing new submitted
        server.batches.hold(False)
        server.batches.release()
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        summary = json.loads(out)
        assert summary["rows_written"] == N
        assert server.batches.created == 2  # the second round's batch only
        assert server.batches.lines["writer"] == 2 * N  # every request answered once
        assert summary["models"]["writer"]["batched"] == N  # the rerun submitted round 2 only
        assert not directory.exists()
        batch_out = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
        assert batch_out == online_output(server, cfg, tmp_path)
