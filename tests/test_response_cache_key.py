"""The response cache's key and checks (SPEC §12 amended, issue 24): what decides an answer
is in the key (non-credential headers, the pipeline seed), what does not decide it stays
out (the API key, credential headers), a cached answer is checked like a fresh one, and a
cache that cannot be written costs one warning. Real runs against the fake server."""

from __future__ import annotations

import json
import logging
import math
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genwire
from genwire.providers.request_context import endpoint_id
from genwire.providers.response_cache import DB_NAME, HOLE, KeyTemplate, entry_key
from genwire.providers.response_cache.layout import VECTORS, stored_answer, stored_text
from genwire.testing import FakeOpenAIServer

N = 12


def config(
    server: FakeOpenAIServer,
    root: Path,
    columns: list[dict[str, Any]],
    *,
    n: int = N,
    api_key: str = "sk-first-key-0000001",
    headers: dict[str, str] | None = None,
    seed: int = 5,
    batch_size: int = 4,
    dimensions: int | None = None,
) -> dict[str, Any]:
    provider: dict[str, Any] = {"kind": "openai", "base_url": server.url, "api_key": api_key, "retries": 0}
    if headers is not None:
        provider["headers"] = headers
    embedder: dict[str, Any] = {"provider": "srv", "model": "embedder", "kind": "embedding"}
    if dimensions is not None:
        embedder["dimensions"] = dimensions
    return {
        "providers": {"srv": provider},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}, "embedder": embedder},
        "defaults": {"chat_model": "writer", "embedding_model": "embedder"},
        "cache": {"dir": str(root / "cache")},
        "pipeline": {
            "num_records": n,
            "seed": seed,
            "batch_size": batch_size,
            "max_failure_rate": 1.0,
            "output": str(root / "out.jsonl"),
            "columns": columns,
        },
    }


HELLO = [{"name": "hello", "generator": "llm-text", "params": {"prompt": "Say hello"}}]  # no sampler: seed-free


async def requests_of_run(server: FakeOpenAIServer, cfg: dict[str, Any]) -> int:
    server.reset_stats()
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True, resume=False)
    assert result.rows_written == cfg["pipeline"]["num_records"]
    return server.total_requests


def cache_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (root / "cache").iterdir() if p.is_file())


# --- 1. the key: not the API key, not credential headers; no header value in clear -----------


async def test_a_rotated_api_key_or_credential_header_keeps_the_cache_and_no_header_is_stored_in_clear(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    headers = {
        "X-Deployment": "deployment-alpha-7731",
        "x-api-key": "gateway-secret-one-1111",
        "OpenAI-Organization": "org-visible-but-hashed-42",
    }
    first = config(fake_openai_server, tmp_path, HELLO, headers=headers)
    assert await requests_of_run(fake_openai_server, first) == N
    stored = cache_bytes(tmp_path)
    for value in [*headers.values(), "sk-first-key-0000001"]:
        assert value.encode() not in stored, value

    rotated = config(
        fake_openai_server,
        tmp_path,
        HELLO,
        api_key="sk-second-key-0000002",
        headers={**headers, "x-api-key": "gateway-secret-two-2222", "Cookie": "session=abc"},
    )
    fake_openai_server.require_api_key("sk-second-key-0000002")
    assert await requests_of_run(fake_openai_server, rotated) == 0  # a new key is not a new answer


def test_the_credential_rule_and_the_endpoint_identity() -> None:
    from genwire.providers.request_context import endpoint_id, is_credential_header

    for name in ("Authorization", "api-key", "X-Api-Key", "Proxy-Authorization", "X-Auth-Token", "Cookie"):
        assert is_credential_header(name), name
    for name in ("X-Deployment", "OpenAI-Organization", "OpenAI-Project", "X-Route"):
        assert not is_credential_header(name), name
    base = endpoint_id("openai", "http://h/v1", {"X-Deployment": "a", "Authorization": "Bearer 1"})
    assert base == endpoint_id("openai", "http://h/v1", {"x-deployment": "a", "Authorization": "Bearer 2"})
    assert base != endpoint_id("openai", "http://h/v1", {"X-Deployment": "b"})
    assert "Bearer" not in base and '"a"' not in base


# --- 2. a non-credential header decides the answer -----------------------------------------


async def test_a_changed_deployment_header_asks_again(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    a = config(fake_openai_server, tmp_path, HELLO, headers={"X-Deployment": "a"})
    b = config(fake_openai_server, tmp_path, HELLO, headers={"X-Deployment": "b"})
    assert await requests_of_run(fake_openai_server, a) == N
    assert await requests_of_run(fake_openai_server, b) == N  # deployment b's own answers
    assert await requests_of_run(fake_openai_server, a) == 0  # a's are still there
    assert await requests_of_run(fake_openai_server, b) == 0


# --- 3. the pipeline seed is in the key --------------------------------------------------------


async def test_a_new_seed_asks_again_even_for_prompts_no_sampler_feeds(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, seed=5)) == N
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, seed=6)) == N
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, seed=5)) == 0


