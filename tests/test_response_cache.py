"""The response cache (SPEC §12) over real HTTP against the fake server: a rerun pays only
for the requests that changed, through the CLI (real processes) and the API."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import StopAfter, cli, cli_here, start_cli, write

import genwire
from genwire.engine.records.checkpoint import checkpoint_dir, kept_rows
from genwire.providers import response_cache
from genwire.providers.response_cache import DB_NAME, CachedAnswer, Entry, ResponseCache, store
from genwire.testing import FakeOpenAIServer

CANARY_KEY = "sk-CANARY-cache-9b3e51d0"
N = 24


def chat_columns(second_prompt: str = "Summarise {{ first }}") -> list[dict[str, Any]]:
    """Three chat columns; the third reads the second."""
    return [
        {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["cats", "rust", "nile"]}},
        {"name": "first", "generator": "llm-text", "params": {"prompt": "Write about {{ topic }}"}},
        {"name": "second", "generator": "llm-text", "params": {"prompt": second_prompt}},
        {"name": "third", "generator": "llm-text", "params": {"prompt": "Critique {{ second }}"}},
    ]


def pipeline(server: FakeOpenAIServer, root: Path, columns: list[dict[str, Any]], n: int = N) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": server.url,
                "api_key": CANARY_KEY,
                "max_concurrency": 8,
                "backoff_s": 0.01,
                "retries": 0,
            }
        },
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat", "params": {"temperature": 0.9}},
            "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding"},
        },
        "defaults": {"chat_model": "writer", "embedding_model": "embedder"},
        "pipeline": {
            "num_records": n,
            "seed": 5,
            "batch_size": 5,
            "max_failure_rate": 1.0,
            "output": str(root / "out.jsonl"),
            "columns": columns,
        },
    }


def run_json(*args: str | Path) -> dict[str, Any]:
    proc = cli_here("run", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def probes_of(server: FakeOpenAIServer, config: Path) -> int:
    """Requests the pre-flight of ``config`` sends (no probe cache involved)."""
    server.reset_stats()
    proc = cli_here("preflight", config, "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return server.total_requests


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- Done means ----------------------------------------------------------------------------


def test_an_edited_column_pays_for_itself_and_its_readers_only_and_cached_output_is_byte_identical(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    with FakeOpenAIServer() as server:
        server.vary_answers()  # every request gets a new answer: a cached one is recognisable
        config = write(pipeline(server, tmp_path, chat_columns()), tmp_path / "genwire.yaml")
        probes = probes_of(server, config)
        assert probes >= 1

        server.reset_stats()
        paid = run_json(config)
        assert server.total_requests == probes + 3 * N
        assert paid["models"]["writer"]["cached"] == 0
        first_output = out.read_bytes()

        # Unchanged, --fresh: only the pre-flight is sent; the output is the paid run's, byte for byte.
        server.reset_stats()
        again = run_json(config, "--fresh")
        assert server.total_requests == probes
        assert again["models"]["writer"]["cached"] == 3 * N
        saved = again["models"]["writer"]["saved_tokens"]
        used = paid["models"]["writer"]
        assert saved == used["prompt_tokens"] + used["completion_tokens"] - probe_tokens(paid, again)
        assert out.read_bytes() == first_output

        # The second column's prompt edited: it and the column reading it are asked again.
        write(pipeline(server, tmp_path, chat_columns("Shorten {{ first }}")), config)
        server.reset_stats()
        edited = run_json(config, "--fresh")
        assert server.total_requests == probes + 2 * N
        assert edited["models"]["writer"]["cached"] == N
        after = rows_of(out)
        before = [json.loads(line) for line in first_output.decode().splitlines()]
        assert [r["first"] for r in after] == [r["first"] for r in before]
        assert all(a["second"] != b["second"] and a["third"] != b["third"] for a, b in zip(after, before, strict=True))
        edited_output = out.read_bytes()

        server.reset_stats()
        run_json(config, "--fresh")
        assert server.total_requests == probes
        assert out.read_bytes() == edited_output


def probe_tokens(paid: dict[str, Any], again: dict[str, Any]) -> int:
    """Tokens of the pre-flight probes of a run (the all-cached rerun paid only for those)."""
    used = again["models"]["writer"]
    assert used["requests"] == paid["models"]["writer"]["requests"] - 3 * N
    return int(used["prompt_tokens"] + used["completion_tokens"])


def test_two_rows_with_the_same_prompt_get_two_samples_and_keep_them(tmp_path: Path) -> None:
    columns = [{"name": "hello", "generator": "llm-text", "params": {"prompt": "Say hello"}}]
    with FakeOpenAIServer() as server:
        server.vary_answers()
        config = write(pipeline(server, tmp_path, columns, n=10), tmp_path / "genwire.yaml")
        run_json(config)
        first = [r["hello"] for r in rows_of(tmp_path / "out.jsonl")]
        assert len(set(first)) == 10  # the row index is in the key: no row took another's answer
        server.reset_stats()
        summary = run_json(config, "--fresh", "--skip-preflight")
        assert server.total_requests == 0
        assert summary["models"]["writer"]["cached"] == 10
        assert [r["hello"] for r in rows_of(tmp_path / "out.jsonl")] == first


# --- what is stored, and what is not --------------------------------------------------------


async def test_a_structured_reply_that_failed_its_schema_is_never_cached(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    columns = [{"name": "person", "generator": "llm-structured", "params": {"prompt": "A person", "schema": schema}}]
    cfg = pipeline(fake_openai_server, tmp_path, columns, n=1)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    fake_openai_server.script("writer", ["not_json"])  # the first reply fails its schema; the retry passes
    async with genwire.boot(cfg) as container:
        first = await container.run(skip_preflight=True)
    assert first.rows_written == 1 and first.requests["writer"] == 2
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        again = await container.run(skip_preflight=True, resume=False)
    # The first request's (rejected) answer was not kept, so it is asked again; the model
    # now answers it well, and the retry's cached answer is never needed.
    assert fake_openai_server.total_requests == 1
    assert again.usage["writer"].cached == 0
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        third = await container.run(skip_preflight=True, resume=False)
    assert fake_openai_server.total_requests == 0 and third.usage["writer"].cached == 1


async def test_failed_requests_are_never_cached_and_hits_take_no_slot(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    columns = [
        {"name": "k", "generator": "sampler", "params": {"kind": "category", "values": ["good", "bad"]}},
        {"name": "q", "generator": "llm-text", "params": {"prompt": "Question on {{ k }}"}},
        {"name": "v", "generator": "embedding", "params": {"column": "q"}},
    ]
    cfg = pipeline(fake_openai_server, tmp_path, columns)
    cfg["cache"] = {"dir": "cache"}  # relative: beside the config (the base dir)
    fake_openai_server.fail_when("writer", "bad", 500)
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        first = await container.run(skip_preflight=True)
    bad = first.rows_failed
    assert 0 < bad < N and (tmp_path / "cache" / DB_NAME).exists()
    fake_openai_server.clear()
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        again = await container.run(skip_preflight=True, resume=False)
    # Only the failed rows are asked again (their chat answer, and the embedding batches they are in).
    assert fake_openai_server.requests["writer"] == bad
    assert again.rows_failed == 0 and again.usage["writer"].cached == N - bad
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        third = await container.run(skip_preflight=True, resume=False)
    assert fake_openai_server.total_requests == 0
    assert third.usage["writer"].requests == 0 and third.usage["embedder"].cached > 0
    # Nothing was sent, so no request ever held a slot of the provider's gate.
    assert third.concurrency == {} or third.concurrency["srv"].peak_in_flight == 0


async def test_a_cached_structured_reply_that_fails_its_schema_was_the_first_attempt(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    columns = [
        {"name": "person", "generator": "llm-structured", "params": {"prompt": "A person", "schema": schema}},
        {"name": "again", "generator": "llm-structured", "params": {"prompt": "Another", "schema": schema}},
    ]
    cfg = pipeline(fake_openai_server, tmp_path, columns, n=3)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    cfg["pipeline"]["columns"][1]["params"]["max_attempts"] = 1
    async with genwire.boot(cfg) as container:
        await container.run(skip_preflight=True)
    with sqlite3.connect(tmp_path / "cache" / DB_NAME) as conn:  # row 1's replies: text, not an object
        conn.execute("""UPDATE answers SET answer = '"no json here"' WHERE row = 1""")
    conn.close()
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True, resume=False)
    # Row 1's cached replies were served and rejected: "person" asks once more and is told
    # why; "again" (max_attempts 1) has no attempt left, so its row fails without a request.
    assert fake_openai_server.total_requests == 1
    ((model, body),) = fake_openai_server.bodies
    assert model == "writer"
    assert "Your previous reply was rejected" in body["messages"][-1]["content"]
    assert result.rows_written == 2 and result.rows_failed == 1
    assert result.usage["writer"].cached == 6


async def test_a_cache_of_the_layout_before_is_moved_and_its_answers_still_hit(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, chat_columns()[:2], n=6)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    async with genwire.boot(cfg) as container:
        await container.run(skip_preflight=True)
    db = tmp_path / "cache" / DB_NAME
    with sqlite3.connect(db) as conn:  # back to the layout keyed by the sha256 alone (user_version 0)
        conn.execute("ALTER TABLE answers RENAME TO newer")
        conn.execute(
            "CREATE TABLE answers (key TEXT PRIMARY KEY, col TEXT NOT NULL, row INTEGER NOT NULL, "
            "answer TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, "
            "stored_at REAL NOT NULL)"
        )
        conn.execute("CREATE INDEX answers_col_row ON answers(col, row)")
        conn.execute("INSERT INTO answers SELECT * FROM newer")
        conn.execute("DROP TABLE newer")
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True, resume=False)
    assert fake_openai_server.total_requests == 0 and result.usage["writer"].cached == 6
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert tables == {"answers", "meta"}


# --- composition with the checkpoint ----------------------------------------------------------


async def test_a_resumed_run_takes_the_checkpoint_first_then_the_cache_then_the_model(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.vary_answers()
    cfg = pipeline(fake_openai_server, tmp_path, chat_columns())
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    async with genwire.boot(cfg) as container:  # pays for rows [0, N), into another file
        await container.run(skip_preflight=True, output=tmp_path / "paid.jsonl")
    async with genwire.boot(cfg) as container:  # stopped after two batches (10 rows), all cached
        with pytest.raises(StopAfter.Stop):
            await container.run(skip_preflight=True, progress=StopAfter(2))
    kept = kept_rows(checkpoint_dir(tmp_path / "out.jsonl"))
    assert kept == 10
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:  # resumed, and 6 rows more than were paid for
        resumed = await container.run(N + 6, skip_preflight=True)
    assert resumed.rows_resumed == kept  # from the checkpoint: neither asked nor looked up
    assert resumed.usage["writer"].cached == 3 * (N - kept)  # from the cache
    assert fake_openai_server.total_requests == 3 * 6  # from the model: only the new rows
    paid = (tmp_path / "paid.jsonl").read_bytes().splitlines()
    assert (tmp_path / "out.jsonl").read_bytes().splitlines()[:N] == paid


# --- switches, location, hygiene -----------------------------------------------------------


def test_no_response_cache_and_enabled_false_bypass_it_and_cache_info_clear(tmp_path: Path) -> None:
    columns = chat_columns()[:2]
    with FakeOpenAIServer() as server:
        config = write(pipeline(server, tmp_path, columns), tmp_path / "genwire.yaml")
        run_json(config, "--skip-preflight")
        directory = tmp_path / ".genwire" / "cache"
        assert (directory / DB_NAME).exists()  # default: beside the config file

        server.reset_stats()
        bypassed = run_json(config, "--fresh", "--skip-preflight", "--no-response-cache")
        assert server.total_requests == N and bypassed["models"]["writer"]["cached"] == 0

        info = json.loads(cli_here("cache", "info", config, "--json").stdout)
        assert info["entries"] == N and info["columns"] == {"first": N} and info["hits"] == 0
        assert info["directory"] == str(directory) and info["bytes"] > 0
        assert info["oldest"] <= info["newest"]
        run_json(config, "--fresh", "--skip-preflight")
        assert json.loads(cli_here("cache", "info", config, "--json").stdout)["hits"] == N
        summary = cli_here("run", config, "--fresh", "--skip-preflight")
        assert f"{N} answers from the cache" in summary.stdout, summary.stdout
        table = cli_here("cache", "info", config)
        assert table.returncode == 0 and f"{N:,}" in table.stdout and "entries" in table.stdout

        assert json.loads(cli_here("cache", "info", config, "--json").stdout)["hits"] == 2 * N
        cleared = cli_here("cache", "clear", config)
        assert cleared.returncode == 0 and f"removed {N} cached answers" in cleared.stdout
        assert json.loads(cli_here("cache", "info", config, "--json").stdout)["entries"] == 0
        server.reset_stats()
        run_json(config, "--fresh", "--skip-preflight")
        assert server.total_requests == N

        off = pipeline(server, tmp_path / "off", columns)
        (tmp_path / "off").mkdir()
        off["cache"] = {"enabled": False}
        off_config = write(off, tmp_path / "off" / "genwire.yaml")
        run_json(off_config, "--skip-preflight")
        run_json(off_config, "--skip-preflight", "--fresh")
        assert not (tmp_path / "off" / ".genwire").exists()


def test_cache_info_of_a_config_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    proc = cli("cache", "info", tmp_path / "missing.yaml")
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr


async def test_a_dict_config_has_no_cache_unless_dir_is_given(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = pipeline(fake_openai_server, tmp_path, chat_columns()[:2], n=4)
    for _ in range(2):
        async with genwire.boot(cfg) as container:
            result = await container.run(skip_preflight=True, resume=False)
        assert result.usage["writer"].cached == 0
    assert not (tmp_path / ".genwire").exists()


def test_the_cache_holds_no_secret_and_its_files_follow_the_umask(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        config = write(pipeline(server, tmp_path, chat_columns()), tmp_path / "genwire.yaml")
        previous = os.umask(0o077)
        try:
            run_json(config)
        finally:
            os.umask(previous)
    files = [p for p in (tmp_path / ".genwire" / "cache").iterdir()]
    assert files
    for path in files:
        assert CANARY_KEY.encode() not in path.read_bytes()
        assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
    assert (tmp_path / ".genwire" / "cache").stat().st_mode & 0o077 == 0


async def test_a_corrupt_entry_or_database_is_a_warning_and_a_miss(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, chat_columns()[:2], n=6)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    db = tmp_path / "cache" / DB_NAME
    async with genwire.boot(cfg) as container:
        await container.run(skip_preflight=True)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE answers SET answer = '{not json' WHERE row = 2")
        conn.execute("UPDATE answers SET answer = '[1, 2]' WHERE row = 3")  # JSON, but not a text answer
    conn.close()
    fake_openai_server.reset_stats()
    with caplog.at_level(logging.WARNING, logger="genwire.cache"):
        async with genwire.boot(cfg) as container:
            result = await container.run(skip_preflight=True, resume=False)
    assert result.rows_written == 6 and fake_openai_server.total_requests == 2
    assert "unreadable response cache entry" in caplog.text and "wrong shape" in caplog.text

    for path in db.parent.iterdir():
        path.write_bytes(b"this is not a database" * 100)
    caplog.clear()
    fake_openai_server.reset_stats()
    with caplog.at_level(logging.WARNING, logger="genwire.cache"):
        async with genwire.boot(cfg) as container:
            result = await container.run(skip_preflight=True, resume=False)
    assert result.rows_written == 6 and fake_openai_server.total_requests == 6
    assert "running without it" in caplog.text


async def test_local_models_answers_are_cached_too(tmp_path: Path) -> None:
    cfg: dict[str, Any] = {
        "providers": {"local": {"kind": "local"}},
        "models": {
            "writer": {
                "provider": "local",
                "model": "SmolLM2-135M-Instruct",
                "kind": "chat",
                "params": {"max_tokens": 8},
            },
            "embedder": {"provider": "local", "model": "all-MiniLM-L6-v2", "kind": "embedding"},
        },
        "cache": {"dir": str(tmp_path / "cache")},
        "pipeline": {
            "num_records": 3,
            "output": str(tmp_path / "out.jsonl"),
            "columns": [
                {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["cats", "rivers"]}},
                {
                    "name": "q",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "{{ t }}"},
                },
                {"name": "v", "generator": "embedding", "resources": {"model": "embedder"}, "params": {"column": "q"}},
            ],
        },
    }
    async with genwire.boot(cfg) as container:
        first = await container.run(skip_preflight=True)
    assert first.requests == {"writer": 3, "embedder": 1} and first.usage["writer"].prompt_tokens > 0
    paid = (tmp_path / "out.jsonl").read_bytes()
    async with genwire.boot(cfg) as container:
        again = await container.run(skip_preflight=True, resume=False)
    assert again.requests == {"writer": 0, "embedder": 0}
    assert (again.usage["writer"].cached, again.usage["embedder"].cached) == (3, 1)
    assert (
        again.usage["writer"].saved_tokens
        == first.usage["writer"].prompt_tokens + first.usage["writer"].completion_tokens
    )
    assert (tmp_path / "out.jsonl").read_bytes() == paid


class Recording:
    """A progress hook that keeps the status lines it was given."""

    def __init__(self) -> None:
        self.statuses: list[str] = []

    def start(self, total: int, done: int = 0) -> None:
        pass

    def advance(self, done: int, failed: int, status: str = "") -> None:
        self.statuses.append(status)

    def stop(self) -> None:
        pass


async def test_the_progress_line_shows_the_hits(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, chat_columns()[:2], n=10)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    async with genwire.boot(cfg) as container:
        await container.run(skip_preflight=True)
    progress = Recording()
    async with genwire.boot(cfg) as container:
        await container.run(skip_preflight=True, resume=False, progress=progress)
    assert progress.statuses[-1].endswith("10 cached"), progress.statuses


async def test_an_answer_the_output_cannot_hold_is_not_cached(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from genwire.testing.fake_server import FakeResponse

    columns = [
        {"name": "k", "generator": "sampler", "params": {"kind": "category", "values": ["good", "bad"]}},
        {"name": "q", "generator": "llm-text", "params": {"prompt": "Question on {{ k }}"}},
    ]
    cfg = pipeline(fake_openai_server, tmp_path, columns)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "bad \ud83d"}}]}
    fake_openai_server.fail_when("writer", "bad", FakeResponse(json=body))  # a lone surrogate: unwritable
    async with genwire.boot(cfg) as container:
        first = await container.run(skip_preflight=True)
    assert 0 < first.rows_failed < N
    fake_openai_server.clear()
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        again = await container.run(skip_preflight=True, resume=False)
    assert again.rows_failed == 0 and fake_openai_server.total_requests == first.rows_failed


def test_two_runs_at_once_share_one_cache_safely(tmp_path: Path) -> None:
    shared = tmp_path / "shared-cache"
    with FakeOpenAIServer(latency=0.005) as server:
        configs = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            cfg = pipeline(server, tmp_path / name, chat_columns(f"Summarise for {name}: {{{{ first }}}}"), n=60)
            cfg["cache"] = {"dir": str(shared)}
            configs.append(write(cfg, tmp_path / name / "genwire.yaml"))
        procs = [start_cli("run", c, "--skip-preflight") for c in configs]
        for proc in procs:
            _, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0, stderr
            assert "response cache" not in stderr, stderr  # no lock or write failure was warned
        info = json.loads(cli("cache", "info", configs[0], "--json").stdout)
        # Same first column in both (one entry per row), their own second and third columns.
        assert info["columns"] == {"first": 60, "second": 120, "third": 120}
        server.reset_stats()
        for config in configs:
            run_json(config, "--fresh", "--skip-preflight")
        assert server.total_requests == 0


@pytest.mark.parametrize("rows_a_statement", [128, 3])
def test_stored_answers_come_back_exactly_whatever_they_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows_a_statement: int
) -> None:
    """Plain texts are read without the JSON decoder; anything with an escape goes through
    it. Written in one statement, or in several (of ``INSERT_ROWS`` rows) in one transaction."""
    monkeypatch.setattr(store, "INSERT_ROWS", rows_a_statement)
    answers: list[Any] = [
        "plain",
        "",
        'a "quoted" word',
        "back\\slash",
        "two\nlines\tand a tab",
        "ünïcödé and \u2028 and 😀",
        '"',
        "\\",
        ["a", "list"],
        {"an": "object"},
        [[0.5, -1.0]],
    ]
    cache = ResponseCache(tmp_path)
    cache.put_many(Entry(f"k{i}", "c", i, answer, 1, 2) for i, answer in enumerate(answers))
    found = cache.get_many("c", range(len(answers)))
    decoded = [cache.decode(found[f"k{i}"]) for i in range(len(answers))]
    back = [d.answer if d is not None else None for d in decoded]
    vectors = back.pop()  # an embedding answer comes back as its float64 matrix (providers.vectors)
    assert vectors.dtype == "float64" and vectors.tolist() == answers.pop()
    assert back == answers
    assert cache.get("c", 4, "k4") == CachedAnswer("two\nlines\tand a tab", 1, 2)
    cache.close()


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('"two\\nlines"', "two\nlines"),  # escaped: the string scanner alone
        (' "spaced" ', "spaced"),  # whitespace around it (written by hand): json.loads
        ('"a"  ', "a"),
        ('"cut', None),  # unreadable: ignored with a warning, as json.loads would have it
        ('"a"b', None),
        ('"a"\n"b"', None),
    ],
)
def test_a_stored_text_reads_as_json_loads_reads_it(tmp_path: Path, text: str, answer: str | None) -> None:
    cache = ResponseCache(tmp_path)
    decoded = cache.decode(("k", text, 1, 2))
    assert (decoded.answer if decoded is not None else None) == answer
    cache.close()


async def test_a_first_run_makes_one_key_per_request_and_a_rerun_hits_them_all(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is stored for a first run's rows: the built-ins' synchronous peek builds no
    request and makes no key (it made one per request before, thrown away); the request
    makes its key once. The rerun's peeks key the requests exactly as they were sent."""
    keys = 0
    make_key, make_chat_keys = response_cache.KeyTemplate.key, response_cache.KeyTemplate.chat_keys

    def counted(self: response_cache.KeyTemplate, part: Any, rows: tuple[int, ...]) -> str:
        nonlocal keys
        keys += 1
        return make_key(self, part, rows)

    def counted_chat(self: response_cache.KeyTemplate, prompts: Any, rows: Any) -> list[str | None]:
        nonlocal keys
        keys += sum(prompt is not None for prompt in prompts)  # a batch's peeks: one key each
        return make_chat_keys(self, prompts, rows)

    monkeypatch.setattr(response_cache.KeyTemplate, "key", counted)
    monkeypatch.setattr(response_cache.KeyTemplate, "chat_keys", counted_chat)
    cfg = pipeline(fake_openai_server, tmp_path, chat_columns())
    cfg["cache"] = {"dir": "cache"}
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        first = await container.run(skip_preflight=True)
    assert first.rows_written == N and fake_openai_server.total_requests == 3 * N
    assert keys == 3 * N
    fake_openai_server.reset_stats()
    keys = 0
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        again = await container.run(skip_preflight=True, resume=False)
    assert fake_openai_server.total_requests == 0 and again.usage["writer"].cached == 3 * N
    assert keys == 3 * N  # one peek each, all hits


