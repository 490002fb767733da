"""Batch mode hardened (SPEC §14, amended; issue 33 items 1-9): nothing paid twice after
interrupts, a collector that breaks fails the run, secrets scrubbed where errors are
recorded, output files gone at the provider, damaged journals, cancel during a run,
bounded output lines, ``batches list`` and the pre-flight of the batch endpoints. Real
processes against the fake server's Batch API."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import cli, cli_here, start_cli, write
from test_batch_mode import KEY, N, journal_events, pipeline, run_json, wait_until

from genwire.engine.records.batch_journal import JOURNAL_NAME
from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.testing import FakeOpenAIServer


def batch_ids(directory: Path) -> list[str]:
    path = directory / JOURNAL_NAME
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["batch"] for r in records if r.get("event") == "batch"]


def assert_each_request_paid_once(server: FakeOpenAIServer, requests: int) -> None:
    answered = server.batches.answered
    assert len(answered) == requests and set(answered.values()) == {1}, {k: v for k, v in answered.items() if v != 1}


def killed_with_round_1_open(
    server: FakeOpenAIServer, root: Path, cfg: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Path, Path, str]:
    """``run --batch`` killed (-9) with round 1's batch open at the provider (held): the
    config, its file, the checkpoint directory and the batch's id."""
    cfg = pipeline(server, root) if cfg is None else cfg
    config = write(cfg, root / "genwire.yaml")
    directory = checkpoint_dir(root / "out.jsonl")
    server.batches.hold()
    proc = start_cli("run", config, "--batch")
    wait_until("the batch in the journal", lambda: len(batch_ids(directory)) == 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    [batch] = batch_ids(directory)
    return cfg, config, directory, batch


def poke(server: FakeOpenAIServer, batch_id: str) -> None:
    """A GET of the batch, as a poll would: a released batch completes now."""
    request = urllib.request.Request(
        f"{server.url}/batches/{batch_id}", headers={"Authorization": f"Bearer {KEY}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["status"] in ("completed", "in_progress")


# --- 1. paid twice after Ctrl-C -------------------------------------------------------------


def test_a_kill_after_round_1_then_a_ctrl_c_then_a_rerun_pays_each_request_once_without_the_cache(
    tmp_path: Path,
) -> None:
    """The issue's sequence: run 1 ends round 1 and is killed with round 2 open; run 2
    re-attaches (following round 1's ended batch again: no cache) and is interrupted; run 3
    finishes. The ended batch recorded twice once removed the journal of an open batch."""
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        server.batches.hold_from(1)  # round 1 completes, round 2 stays open
        first = start_cli("run", config, "--batch", "--no-response-cache")
        wait_until("round 2's batch in the journal", lambda: len(batch_ids(directory)) == 2, first)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        round_1, round_2 = batch_ids(directory)

        polls = server.batches.polls[round_2]
        second = start_cli("run", config, "--batch", "--no-response-cache")
        wait_until("the rerun to follow round 2", lambda: server.batches.polls[round_2] >= polls + 3, second)
        assert server.batches.polls[round_1] >= 2  # round 1 was followed again for its answers
        second.send_signal(signal.SIGINT)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 130, err
        assert (directory / JOURNAL_NAME).exists()  # round 2 is open at the provider: the journal stays
        assert journal_events(directory).count("ended") == 1  # round 1's end is recorded once

        server.batches.release()
        server.batches.hold_from(None)
        summary = run_json(config, "--batch", "--no-response-cache")
        assert summary["rows_written"] == N
        assert server.batches.created == 2
        assert_each_request_paid_once(server, 2 * N)
        assert not directory.exists()


def test_a_fresh_run_that_no_longer_asks_an_open_batch_keeps_the_journal_naming_it(tmp_path: Path) -> None:
    """The journal is removed only when no batch it names is still open at the provider."""
    with FakeOpenAIServer() as server:
        cfg, config, directory, held = killed_with_round_1_open(server, tmp_path, pipeline(server, tmp_path, n=8))

        server.batches.hold(False)
        cfg["pipeline"]["columns"][2]["params"]["prompt"] = "Tell me about {{ topic }} {{ uid }}"  # other requests
        write(cfg, config)
        summary = run_json(config, "--batch", "--fresh")
        assert summary["rows_written"] == 8 and (tmp_path / "out.jsonl").exists()
        assert held in server.batches.open_batches()
        assert held in batch_ids(directory)  # the journal naming the open batch stays, nothing else
        assert sorted(p.name for p in directory.iterdir()) == [JOURNAL_NAME]
        listed = cli_here("batches", "list", config, "--json")
        assert {b["id"]: b["status"] for b in json.loads(listed.stdout)["batches"]}[held] == "in_progress"


def test_a_few_kill_and_interrupt_trials_answer_every_request_once(tmp_path: Path) -> None:
    """benchmarks/batch_fuzz.py's trial (30 and more there): random kill -9 / Ctrl-C across
    three sessions, the response cache on and off."""
    import random

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from batch_fuzz import trial
    finally:
        sys.path.pop(0)
    rng = random.Random(7)
    with FakeOpenAIServer() as server:
        for number in range(4):
            root = tmp_path / f"trial-{number}"
            root.mkdir()
            outcome = trial(server, root, rng, cache=number % 2 == 1, rows=12)
            assert outcome.ok, outcome


# --- 2. a collector that cannot write fails the run -----------------------------------------


@contextlib.contextmanager
def small_disk(root: Path) -> Iterator[Path | None]:
    """A 256 KiB tmpfs (a real ENOSPC) where the system lets us mount one, else None."""
    where = root / "small"
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True)
    if made.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _file_size_limit(limit: int) -> Any:
    def apply() -> None:  # a real EFBIG where no tmpfs can be mounted (not root)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_spool_file_that_cannot_be_written_fails_the_run_with_one_message_and_keeps_the_checkpoint(
    tmp_path: Path,
) -> None:
    """Round 1 goes through; round 2's requests are long (a padded prompt) and its spool
    file cannot be written: one message naming the file and the error, exit 1, one JSON
    object, the journal kept; the rerun with room collects round 1 from it (no cache)."""
    with FakeOpenAIServer() as server, small_disk(tmp_path) as disk:
        cfg = pipeline(server, tmp_path)
        cfg["pipeline"]["columns"][3]["params"]["prompt"] = "Summarise {{ first }} " + "with care " * 1200
        output = (disk if disk is not None else tmp_path) / "out.jsonl"
        cfg["pipeline"]["output"] = str(output)
        config = write(cfg, tmp_path / "genwire.yaml")
        args = ["run", config, "--batch", "--json", "--no-response-cache"]
        command = [sys.executable, "-m", "genwire.cli.main", *map(str, args)]
        limit = None if disk is not None else _file_size_limit(200_000)
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, preexec_fn=limit)
        assert proc.returncode == 1, proc.stderr
        [report] = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        assert report["ok"] is False
        message = report["error"]
        assert "batch mode stopped" in message and "batch-spool-" in message
        assert ("No space left on device" if disk is not None else "File too large") in message
        assert message in proc.stderr and "Traceback" not in proc.stderr
        directory = checkpoint_dir(output)
        assert "ended" in journal_events(directory)  # round 1, paid: kept for the rerun
        assert not list(directory.glob("batch-spool-*"))

        if disk is not None:
            subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        again = subprocess.run(command, capture_output=True, text=True, timeout=180)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["rows_written"] == N
        assert_each_request_paid_once(server, 2 * N)  # round 1 collected from its batch, not paid again