# --- 4. a cached answer is checked like a fresh one ----------------------------------------------

EMBED = [
    {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["cats", "rust", "nile"]}},
    {"name": "v", "generator": "embedding", "params": {"column": "t"}},
]


async def test_cached_vectors_of_the_old_dimensions_are_misses_not_output(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai_server.set_dimensions("embedder", 8)
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, EMBED, dimensions=8)) == 3
    # The model now makes 16-long vectors; config and server agree.
    fake_openai_server.set_dimensions("embedder", 16)
    cfg = config(fake_openai_server, tmp_path, EMBED, dimensions=16)
    with caplog.at_level(logging.WARNING, logger="genwire.cache"):
        assert await requests_of_run(fake_openai_server, cfg) == 3  # one request per batch of 4
    assert {len(row["v"]) for row in read_rows(tmp_path / "out.jsonl")} == {16}
    assert len([r for r in caplog.records if "wrong shape" in r.getMessage()]) == 1
    assert await requests_of_run(fake_openai_server, cfg) == 0  # the fresh answers replaced them


async def test_an_embedding_is_found_per_row_when_the_rerun_batches_the_rows_otherwise(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # A gated run's batches depend on timing: each row's vector is kept under its own row
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, EMBED, batch_size=4)) == 3
    first = read_rows(tmp_path / "out.jsonl")
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, EMBED, batch_size=5)) == 0
    assert read_rows(tmp_path / "out.jsonl") == first
    # A row the first run never had: only its text is sent, the batch's others are found
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, EMBED, n=N + 1)) == 1
    (body,) = [b for model, b in fake_openai_server.bodies if model == "embedder"]
    assert len(body["input"]) == 1 and read_rows(tmp_path / "out.jsonl")[:N] == first


async def test_a_batch_whose_stored_vectors_have_another_length_than_a_fresh_one_is_asked_whole(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.set_dimensions("embedder", 8)  # the config says no `dimensions`
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, EMBED)) == 3
    fake_openai_server.set_dimensions("embedder", 16)  # the model changed
    # Batches of 5 over 13 rows: the last holds rows 10 and 11 (stored, 8 long) and 12 (new)
    cfg = config(fake_openai_server, tmp_path, EMBED, n=N + 1, batch_size=5)
    assert await requests_of_run(fake_openai_server, cfg) == 2  # row 12 alone, then the batch whole
    assert [len(row["v"]) for row in read_rows(tmp_path / "out.jsonl")] == [8] * 10 + [16] * 3