async def test_a_row_whose_prompt_cannot_render_fails_alone_on_a_cached_rerun_too(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The batch's prompts are rendered before its one bulk peek: a row whose template
    fails fails alone, with the same error as on the first run, and the rows around it
    in the same batch are served from the cache."""
    columns = [
        {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["cats", "rust", "nile"]}},
        {
            "name": "first",
            "generator": "llm-text",
            "params": {"prompt": "{{ 1 // (0 if topic == 'rust' else 1) }} about {{ topic }}", "system": "Be brief"},
        },
        {
            "name": "second",
            "generator": "llm-structured",
            "params": {"prompt": "Facts on {{ first }}", "schema": {"type": "object"}},
        },
    ]
    cfg = pipeline(fake_openai_server, tmp_path, columns)
    cfg["cache"] = {"dir": "cache"}
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        first = await container.run(skip_preflight=True)
    assert 0 < first.rows_failed < N and first.rows_written == N - first.rows_failed
    assert first.errors_file is not None
    errors, out = first.errors_file.read_bytes(), (tmp_path / "out.jsonl").read_bytes()
    assert b"ZeroDivisionError" in errors or b"division" in errors
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg, base_dir=tmp_path) as container:
        again = await container.run(skip_preflight=True, resume=False)
    assert fake_openai_server.total_requests == 0
    assert again.usage["writer"].cached == 2 * first.rows_written
    assert again.rows_failed == first.rows_failed and again.errors_file is not None
    assert again.errors_file.read_bytes() == errors and (tmp_path / "out.jsonl").read_bytes() == out
