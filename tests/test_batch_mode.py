"""Batch-API mode (SPEC §14) over real HTTP against the fake server's Files and Batches
API, through the CLI (real processes, a real kill -9) and the API."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import cli_here, start_cli, write

import genwire
from genwire.engine.records.batch_journal import JOURNAL_NAME
from genwire.engine.records.checkpoint import checkpoint_dir
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


def run_json(*args: str | Path) -> dict[str, Any]:
    proc = cli_here("run", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def online_output(server: FakeOpenAIServer, cfg: dict[str, Any], root: Path) -> str:
    """The same pipeline run online to another file, with its own response cache."""
    where = root / "online"
    proc = cli_here("run", write(cfg, where / "genwire.yaml"), "-o", where / "out.jsonl", "--no-response-cache")
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


def start_held_batch_run(
    server: FakeOpenAIServer, root: Path
) -> tuple[dict[str, Any], Path, Path, subprocess.Popen[str]]:
    """``run --batch`` of the test pipeline with the server holding its batches open, once
    its first batch is in the journal (it is, before the run waits on it): the config, its
    file, the checkpoint directory and the process."""
    cfg = pipeline(server, root)
    config = write(cfg, root / "genwire.yaml")
    directory = checkpoint_dir(root / "out.jsonl")
    server.batches.hold()
    proc = start_cli("run", config, "--batch")
    wait_until("the first batch in the journal", lambda: "batch" in journal_events(directory), proc)
    return cfg, config, directory, proc


@pytest.mark.parametrize("fresh", [False, True], ids=["resumed", "fresh"])
def test_a_kill_9_while_a_batch_is_open_then_a_rerun_reattaches_and_pays_nothing_twice(
    tmp_path: Path, fresh: bool
) -> None:
    """Resumed, or started afresh (--fresh drops the rows, not the batches still running
    at the provider: their requests are asked again, and collected from them)."""
    with FakeOpenAIServer() as server:
        cfg, config, directory, proc = start_held_batch_run(server, tmp_path)
        wait_until("the run to poll its batch", lambda: server.batches.retrievals >= 2, proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        assert server.batches.uploads == server.batches.created == 1

        polls = server.batches.retrievals
        again = start_cli("run", config, "--batch", "--json", *(["--fresh"] if fresh else []))
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
        assert ("--fresh keeps the 1 batch(es) an earlier run left open" in err) == fresh
        batch_out = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
        assert batch_out == online_output(server, cfg, tmp_path)


def test_an_expired_batch_keeps_its_done_lines_and_resubmits_the_rest_once(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        server.batches.expire_next(0.5)  # round 1's batch: 20 lines done, 20 never run
        summary = run_json(config, "--batch")
        assert summary["rows_written"] == N
        assert summary["batches"][0]["status"] == "expired"
        assert summary["batches"][0]["completed"] == N // 2
        assert server.batches.lines["writer"] == 2 * N  # the done half was not asked again
        submitted = server.batches.custom_ids
        assert len(submitted) == 2 * N + N // 2  # the expired half was submitted exactly twice
        assert sorted(submitted[N // 2 : N]) == sorted(
            set(submitted) - set(submitted[: N // 2]) & set(submitted[N // 2 : N])
        )
        assert len(set(submitted)) == 2 * N
        server.reset_stats()
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == online_output(server, cfg, tmp_path)


def test_error_file_lines_follow_the_online_retry_rules(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        server.script("writer", [503, 503])  # transient: retried in a later round (retries: 1)
        server.fail_when("writer", "Write about c", 400)  # bad_response: those rows fail, not retried
        summary = run_json(config, "--batch", "--skip-preflight")  # the probe would take a 503
        failed_rows = summary["rows_failed"]
        errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
        assert failed_rows == len(errors) > 0
        assert {e["error_class"] for e in errors} == {"bad_response"}
        assert {e["column"] for e in errors} == {"first"}
        assert all(e["data"]["topic"] == "c" for e in errors)
        assert summary["rows_written"] == N - failed_rows
        assert summary["models"]["writer"]["retries"] == 2
        assert server.batches.created >= 3  # the retried lines went out in a later round

        server.reset_stats()
        where = tmp_path / "online"
        server.script("writer", [503, 503])
        proc = cli_here("run", write(cfg, where / "genwire.yaml"), "--skip-preflight", "-o", where / "out.jsonl")
        assert proc.returncode == 0, proc.stderr
        assert server.requests["writer"] == 2 * (N - failed_rows) + failed_rows + 2
        assert (tmp_path / "out.jsonl").read_text() == (where / "out.jsonl").read_text()
        online_errors = [json.loads(line) for line in (where / "out.jsonl.errors.jsonl").read_text().splitlines()]
        assert [(e["row"], e["error_class"]) for e in errors] == [(e["row"], e["error_class"]) for e in online_errors]
        assert all(e["error"].endswith("(a batch line)") for e in errors)


def test_files_are_split_at_max_requests(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path, max_requests=15)
        summary = run_json(write(cfg, tmp_path / "genwire.yaml"), "--batch")
        assert summary["rows_written"] == N
        sizes = [b["requests"] for b in summary["batches"]]
        assert max(sizes) == 15 and sum(sizes) == 2 * N and len(sizes) >= 6
        assert server.batches.uploads == server.batches.created == len(sizes)
        assert server.batches.lines["writer"] == 2 * N


def test_a_batch_run_then_a_fresh_online_run_sends_no_generation_request_and_back(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.vary_answers()  # a new request would show in the output
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        run_json(config, "--batch")
        first = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
        server.reset_stats()
        summary = run_json(config, "--fresh")
        assert server.requests["writer"] == 1  # the probe only: every answer from the response cache
        assert summary["models"]["writer"]["cached"] == 2 * N
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == first

        # And the other way round: an online run's answers serve a batch run.
        cfg["pipeline"]["columns"][2]["params"]["prompt"] = "Tell me about {{ topic }} {{ uid }}"
        write(cfg, config)
        run_json(config, "--fresh")
        online = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
        server.reset_stats()
        summary = run_json(config, "--fresh", "--batch")
        assert server.batches.uploads == server.batches.created == 0
        assert summary["models"]["writer"]["batched"] == 0
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == online


@pytest.mark.parametrize(
    ("enabled", "key", "error_class"), [(False, KEY, "not_found"), (True, "sk-wrong-key-000000", "auth")]
)
def test_a_provider_without_the_batch_api_fails_the_preflight_naming_batch_mode(
    tmp_path: Path, enabled: bool, key: str, error_class: str
) -> None:
    with FakeOpenAIServer() as server:
        server.batches.enabled = enabled
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        if not enabled:
            proc = cli_here("run", config, "--batch", "--json")
        else:  # the key works for chat (the probe passes) but not for the batch API
            server.require_api_key(KEY)
            server.batches.require_api_key(key)
            proc = cli_here("run", config, "--batch", "--json")
        assert proc.returncode == 1
        report = json.loads(proc.stdout)["preflight"]
        check = next(c for c in report["checks"] if c["kind"] == "batch_api")
        assert check["status"] == "failed" and check["error_class"] == error_class
        assert "batch mode" in check["message"] and "--batch" in check["message"]
        assert "batch mode" in proc.stderr
        assert KEY not in proc.stdout + proc.stderr
        assert server.batches.uploads == server.batches.created == 0
        assert not (tmp_path / "out.jsonl").exists()


def test_embeddings_go_through_batches_too(tmp_path: Path) -> None:
    with FakeOpenAIServer(dimensions=8) as server:
        cfg = pipeline(server, tmp_path, n=12)
        cfg["models"]["embedder"] = {"provider": "srv", "model": "embedder", "kind": "embedding", "dimensions": 8}
        cfg["pipeline"]["columns"].append(
            {
                "name": "vec",
                "generator": "embedding",
                "resources": {"model": "embedder"},
                "params": {"column": "second"},
            }
        )
        config = write(cfg, tmp_path / "genwire.yaml")
        summary = run_json(config, "--batch")
        assert summary["rows_written"] == 12
        assert server.requests["embedder"] == 1  # its probe
        assert server.batches.lines["embedder"] >= 1
        assert summary["models"]["embedder"]["batched"] == server.batches.lines["embedder"]
        server.reset_stats()
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == online_output(server, cfg, tmp_path)


async def test_the_api_takes_batch_mode_through_run_options(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        container = genwire.boot(pipeline(server, tmp_path, n=10))
        async with container:
            options = genwire.RunOptions(output=tmp_path / "api.jsonl", batch=True, probe_cache=False)
            result = await container.run(options)
        assert result.rows_written == 10
        assert server.requests["writer"] == 1
        assert result.batches is not None and [b.status for b in result.batches] == ["completed", "completed"]
        assert result.usage["writer"].batched == 20
        # The older keywords still work and mean the same options.
        assert genwire.RunOptions.of(None, use_cache=False, cache_dir=tmp_path) == genwire.RunOptions(
            probe_cache=False, probe_cache_dir=tmp_path
        )
        with pytest.raises(TypeError, match="use_cahce"):
            genwire.RunOptions.of(None, use_cahce=False)
        async with container:
            with pytest.raises(genwire.RunError, match="batch mode runs on the local engine"):
                await container.run(options, engine="ray")
        assert server.batches.uploads == 2  # the refused run sent nothing


def test_ctrl_c_leaves_the_batch_running_and_batches_list_and_cancel_manage_it(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg, config, directory, proc = start_held_batch_run(server, tmp_path)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "1 batch is still running" in err and f"genwire batches cancel {config}" in err
        assert server.batches.open_batches() and server.batches.cancels == 0  # left running
        assert (directory / JOURNAL_NAME).exists()  # kept, though no row is done

        listed = cli_here("batches", "list", config, "--json")
        assert listed.returncode == 0, listed.stderr
        [batch] = json.loads(listed.stdout)["batches"]
        assert batch["status"] == "in_progress" and batch["requests"] == N and batch["provider"] == "srv"
        assert KEY not in listed.stdout + listed.stderr

        cancelled = cli_here("batches", "cancel", config)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "cancel asked" in cancelled.stdout
        assert server.batches.cancels == 1 and not server.batches.open_batches()

        # The rerun finds the batch cancelled by the user: its rows fail as cancelled, nothing
        # is resubmitted; the run after that (the user's choice) submits them, once.
        server.batches.hold(False)
        stopped = cli_here("run", config, "--batch", "--json")
        assert stopped.returncode == 1, stopped.stderr
        errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
        assert len(errors) == N and {e["error_class"] for e in errors} == {"cancelled"}
        assert "cancelled" in errors[0]["error"] and server.batches.created == 1
        summary = run_json(config, "--batch")
        assert summary["rows_written"] == N
        assert server.batches.lines["writer"] == 2 * N
        assert not directory.exists()
        server.reset_stats()
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == online_output(server, cfg, tmp_path)


def test_a_rerun_after_a_failure_rate_stop_asks_failed_lines_again(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        cfg["pipeline"]["max_failure_rate"] = 0.1
        config = write(cfg, tmp_path / "genwire.yaml")
        server.fail_when("writer", "Write about c", 400)
        stopped = cli_here("run", config, "--batch")
        assert stopped.returncode == 1 and "max_failure_rate" in stopped.stderr
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        assert "ended" in journal_events(directory)  # the journal stays with the checkpoint

        server.clear()  # the cause is fixed: the rerun sends the failed requests again
        server.reset_stats()
        summary = run_json(config, "--batch")
        assert summary["rows_written"] == N and summary["rows_failed"] == 0
        assert server.batches.lines["writer"] > 0
        server.reset_stats()
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == online_output(server, cfg, tmp_path)


def test_a_structured_reply_that_fails_its_schema_is_asked_again_in_a_later_round_and_never_cached(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path, n=6)
        cfg["pipeline"]["columns"][3] = {
            "name": "second",
            "generator": "llm-structured",
            "params": {
                "prompt": "Facts about {{ first }}",
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            },
        }
        config = write(cfg, tmp_path / "genwire.yaml")
        run_json(config, "--batch")  # fills the response cache with the first column's answers
        cfg["pipeline"]["columns"][3]["params"]["prompt"] = "Numbers about {{ first }}"
        write(cfg, config)
        server.reset_stats()
        server.script("writer", ["not_json"])  # the first structured line: prose, not JSON
        summary = run_json(config, "--batch", "--fresh", "--skip-preflight")  # a probe would take the script
        assert summary["rows_written"] == 6 and summary["rows_failed"] == 0
        assert server.batches.lines["writer"] == 6 + 1  # one re-ask, in a round of its own
        assert server.batches.created == 2
        rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        assert all(row["second"] == {"n": 1} for row in rows)

        # The rejected reply was never cached: an online --fresh rerun asks that one prompt
        # again (its re-ask's answer is cached but no longer needed) and nothing else.
        server.reset_stats()
        summary = run_json(config, "--fresh")
        asked = [b["messages"][-1]["content"] for _, b in server.bodies]
        assert len(asked) == 3  # the two probes (plain, and the structured shape) and that prompt
        assert asked[2].startswith("Numbers about") and "rejected" not in asked[2]
        assert summary["models"]["writer"]["cached"] == 11


def test_batch_settings_are_checked_and_located() -> None:
    bad = {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": "http://127.0.0.1:9/v1",
                "batch": {"poll_interval_s": 0, "max_file_mb": 500, "completion_window": "1d"},
            }
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "columns": [
                {"name": "a", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "hi"}}
            ]
        },
    }
    with pytest.raises(genwire.ConfigError) as caught:
        genwire.boot(bad)
    text = str(caught.value)
    for where in ("batch.poll_interval_s", "batch.max_file_mb", "batch.completion_window"):
        assert f"providers.srv.{where}" in text


def test_a_batch_created_but_not_yet_journaled_at_the_kill_is_found_by_its_file(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        _, config, directory, proc = start_held_batch_run(server, tmp_path)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        # As if the kill came between POST /batches and the journal's line for it.
        journal = directory / JOURNAL_NAME
        lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
        journal.write_text("".join(line for line in lines if '"event":"batch"' not in line), encoding="utf-8")
        assert journal_events(directory) == ["file"]

        server.batches.hold(False)
        server.batches.release()
        summary = run_json(config, "--batch")
        assert summary["rows_written"] == N
        assert server.batches.created == 2 and server.batches.uploads == 2  # round 2 only: round 1 was found
        assert server.batches.lines["writer"] == 2 * N


def test_a_failed_batch_is_resubmitted_whole(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        server.batches.fail_next("line 3: bad json")
        summary = run_json(write(cfg, tmp_path / "genwire.yaml"), "--batch")
        assert summary["rows_written"] == N
        assert [b["status"] for b in summary["batches"]] == ["failed", "completed", "completed"]
        assert server.batches.lines["writer"] == 2 * N


def test_an_auth_error_line_fails_its_row_as_auth_and_never_shows_the_key(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        server.fail_when("writer", "Write about c", "echo_auth")  # a 401 quoting the Authorization header
        summary = run_json(write(cfg, tmp_path / "genwire.yaml"), "--batch")
        errors_file = (tmp_path / "out.jsonl.errors.jsonl").read_text(encoding="utf-8")
        errors = [json.loads(line) for line in errors_file.splitlines()]
        assert summary["rows_failed"] == len(errors) > 0
        assert {e["error_class"] for e in errors} == {"auth"}
        assert server.batches.created == 2  # not retried: auth is not transient
        assert KEY not in errors_file and "***" in errors_file