async def test_cached_non_finite_vectors_wrong_counts_and_empty_texts_are_misses(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    columns = [*EMBED, {"name": "q", "generator": "llm-text", "params": {"prompt": "About {{ t }}"}}]
    cfg = config(fake_openai_server, tmp_path, columns)
    assert await requests_of_run(fake_openai_server, cfg) == 3 + N
    with sqlite3.connect(tmp_path / "cache" / DB_NAME) as conn:
        vectors = conn.execute("SELECT key, answer FROM answers WHERE col = 'v' ORDER BY row").fetchall()
        answer = stored_answer(vectors[0][1]).tolist()  # stored vectors come back as a matrix
        answer[0][0] = float("nan")
        nan = json.dumps(answer)  # json.loads reads NaN; a fresh answer never has one
        conn.execute("UPDATE answers SET answer = ? WHERE key = ?", (nan, vectors[0][0]))
        # Each row's vector is its own entry: row 4's (the second batch) holds 2 vectors for 1
        conn.execute("UPDATE answers SET answer = '[[0.5], [0.5]]' WHERE key = ?", (vectors[4][0],))
        conn.execute("UPDATE answers SET answer = '\"  \"' WHERE col = 'q' AND row IN (0, 5)")  # blank text
    conn.close()
    with caplog.at_level(logging.WARNING, logger="genwire.cache"):
        async with genwire.boot(cfg) as container:
            fake_openai_server.reset_stats()
            result = await container.run(skip_preflight=True, resume=False)
    assert result.rows_failed == 0 and result.rows_written == N
    assert fake_openai_server.requests == {"embedder": 2, "writer": 2}
    rows = read_rows(tmp_path / "out.jsonl")
    assert all(row["q"].strip() and all(math.isfinite(x) for x in row["v"]) for row in rows)
    assert len([r for r in caplog.records if "wrong shape" in r.getMessage()]) == 1  # once, not per entry


def read_rows(path: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- 5. a cache that cannot be written: one warning, the run goes on ---------------------------

LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2:] == ["rollback"]:  # an old-style journal: an exclusive lock blocks readers too
    conn.execute("PRAGMA journal_mode = DELETE")
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "genwire.cache" and r.levelno >= logging.WARNING]


async def test_a_cache_locked_by_another_process_is_one_warning_and_still_read(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, n=20)) == 20
    db = tmp_path / "cache" / DB_NAME
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        cfg = config(fake_openai_server, tmp_path, HELLO, n=40)
        with caplog.at_level(logging.WARNING, logger="genwire.cache"):
            # 20 rows from the cache (reads still work), 20 paid in 5 batches of 4: today
            # each batch waited 10 s for the lock and warned again.
            assert await requests_of_run(fake_openai_server, cfg) == 20
        warnings = cache_warnings(caplog)
        assert len(warnings) == 1, warnings
        assert "cannot write to the response cache" in warnings[0] and "locked" in warnings[0]
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
    with sqlite3.connect(db) as conn:  # nothing was written while it was locked
        assert conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 20
    conn.close()


async def test_a_cache_locked_against_readers_too_is_one_warning_and_one_wait(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, n=8)) == 8
    db = tmp_path / "cache" / DB_NAME
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db), "rollback"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with caplog.at_level(logging.WARNING, logger="genwire.cache"):
            assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, n=24)) == 24
        warnings = cache_warnings(caplog)
        assert len(warnings) == 1 and "locked" in warnings[0], warnings
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


async def test_a_cache_whose_writes_fail_is_one_warning(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Running as root ignores file modes, so a trigger makes every insert fail the way a
    # full disk or a read-only file does: the statement errors, the database stays readable.
    assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, n=4)) == 4
    with sqlite3.connect(tmp_path / "cache" / DB_NAME) as conn:
        conn.execute(
            "CREATE TRIGGER full BEFORE INSERT ON answers BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END"
        )
    conn.close()
    with caplog.at_level(logging.WARNING, logger="genwire.cache"):
        assert await requests_of_run(fake_openai_server, config(fake_openai_server, tmp_path, HELLO, n=24)) == 20
    warnings = cache_warnings(caplog)
    assert len(warnings) == 1 and "disk is full" in warnings[0], warnings


# --- 6. hits are looked up in bulk ---------------------------------------------------------------


