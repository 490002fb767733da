"""Durable runs (SPEC §9): checkpoints, resume, fingerprints, interrupts and kills, over
real HTTP against the fake server, through the CLI (real processes, real signals) and
the API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support import StopAfter, cli, cli_here, start_cli, wait_for_rows, write

import genwire
from genwire.engine.records.checkpoint import Checkpoint, checkpoint_dir, kept_rows
from genwire.errors import RunSetupError, RunStopped
from genwire.testing import FakeOpenAIServer

CANARY_KEY = "sk-canary-0123456789abcdef"


def pipeline(server: FakeOpenAIServer, root: Path, n: int = 120, **pipeline_extra: Any) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": server.url,
                "api_key": CANARY_KEY,
                "max_concurrency": 4,
                "backoff_s": 0.01,
                "retries": 1,
            }
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "num_records": n,
            "seed": 7,
            "batch_size": 10,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "flag", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
                {
                    "name": "q",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Question {{ flag }} {{ uid }}"},
                },
            ],
            **pipeline_extra,
        },
    }


def reference_output(server: FakeOpenAIServer, cfg: dict[str, Any], root: Path) -> str:
    """The same pipeline, run uninterrupted to another file."""
    ref = root / "reference"
    ref.mkdir(exist_ok=True)
    out = ref / "out.jsonl"
    proc = cli_here("run", write(cfg, ref / "genwire.yaml"), "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out.read_text(encoding="utf-8")


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.tmp"))


# --- kill -9, SIGINT, SIGTERM --------------------------------------------------------------


def test_kill_9_then_rerun_sends_only_the_missing_rows_and_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    with FakeOpenAIServer(latency=0.02) as server:
        cfg = pipeline(server, tmp_path, n=300)
        config = write(cfg, tmp_path / "genwire.yaml")
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        proc = start_cli("run", config)
        wait_for_rows(directory, 60, proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        kept = kept_rows(directory)
        assert 60 <= kept < 300
        assert not (tmp_path / "out.jsonl").exists()

        server.wait_idle()  # the killed process's last requests, still on the wire, land first
        server.reset_stats()
        again = cli_here("run", config)
        assert again.returncode == 0, again.stderr
        # One pre-flight probe, then exactly the rows the checkpoint lacked: sent, or taken
        # from the response cache (answered batches the kill caught before their checkpoint).
        info = cli_here("cache", "info", config, "--json")
        hits = json.loads(info.stdout)["hits"]
        assert server.requests["writer"] + hits == 1 + (300 - kept)
        assert f"{kept:,} resumed" in again.stdout
        assert not directory.exists()
        resumed = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
        assert resumed == reference_output(server, cfg, tmp_path)
        assert len(resumed.splitlines()) == 300


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_exits_promptly_keeps_the_rows_and_says_how_to_resume(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    with FakeOpenAIServer(latency=0.02) as server:
        cfg = pipeline(server, tmp_path, n=400)
        config = write(cfg, tmp_path / "genwire.yaml")
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        proc = start_cli("run", config)
        wait_for_rows(directory, 40, proc)
        proc.send_signal(signum)
        sent = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        assert time.monotonic() - sent < 10  # prompt, not hung (generous: a loaded machine)
        assert proc.returncode == code, stderr
        kept = kept_rows(directory)
        assert f"interrupted: {kept:,} of 400 rows kept in {directory}; rerun the same command to resume" in stderr
        assert "Traceback" not in stderr
        assert leftovers(tmp_path) == []
        assert not (tmp_path / "out.jsonl").exists()
        # The checkpoint holds no secret.
        for path in directory.iterdir():
            assert CANARY_KEY not in path.read_text(encoding="utf-8", errors="replace")

        again = cli_here("run", config)
        assert again.returncode == 0, again.stderr
        assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == reference_output(server, cfg, tmp_path)


# --- fingerprint, -n, provider settings (API) ------------------------------------------


async def settled(server: FakeOpenAIServer) -> None:
    """Wait until the requests of a run that ended mid-flight have all reached the server
    (its connections closed), then zero the counters: what is counted next is the next
    run's. (In a thread: the closing sockets need this event loop to finish closing.)"""
    await asyncio.to_thread(server.wait_idle)
    server.reset_stats()


async def interrupted_run(cfg: dict[str, Any], server: FakeOpenAIServer, batches: int = 3) -> int:
    """The run stopped by an exception after ``batches`` batches; returns the rows kept,
    with the server's counters zeroed once the run's last requests have landed."""
    async with genwire.boot(cfg) as container:
        with pytest.raises(StopAfter.Stop):
            await container.run(progress=StopAfter(batches))
    await settled(server)
    return kept_rows(checkpoint_dir(Path(cfg["pipeline"]["output"])))


