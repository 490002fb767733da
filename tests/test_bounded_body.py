"""Response bodies are read up to ``max_response_mb`` (SPEC §4): past it the request fails
as ``bad_response`` naming the limit and the setting, without reading the rest. Against
the fake server's endless and padded bodies, over real HTTP."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from support import cli, write

from genwire.config.schema import ModelConfig, OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers.openai.provider import OpenAIProvider
from genwire.testing.fake_server import FakeOpenAIServer, FakeResponse

MIB = 1 << 20


def provider(server: FakeOpenAIServer, **settings: Any) -> OpenAIProvider:
    config = {"kind": "openai", "base_url": server.url, "timeout_s": 30.0, "retries": 2, "backoff_s": 0.01}
    return OpenAIProvider("srv", OpenAIProviderConfig.model_validate({**config, **settings}))


def chat(p: OpenAIProvider) -> Any:
    return p.chat_model("writer", ModelConfig(provider="srv", model="writer", kind="chat"))


def test_the_default_limit_fits_the_largest_embedding_answer() -> None:
    default = OpenAIProviderConfig(kind="openai", base_url="http://127.0.0.1:1").max_response_mb
    # 2,048 inputs of 3,072 floats, as JSON text at up to 30 bytes a float (full repr,
    # separators, the indentation some servers add).
    assert default * MIB >= 2048 * 3072 * 30


async def test_an_endless_body_fails_as_bad_response_naming_the_limit_and_the_setting() -> None:
    with FakeOpenAIServer() as server:
        server.script("writer", ["endless_body"])
        p = provider(server, max_response_mb=2)
        try:
            with pytest.raises(ModelError) as caught:
                await chat(p).complete("hi")
            # Not retried: the same request would get the same answer.
            assert caught.value.error_class is ErrorClass.BAD_RESPONSE
            assert caught.value.attempts == 1
            assert "larger than 2 MB (max_response_mb)" in str(caught.value)
            # The connection was dropped, not returned to the pool half read: the next
            # request works.
            assert await chat(p).complete("again") == "answer to: again"
        finally:
            await p.aclose()


@pytest.mark.parametrize(("padding_mb", "limit_mb", "ok"), [(3, 2, False), (3, 8, True), (0.5, 1, True)])
async def test_a_padded_answer_is_read_up_to_the_limit(padding_mb: float, limit_mb: float, ok: bool) -> None:
    with FakeOpenAIServer() as server:
        server.pad_answers("writer", padding_mb)
        p = provider(server, max_response_mb=limit_mb)
        try:
            if ok:
                assert await chat(p).complete("hi") == "answer to: hi"
            else:
                with pytest.raises(ModelError, match="max_response_mb") as caught:
                    await chat(p).complete("hi")
                assert caught.value.error_class is ErrorClass.BAD_RESPONSE
        finally:
            await p.aclose()


async def test_a_declared_length_past_the_limit_fails_before_reading() -> None:
    body = b" " * (3 * MIB) + json.dumps({"choices": []}).encode()
    with FakeOpenAIServer() as server:
        server.script("writer", [FakeResponse(body=body, headers={"Content-Type": "application/json"})])
        p = provider(server, max_response_mb=1)
        try:
            with pytest.raises(ModelError, match=r"larger than 1 MB \(max_response_mb\)"):
                await chat(p).complete("hi")
        finally:
            await p.aclose()


def test_a_run_fails_the_row_with_the_endless_body_and_keeps_the_others(tmp_path: Path) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text("".join(f'{{"name": "{n}"}}\n' for n in ["Ann", "Bob", "Cid", "Dee"]), encoding="utf-8")
    with FakeOpenAIServer() as server:
        server.fail_when("writer", "Greet Cid", "endless_body")
        cfg = {
            "providers": {"srv": {"kind": "openai", "base_url": server.url, "timeout_s": 60, "max_response_mb": 4}},
            "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
            "datasets": {"people": {"kind": "jsonl", "path": str(people)}},
            "pipeline": {
                "num_records": 8,
                "max_failure_rate": 1.0,
                "output": str(tmp_path / "out.jsonl"),
                "columns": [
                    {"name": "person", "generator": "seed-dataset", "resources": {"dataset": "people"}},
                    {
                        "name": "q",
                        "generator": "llm-text",
                        "resources": {"model": "writer"},
                        "params": {"prompt": "Greet {{ person.name }}"},
                    },
                ],
            },
        }
        proc = cli("run", write(cfg, tmp_path / "genwire.yaml"), "--json", "--no-response-cache")
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    errors = [json.loads(line) for line in Path(summary["errors_file"]).read_text(encoding="utf-8").splitlines()]
    kept = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert errors and all(e["data"]["person"]["name"] == "Cid" for e in errors)
    assert all(e["error_class"] == "bad_response" for e in errors)
    assert all("larger than 4 MB (max_response_mb)" in e["error"] for e in errors)
    assert kept and all(r["person"]["name"] != "Cid" for r in kept)
    assert len(errors) + len(kept) == 8
    assert summary["rows_failed"] == len(errors)


def test_pad_answers_streams_without_holding_the_body(tmp_path: Path) -> None:
    """The fake server itself: an endless body is really endless (the client decides)."""
    import urllib.request

    with FakeOpenAIServer() as server:
        server.pad_answers("*", math.inf)
        request = urllib.request.Request(
            server.url + "/chat/completions",
            data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers.get("Content-Length") is None
            read = sum(len(response.read(MIB)) for _ in range(20))
        assert read == 20 * MIB


async def test_a_compressed_body_is_counted_as_it_inflates() -> None:
    """A 100 KiB gzip body that inflates to 64 MiB: the limit is on what it becomes."""
    import gzip

    body = gzip.compress(b" " * (64 * MIB) + b'{"choices": []}', compresslevel=9)
    assert len(body) < MIB
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    with FakeOpenAIServer() as server:
        server.script("writer", [FakeResponse(body=body, headers=headers)])
        p = provider(server, max_response_mb=2)
        try:
            with pytest.raises(ModelError, match=r"larger than 2 MB \(max_response_mb\)") as caught:
                await chat(p).complete("hi")
            assert caught.value.error_class is ErrorClass.BAD_RESPONSE
        finally:
            await p.aclose()


async def test_batch_mode_control_answers_are_bounded_by_the_same_limit(fake_openai_server: FakeOpenAIServer) -> None:
    from genwire.providers.batch.control import check_batch_api

    p = provider(fake_openai_server)
    try:
        await check_batch_api(p)  # the listing answers fit the default limit
    finally:
        await p.aclose()
    tiny = provider(fake_openai_server, max_response_mb=0.00001)  # ~10 bytes: less than any listing
    try:
        with pytest.raises(ModelError) as caught:
            await check_batch_api(tiny)
    finally:
        await tiny.aclose()
    assert caught.value.error_class is ErrorClass.BAD_RESPONSE
    assert "max_response_mb" in caught.value.message and "from GET" in caught.value.message