async def test_hits_are_looked_up_once_per_batch_and_column(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from genwire.engine.rows.runner import BatchRunner
    from genwire.providers.response_cache import ResponseCache

    columns = [
        {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["cats", "rust"]}},
        {"name": "a", "generator": "llm-text", "params": {"prompt": "About {{ t }}"}},
        {"name": "b", "generator": "llm-text", "params": {"prompt": "Shorten {{ a }}"}},
    ]
    cfg = config(fake_openai_server, tmp_path, columns, n=16)
    assert await requests_of_run(fake_openai_server, cfg) == 32
    cache = ResponseCache(tmp_path / "cache")
    try:
        async with genwire.boot(cfg) as container:
            runner = BatchRunner(container, cache)
            fake_openai_server.reset_stats()
            results = [await runner.run(list(range(start, start + 4))) for start in range(0, 16, 4)]
    finally:
        cache.close()
    assert fake_openai_server.total_requests == 0 and sum(r.cached for r in results) == 32
    assert cache.lookups == 4 * 2  # one query per batch and model column, not one per row


# --- the key is the request as sent ------------------------------------------------------------


async def test_every_stored_key_is_the_sha256_of_the_request_as_the_server_received_it(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Keys are built from a template per column (the varying messages or inputs spliced
    in): each must equal ``entry_key`` of the body the server received, so caches written
    before templates still hit and no two requests can share a key."""
    columns = [
        {"name": "k", "generator": "sampler", "params": {"kind": "category", "values": ['qu"ote', "ünï\n", "plain"]}},
        {
            "name": "q",
            "generator": "llm-text",
            "params": {"prompt": "Ask about {{ k }}", "system": "Be \\ brief", "temperature": 0.5},
        },
        {"name": "v", "generator": "embedding", "params": {"column": "q"}},
    ]
    cfg = config(fake_openai_server, tmp_path, columns, headers={"X-Deployment": "east"})
    async with genwire.boot(cfg) as container:
        await container.run(skip_preflight=True)
    endpoint = endpoint_id("openai", fake_openai_server.url, {"X-Deployment": "east"})
    paths = {"writer": "/chat/completions", "embedder": "/embeddings"}
    with sqlite3.connect(tmp_path / "cache" / DB_NAME) as conn:
        stored = {(col, row): key for key, col, row in conn.execute("SELECT key, col, row FROM answers")}
    conn.close()
    assert len(stored) == 2 * N  # a chat answer per row, and an embedding per row
    # The server does not know the rows: every stored key must be one of the bodies it
    # received, keyed for one of the rows the run has; an embedding request of a batch's
    # texts is kept per row, each keyed as the request of its text alone would be.
    alone = [
        {**body, "input": [text]}
        for model, body in fake_openai_server.bodies
        if model == "embedder"
        for text in body["input"]
    ]
    candidates = {
        entry_key(endpoint, {"path": paths[model], "body": body}, col, [r], 5)
        for model, body in [*fake_openai_server.bodies, *(("embedder", b) for b in alone)]
        for col, r in [("q" if model == "writer" else "v", r) for r in range(N)]
        if model == "writer" or len(body["input"]) == 1
    }
    assert {place for place, key in stored.items() if key in candidates} == set(stored)


def test_a_key_template_gives_entry_key_byte_for_byte_whatever_the_texts_hold() -> None:
    rng = random.Random(3)
    # HOLE inside a text, and a text it ends: neither is HOLE's JSON.
    alphabet = ["a", '"', "\\", "\n", "\x1f", "é", " ", "\u2028", "😀", "\x00", "\ud800", f"x{HOLE}", f"{HOLE}\\"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))

    parts: list[Any] = [[1, 2.5, None], {"a": [text()]}, "a string", [{"x": 1}], [True], []]
    for i in range(2000):
        part: Any = rng.choice(
            [
                [{"role": rng.choice(["user", "system"]), "content": text()} for _ in range(rng.randint(1, 3))],
                [text() for _ in range(rng.randint(0, 4))],
                rng.choice(parts),
            ]
        )
        params = {text(): rng.choice([0.9, 1, text(), [1, "b"], None, True]) for _ in range(rng.randint(0, 3))}
        body: dict[str, Any] = {**params, "model": text()}
        template = KeyTemplate("endpoint" + text(), {"path": "/x", "body": {**body, "messages": HOLE}}, "c", i - 1000)
        rows = tuple(rng.randint(0, 10**6) for _ in range(rng.randint(1, 3)))
        request = {"path": "/x", "body": {**body, "messages": part}}
        assert template.key(part, rows) == entry_key(template._endpoint, request, "c", rows, i - 1000)
    # A body holding HOLE twice (only code that reads HOLE could build one) is encoded whole.
    twice = KeyTemplate("e", {"a": HOLE, "b": HOLE}, "c", 0)
    assert twice.key(["x"], (1,)) == entry_key("e", {"a": ["x"], "b": ["x"]}, "c", (1,), 0)


def test_chat_keys_are_the_keys_of_the_chat_messages_byte_for_byte() -> None:
    """The bulk peek writes a chat request's messages straight from its texts: each key
    must be ``key`` of ``chat_messages(prompt, system)`` (the request as sent), whatever
    the texts hold, with a system prompt or without, and None where there is no prompt."""
    from genwire.providers.base import chat_messages

    rng = random.Random(11)
    alphabet = ["a", '"', "\\", "\n", "\x1f", "é", " ", "\u2028", "😀", "\x00", "\ud800", f"x{HOLE}", "}", "]"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))

    for i in range(300):
        body = {"path": "/chat/completions", "body": {text(): text(), "model": text(), "messages": HOLE}}
        template = KeyTemplate("endpoint" + text(), body, "c", i)
        prompts = [rng.choice([None, (text(), None), (text(), text())]) for _ in range(rng.randint(1, 6))]
        rows = [rng.randint(0, 10**6) for _ in prompts]
        expected = [
            None if p is None else template.key(chat_messages(*p), (row,)) for p, row in zip(prompts, rows, strict=True)
        ]
        assert template.chat_keys(prompts, rows) == expected
    twice = KeyTemplate("e", {"a": HOLE, "b": HOLE}, "c", 0)  # encoded whole: the same keys still
    assert twice.chat_keys([("x", "s")], [3]) == [twice.key(chat_messages("x", "s"), (3,))]


def test_keys_are_those_the_version_before_wrote() -> None:
    """A cache written by the version before hits: its keys, computed by that version
    (genwire at 0454870) for two chat requests, are the keys this one looks up, whichever
    way it makes them (``entry_key``, the key template, the bulk peek's chat keys)."""
    from genwire.providers.base import chat_messages

    endpoint = endpoint_id("openai", "http://127.0.0.1:8000/v1", {"X-Org": "acme", "Authorization": "Bearer sk-x"})
    before = {
        ('Write about "ünï"\n', None, 7): "39d907b914dab31e36694aa52af7aeda4cc0975c564d84257071418b8d7c540e",
        ("Summarise it", "Be brief\t😀", 123456): "e4c676ca86fa679e367ef02ff5d2a6acfada7fbe587b8000e5a8a8d3a0c5068d",
    }
    request = {"path": "/chat/completions", "body": {"temperature": 0.7, "model": "writer", "messages": HOLE}}
    template = KeyTemplate(endpoint, request, "first", 42)
    for (prompt, system, row), key in before.items():
        messages = chat_messages(prompt, system)
        sent = {"path": "/chat/completions", "body": {**request["body"], "messages": messages}}
        assert entry_key(endpoint, sent, "first", [row], 42) == key
        assert template.key(messages, (row,)) == key
        assert template.chat_keys([(prompt, system)], [row]) == [key]


async def test_a_batch_partly_in_the_cache_is_served_and_accounted_exactly(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """One batch's bulk peek: the rows whose entries are there are hits (counted, their
    tokens saved as they were paid), the others are asked and stored, and the output is
    the first run's, row for row."""
    columns = [
        {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["cats", "rust", "tea"]}},
        {"name": "q", "generator": "llm-text", "params": {"prompt": "About {{ t }}", "system": "Be brief"}},
    ]
    cfg = config(fake_openai_server, tmp_path, columns, batch_size=N)
    assert await requests_of_run(fake_openai_server, cfg) == N
    first = (tmp_path / "out.jsonl").read_bytes()
    gone = (1, 4, 5, 11)
    with sqlite3.connect(tmp_path / "cache" / DB_NAME) as conn:
        kept = conn.execute(
            f"SELECT SUM(prompt_tokens), SUM(completion_tokens) FROM answers WHERE row NOT IN {gone}"
        ).fetchone()
        conn.execute(f"DELETE FROM answers WHERE row IN {gone}")
    conn.close()
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True, resume=False)
    usage = result.usage["writer"]
    assert fake_openai_server.total_requests == len(gone) and usage.requests == len(gone)
    assert usage.cached == N - len(gone) and result.rows_written == N
    assert (usage.saved_prompt_tokens, usage.saved_completion_tokens) == kept and kept[0] > 0 and kept[1] > 0
    assert usage.saved_tokens == kept[0] + kept[1]
    assert (tmp_path / "out.jsonl").read_bytes() == first
    with sqlite3.connect(tmp_path / "cache" / DB_NAME) as conn:
        assert conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == N  # the asked ones stored again
    conn.close()


def test_a_bulk_peek_for_rows_the_batch_lookup_did_not_cover_asks_the_store_per_row(tmp_path: Path) -> None:
    """``peek_many`` for rows outside the column's batch (a plugin's own choice) looks each
    one up by its key, counts its hits like the batch's, and makes no key for no prompt."""
    from genwire.providers import request_context as rc
    from genwire.providers.base import chat_messages
    from genwire.providers.response_cache import Entry, ResponseCache
    from genwire.providers.usage import ModelUsage

    request = {"path": "/chat/completions", "body": {"model": "m", "messages": HOLE}}
    template = KeyTemplate("e", request, "c", 3)
    cache = ResponseCache(tmp_path)
    try:
        cache.put_many(
            [
                Entry(template.key(chat_messages("ten", None), (10,)), "c", 10, "x10", 4, 5),
                Entry(template.key(chat_messages("two", "s"), (2,)), "c", 2, "x2", 1, 1),
            ]
        )
        usage = ModelUsage()
        with rc.batch_scope(cache, 3) as batch, rc.column_scope("c", [0, 1, 2, 3]):
            found = rc.peek_many(
                "e", request, [("ten", None), None, ("two", "s"), ("nine", None)], [10, 11, 2, 9], usage, rc.is_text
            )
        assert found == ["x10", None, "x2", None]
        assert batch is not None and batch.hits == 2 and usage.cached == 2
        assert (usage.saved_prompt_tokens, usage.saved_completion_tokens, usage.saved_tokens) == (5, 6, 11)
    finally:
        cache.close()


def test_embedding_answers_are_stored_as_float64_bytes_and_read_back_exactly() -> None:
    vectors = [[0.1, -2.5e-300, 1 / 3], [7.0, 0.0, -0.125]]
    text = stored_text(vectors)
    assert text.startswith(VECTORS)  # not JSON numbers: a quarter of a keep-novel run was writing them
    assert stored_answer(text).tolist() == vectors  # every bit of each float64, as a matrix
    matrix = np.array(vectors)  # what a provider's checked answer is (providers.vectors)
    assert stored_text(matrix) == text
    # Anything else stays JSON, as before: ragged, ints, empty, text; NaN is refused.
    for other in ([[0.1], [0.2, 0.3]], [[1, 2]], [], [[]], "a", {"k": [0.5]}):
        assert not stored_text(other).startswith(VECTORS) and stored_answer(stored_text(other)) == other
    with pytest.raises(ValueError):
        stored_text([[float("nan"), 1.0]])
    with pytest.raises(ValueError):  # a damaged entry is unreadable (a warning and a miss), never wrong rows
        stored_answer(VECTORS + "3:" + text.split(":", 2)[2][:-4])