async def test_a_changed_prompt_is_refused_naming_the_key_and_fresh(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=60)
    assert await interrupted_run(cfg, fake_openai_server) == 30
    cfg["pipeline"]["columns"][2]["params"]["prompt"] = "Another {{ uid }}"
    async with genwire.boot(cfg) as container:
        with pytest.raises(RunSetupError) as caught:
            await container.run()
    message = str(caught.value)
    assert "pipeline.columns[2] (q).params.prompt changed" in message
    assert "--fresh" in message
    assert fake_openai_server.total_requests == 0  # refused before the pre-flight
    async with genwire.boot(cfg) as container:
        result = await container.run(resume=False)
    assert result.rows_resumed == 0 and result.rows_written == 60


async def test_the_cli_refuses_a_mismatch_with_exit_2(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=60)
    await interrupted_run(cfg, fake_openai_server)
    cfg["pipeline"]["seed"] = 8
    proc = cli("run", write(cfg, tmp_path / "genwire.yaml"))
    assert proc.returncode == 2
    assert "pipeline.seed changed" in proc.stderr and "--fresh" in proc.stderr
    fresh = cli("run", tmp_path / "genwire.yaml", "--fresh")
    assert fresh.returncode == 0, fresh.stderr


async def test_provider_settings_are_not_part_of_the_fingerprint(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=60)
    kept = await interrupted_run(cfg, fake_openai_server)
    provider = cfg["providers"]["srv"]
    provider.update(max_concurrency=2, timeout_s=9, retries=5, api_key="sk-another-key-987654321")
    async with genwire.boot(cfg) as container:
        result = await container.run()
    assert result.rows_resumed == kept and result.rows_written == 60
    assert fake_openai_server.requests["writer"] == 1 + 60 - kept


async def test_a_larger_n_extends_and_a_smaller_one_is_a_mismatch(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=60)
    kept = await interrupted_run(cfg, fake_openai_server)
    async with genwire.boot(cfg) as container:
        with pytest.raises(RunSetupError, match="num_records is 40, fewer than the 60"):
            await container.run(40)
        result = await container.run(90)
    assert result.rows_resumed == kept and result.rows_written == 90
    extended = Path(cfg["pipeline"]["output"]).read_text(encoding="utf-8")
    cfg["pipeline"]["output"] = str(tmp_path / "ref.jsonl")
    async with genwire.boot(cfg) as container:
        await container.run(90)
    assert extended == (tmp_path / "ref.jsonl").read_text(encoding="utf-8")


async def test_a_failure_rate_stop_keeps_the_rows_and_resumes_once_the_fault_clears(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=100)
    fake_openai_server.fail_when("writer", "Question c", 400)  # a third of the rows
    async with genwire.boot(cfg) as container:
        with pytest.raises(RunStopped) as caught:
            await container.run()
    stopped = caught.value
    assert stopped.kept > 0 and stopped.kept == kept_rows(stopped.checkpoint)
    assert "rerun the same command to resume" in str(stopped)
    assert (tmp_path / "out.jsonl.errors.jsonl").exists()  # the evidence
    fake_openai_server.clear()
    await settled(fake_openai_server)  # the stopped run's last requests may still be on the wire
    async with genwire.boot(cfg) as container:
        result = await container.run()
    assert result.rows_resumed == stopped.kept and result.rows_failed == 0
    assert not (tmp_path / "out.jsonl.errors.jsonl").exists()
    assert fake_openai_server.requests["writer"] == 1 + 100 - stopped.kept
    resumed = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    cfg["pipeline"]["output"] = str(tmp_path / "ref.jsonl")
    async with genwire.boot(cfg) as container:
        await container.run()
    assert resumed == (tmp_path / "ref.jsonl").read_text(encoding="utf-8")


# --- failure accounting -----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 19])
def test_a_run_whose_rows_all_failed_never_exits_0(tmp_path: Path, n: int) -> None:
    with FakeOpenAIServer() as server:
        server.require_api_key("the-right-key-12345")
        config = write(pipeline(server, tmp_path, n=n), tmp_path / "genwire.yaml")
        proc = cli_here("run", config, "--skip-preflight")
    assert proc.returncode == 1, proc.stdout
    assert "dataset written" not in proc.stdout
    assert f"{n} of {n} rows failed" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


# --- --json and usage -------------------------------------------------------------------