# --- 3. secrets scrubbed where an error is recorded -----------------------------------------


@pytest.mark.parametrize("how", ["failed", "expired"])
def test_batch_error_messages_quoting_the_key_never_reach_the_errors_file(tmp_path: Path, how: str) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path, n=8)
        leak = f"rejected for key {KEY}"
        if how == "failed":
            server.batches.fail_next(leak, count=4)  # every try of round 1 fails: the rows fail
        else:
            server.batches.expire_next(0.0, count=4, message=leak)
        proc = cli_here("run", write(cfg, tmp_path / "genwire.yaml"), "--batch", "--json")
        errors_file = (tmp_path / "out.jsonl.errors.jsonl").read_text(encoding="utf-8")
        errors = [json.loads(line) for line in errors_file.splitlines()]
        assert len(errors) == 8 and all("rejected for key ***" in e["error"] for e in errors)
        assert KEY not in errors_file + proc.stdout + proc.stderr


# --- 4. the output file gone at the provider -------------------------------------------------


@pytest.mark.parametrize("fresh", [False, True], ids=["resumed", "fresh"])
def test_a_batch_whose_output_file_is_gone_is_reported_once_and_its_requests_paid_again(
    tmp_path: Path, fresh: bool
) -> None:
    with FakeOpenAIServer() as server:
        _, config, directory, batch = killed_with_round_1_open(server, tmp_path)
        server.batches.hold(False)
        server.batches.release()
        poke(server, batch)  # it completes...
        assert server.batches.delete_outputs()  # ...and its output is deleted (or aged out)

        again = cli_here("run", config, "--batch", "--json", *(["--fresh"] if fresh else []))
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["rows_written"] == N
        assert again.stderr.count("is gone at the provider") == 1
        assert f"batch {batch}" in again.stderr and "paid again" in again.stderr
        assert server.batches.created == 3  # round 1 again, round 2
        assert not directory.exists()