def test_json_summary_counts_tokens_as_the_server_reported_them(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.script("writer", [503])  # one retry, counted
        proc = cli_here("run", write(pipeline(server, tmp_path, n=25), tmp_path / "genwire.yaml"), "--json")
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout)  # stdout is the summary and nothing else
        assert set(summary) == {
            "ok", "rows_written", "rows_failed", "rows_resumed", "duration_s", "output", "errors_file", "models",
            "cost",
        }  # fmt: skip
        assert summary["ok"] is True and summary["rows_written"] == 25 and summary["rows_resumed"] == 0
        writer = summary["models"]["writer"]
        assert writer["requests"] == server.requests["writer"] == 27  # probe + 25 rows + 1 retry
        assert writer["retries"] == 1 and writer["rate_limited"] == 0
        assert writer["prompt_tokens"] == server.prompt_tokens["writer"] > 25
        assert writer["completion_tokens"] == server.completion_tokens["writer"] > 25
        assert "generating" in proc.stderr  # progress went to stderr


# --- write safety -------------------------------------------------------------------------


def seeded_pipeline(root: Path, dataset: Path, **extra: Any) -> dict[str, Any]:
    return {
        "datasets": {"people": {"kind": "jsonl", "path": str(dataset)}},
        "pipeline": {
            "num_records": 4,
            "output": str(root / "out.jsonl"),
            "columns": [{"name": "person", "generator": "seed-dataset", "resources": {"dataset": "people"}}],
            **extra,
        },
    }


def test_an_output_that_is_an_input_is_refused_before_anything_runs(tmp_path: Path) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text('{"name": "Ann"}\n{"name": "Bo"}\n', encoding="utf-8")
    config = write(seeded_pipeline(tmp_path, people), tmp_path / "genwire.yaml")
    for target in ("people.jsonl", "./people.jsonl"):
        proc = cli_here("run", config, "-o", target, cwd=tmp_path)
        assert proc.returncode == 2
        assert "is a dataset file this pipeline reads" in proc.stderr
    assert people.read_text(encoding="utf-8") == '{"name": "Ann"}\n{"name": "Bo"}\n'


@pytest.mark.parametrize("kind", ["directory", "below a file"])
def test_an_output_path_that_cannot_be_a_file_fails_before_the_run(tmp_path: Path, kind: str) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text('{"name": "Ann"}\n', encoding="utf-8")
    (tmp_path / "taken.jsonl").mkdir()
    (tmp_path / "plain").write_text("x")
    target = tmp_path / ("taken.jsonl" if kind == "directory" else "plain/out.jsonl")
    proc = cli_here("run", write(seeded_pipeline(tmp_path, people), tmp_path / "genwire.yaml"), "-o", target)
    assert proc.returncode == 2, proc.stderr
    assert ("is a directory" if kind == "directory" else "is a file, not a directory") in proc.stderr
    assert "Traceback" not in proc.stderr and leftovers(tmp_path) == []


def test_cells_json_cannot_hold_fail_their_rows_and_the_output_is_strict_json(tmp_path: Path) -> None:
    people = tmp_path / "people.jsonl"
    lines = ['{"name": "Ann"}', '{"name": "\\ud83d"}', '{"name": NaN}', '{"name": Infinity}', '{"name": "Eve"}']
    people.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = seeded_pipeline(tmp_path, people, num_records=5, max_failure_rate=1.0)
    proc = cli_here("run", write(cfg, tmp_path / "genwire.yaml"))
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line, parse_constant=pytest.fail)["person"]["name"] for line in out] == ["Ann", "Eve"]
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert [(e["row"], e["error_class"]) for e in errors] == [(1, "unwritable"), (2, "unwritable"), (3, "unwritable")]
    assert "lone surrogate" in errors[0]["error"] and "NaN or Infinity" in errors[1]["error"]


def test_a_lone_surrogate_in_a_model_reply_fails_that_row_only(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from genwire.testing.fake_server import FakeResponse

    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "bad \ud83d"}}]}
    fake_openai_server.fail_when("writer", "Question b", FakeResponse(json=body))
    cfg = pipeline(fake_openai_server, tmp_path, n=30, max_failure_rate=0.9)
    proc = cli_here("run", write(cfg, tmp_path / "genwire.yaml"))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert rows and errors and all(r["flag"] != "b" for r in rows)
    assert {e["column"] for e in errors} == {"q"} and len(rows) + len(errors) == 30


def test_output_files_honour_the_umask(tmp_path: Path) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text('{"name": "Ann"}\n', encoding="utf-8")
    config = write(seeded_pipeline(tmp_path, people), tmp_path / "genwire.yaml")
    old = os.umask(0o022)
    try:
        proc = cli_here("run", config)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.jsonl").stat().st_mode & 0o777 == 0o644


def test_a_second_run_on_the_same_output_exits_2_naming_the_first(tmp_path: Path) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text('{"name": "Ann"}\n', encoding="utf-8")
    cfg = seeded_pipeline(tmp_path, people)
    first = Checkpoint.open(checkpoint_dir(tmp_path / "out.jsonl"), {}, 4, fresh=False, fresh_hint="")
    try:
        proc = cli_here("run", write(cfg, tmp_path / "genwire.yaml"))
    finally:
        first.close()
    assert proc.returncode == 2
    assert f"another genwire run (PID {os.getpid()})" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