# --- 5. a damaged journal --------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["ids_null", "ids_5", "truncated"])
def test_a_damaged_journal_line_is_a_warning_and_its_batch_is_found_again_at_the_provider(
    tmp_path: Path, damage: str
) -> None:
    with FakeOpenAIServer() as server:
        _, config, directory, batch = killed_with_round_1_open(server, tmp_path)
        journal = directory / JOURNAL_NAME
        lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
        assert json.loads(lines[0])["event"] == "file"
        record = json.loads(lines[0])
        if damage == "truncated":
            lines[0] = lines[0][: len(lines[0]) // 2] + "\n"
        else:
            record["ids"] = None if damage == "ids_null" else 5
            lines[0] = json.dumps(record) + "\n"
        journal.write_text("".join(lines), encoding="utf-8")

        listed = cli("batches", "list", config, "--json")
        assert "Traceback" not in listed.stderr
        assert f"{journal}: line 1 cannot be read" in listed.stderr
        shown = json.loads(listed.stdout)
        assert shown["ok"] is True and [b["id"] for b in shown["batches"]] == [batch]
        assert listed.returncode == 0, listed.stderr

        server.batches.hold(False)
        server.batches.release()
        again = cli("run", config, "--batch", "--json")
        assert again.returncode == 0, again.stderr
        assert f"{journal}: line 1 cannot be read" in again.stderr and "Traceback" not in again.stderr
        assert json.loads(again.stdout)["rows_written"] == N
        assert server.batches.created == 2  # round 1 was found again, not submitted again
        assert_each_request_paid_once(server, 2 * N)


# --- 6. cancel during a run ------------------------------------------------------------------


def test_cancel_refuses_while_a_run_holds_the_output_and_a_forced_cancel_fails_its_rows_as_cancelled(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path)
        config = write(cfg, tmp_path / "genwire.yaml")
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        server.batches.hold()
        proc = start_cli("run", config, "--batch", "--json")
        wait_until("the batch in the journal", lambda: len(batch_ids(directory)) == 1, proc)

        refused = cli_here("batches", "cancel", config)
        assert refused.returncode == 2
        assert f"PID {proc.pid}" in refused.stderr and "--force" in refused.stderr
        assert server.batches.cancels == 0 and server.batches.open_batches()

        forced = cli_here("batches", "cancel", config, "--force")
        assert forced.returncode == 0, forced.stderr
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err  # every row failed: above max_failure_rate... of 100%: kept == 0
        errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
        assert len(errors) == N and {e["error_class"] for e in errors} == {"cancelled"}
        assert server.batches.created == 1  # not resubmitted by the run
        assert json.loads(out)["ok"] is False


# --- 7. output lines bounded by max_response_mb ------------------------------------------------


def test_a_batch_output_line_past_max_response_mb_fails_its_row_only(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = pipeline(server, tmp_path, n=8)
        cfg["providers"]["srv"]["max_response_mb"] = 1
        server.batches.oversize_next(3 * 1024 * 1024)  # the first line of round 1: 3 MiB
        summary = run_json(write(cfg, tmp_path / "genwire.yaml"), "--batch")
        assert summary["rows_written"] == 7 and summary["rows_failed"] == 1
        [error] = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
        assert error["error_class"] == "bad_response" and "larger than 1 MB (max_response_mb)" in error["error"]


# --- 8. batches list -----------------------------------------------------------------------


def test_batches_list_says_not_ok_for_an_unreadable_batch_and_names_a_provider_gone_from_the_config(
    tmp_path: Path,
) -> None:
    with FakeOpenAIServer() as server:
        cfg, config, _, _ = killed_with_round_1_open(server, tmp_path)

        server.batches.enabled = False  # the provider cannot be asked
        unreadable = cli_here("batches", "list", config, "--json")
        assert unreadable.returncode == 1
        shown = json.loads(unreadable.stdout)
        assert shown["ok"] is False and "error" in shown["batches"][0]

        server.batches.enabled = True
        cfg["providers"]["other"] = cfg["providers"].pop("srv")
        cfg["models"]["writer"]["provider"] = "other"
        write(cfg, config)
        missing = cli_here("batches", "list", config, "--json")
        assert missing.returncode == 1
        shown = json.loads(missing.stdout)
        assert shown["ok"] is False
        assert "provider 'srv' is no longer in the config" in shown["batches"][0]["error"]
        table = cli_here("batches", "list", config)
        assert table.returncode == 1 and "'srv'" in table.stdout


# --- 9. the pre-flight checks the batch endpoints -------------------------------------------


@pytest.mark.parametrize("how", ["enabled", "flag"])
def test_preflight_checks_the_batch_endpoints_of_batching_providers(tmp_path: Path, how: str) -> None:
    with FakeOpenAIServer() as server:
        server.batches.enabled = False
        cfg = pipeline(server, tmp_path, enabled=how == "enabled")
        config = write(cfg, tmp_path / "genwire.yaml")
        proc = cli_here("preflight", config, "--json", *(["--batch"] if how == "flag" else []))
        assert proc.returncode == 1, proc.stderr
        report = json.loads(proc.stdout)
        [check] = [c for c in report["checks"] if c["kind"] == "batch_api"]
        assert check["status"] == "failed" and check["error_class"] == "not_found" and "batch mode" in check["message"]

        server.batches.enabled = True
        assert cli_here("preflight", config, "--json", *(["--batch"] if how == "flag" else [])).returncode == 0
        online = cli_here("preflight", write(pipeline(server, tmp_path), tmp_path / "online.yaml"), "--json")
        assert online.returncode == 0
        assert all(c["kind"] != "batch_api" for c in json.loads(online.stdout)["checks"])