# --- parquet: one schema for the whole run ------------------------------------------------


class Shapes(genwire.generators.Generator[Any]):
    """Values whose types change across batches, as model output does."""

    metadata = genwire.generators.GeneratorMetadata(
        name="shapes", description="shape-shifting values", required_resources={}
    )

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Any) -> list[Any]:
        return [self.value(i) for i in indices]

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        raise AssertionError("generate_batch is used")

    @staticmethod
    def value(i: int) -> Any:
        if i == 5:
            return {"meta": {"tag": "x"}, "note": "n", "mixed": [1, "two"]}  # no arrow type holds [1, "two"]
        if i == 7:
            return {"meta": {"tag": "t"}, "note": "n", "nothing": {}}  # no parquet type holds {} alone
        if i == 9:
            return {"meta": {}, "note": "n"}  # {} beside structs with keys: parquet's nulls
        return {"meta": {"tag": "t", **({"extra": i} if i >= 8 else {})}, "note": None if i < 8 else f"n{i}"}


async def test_parquet_widens_its_schema_and_fails_only_rows_it_cannot_hold(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    cfg = {
        "pipeline": {
            "num_records": 20,
            "batch_size": 4,
            "max_failure_rate": 0.2,
            "output": str(tmp_path / "out.parquet"),
            "columns": [{"name": "shape", "generator": "shapes"}],
        }
    }
    async with genwire.boot(cfg, generators=[Shapes]) as container:
        result = await container.run()
    assert result.rows_written == 18 and result.rows_failed == 2
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert rows[0]["shape"] == {"meta": {"tag": "t", "extra": None}, "note": None, "nothing": None}
    assert rows[-1]["shape"] == {"meta": {"tag": "t", "extra": 19}, "note": "n19", "nothing": None}  # widened
    assert rows[7]["shape"]["meta"] == {"tag": None, "extra": None}  # row 9 (rows 5 and 7 failed)
    errors = [json.loads(line) for line in (tmp_path / "out.parquet.errors.jsonl").read_text().splitlines()]
    assert [e["row"] for e in errors] == [5, 7]
    assert all("write .jsonl to keep it" in e["error"] for e in errors)


# --- stuck reads --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["preflight", "run"])
def test_a_fifo_dataset_cannot_hold_the_command_past_its_deadline(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "people.jsonl"
    os.mkfifo(fifo)
    cfg = seeded_pipeline(tmp_path, fifo)
    cfg["preflight"] = {"timeout_s": 1, "deadline_s": 2}
    # A read that never ends would hold the command for good: the subprocess timeout is
    # the hang guard (generous: a loaded machine takes seconds just to start Python).
    proc = cli_here(command, write(cfg, tmp_path / "genwire.yaml"))
    assert proc.returncode == 1
    assert "timeout" in proc.stdout + proc.stderr


def test_json_on_a_failed_preflight_is_still_one_json_object(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.require_api_key("another-key-123456789")
        proc = cli_here("run", write(pipeline(server, tmp_path, n=5), tmp_path / "genwire.yaml"), "--json")
    assert proc.returncode == 1
    summary = json.loads(proc.stdout)
    assert summary["ok"] is False and summary["error"].startswith("pre-flight failed")
    assert summary["preflight"]["checks"][0]["error_class"] == "auth"
    assert CANARY_KEY not in proc.stdout + proc.stderr


async def test_a_batch_saved_from_the_event_loop_is_kept_when_the_checkpoint_closes_at_once(tmp_path: Path) -> None:
    """``save`` writes the batch to the OS and syncs it in a thread, on duplicates of the
    files' descriptors: closing the checkpoint right after loses nothing, and once synced
    no descriptor is left open."""
    before = len(os.listdir("/proc/self/fd"))
    checkpoint = Checkpoint.open(tmp_path / "cp", {}, 10, fresh=False, fresh_hint="--fresh")
    await checkpoint.save([(0, b'{"i": 0, "row": {"a": 1}}\n')], [])
    await checkpoint.save([(1, b'{"i": 1, "row": {"a": 2}}\n')], [b'{"row": 2}\n'])  # after the first's fsync
    assert checkpoint.kept == 2 and checkpoint.is_done(1)
    checkpoint.close()
    await checkpoint.synced()
    assert len(os.listdir("/proc/self/fd")) == before
    resumed = Checkpoint.open(tmp_path / "cp", {}, 10, fresh=False, fresh_hint="--fresh")
    try:
        assert resumed.resumed == 2 and list(resumed.pending())[:2] == [2, 3]
        assert [row for _, row in resumed.rows()] == [{"a": 1}, {"a": 2}]
    finally:
        resumed.close()
