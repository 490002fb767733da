"""FakeOpenAIServer itself: lifecycle, OpenAI format, scripting and bookkeeping."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pytest

from genwire.testing.fake_server import FakeOpenAIServer, FakeResponse


def post(url: str, payload: Any, key: str | None = None, timeout: float = 5) -> tuple[int, Any]:
    """A plain synchronous client: the server must work from sync code too."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, json.dumps(payload).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def chat(server: FakeOpenAIServer, model: str, prompt: str, **kw: Any) -> tuple[int, Any]:
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    return post(f"{server.url}/chat/completions", payload, **kw)


def embed(server: FakeOpenAIServer, model: str, texts: list[str]) -> tuple[int, Any]:
    return post(f"{server.url}/embeddings", {"model": model, "input": texts})


def test_lifecycle_is_idempotent_and_url_is_local() -> None:
    server = FakeOpenAIServer()
    with pytest.raises(RuntimeError):
        _ = server.url
    server.start()
    server.start()
    assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
    assert chat(server, "m", "hi")[0] == 200
    server.stop()
    server.stop()
    assert repr(server) == "FakeOpenAIServer(stopped)"


def test_chat_and_embeddings_in_openai_format(fake_openai_server: FakeOpenAIServer) -> None:
    status, body = chat(fake_openai_server, "m", "x" * 100)
    assert status == 200
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "answer to: " + "x" * 40}
    fake_openai_server.set_dimensions("e", 16)
    status, body = embed(fake_openai_server, "e", ["a", "b", "a"])
    assert status == 200
    vectors = [item["embedding"] for item in body["data"]]
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert len(vectors[0]) == 16 and vectors[0] == vectors[2] != vectors[1]
    assert math.isclose(math.fsum(v * v for v in vectors[1]), 1.0, abs_tol=1e-4)


def test_api_key_and_known_models(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.require_api_key("k")
    assert chat(fake_openai_server, "m", "hi")[0] == 401
    assert chat(fake_openai_server, "m", "hi", key="k")[0] == 200
    fake_openai_server.known_models = {"m"}
    status, body = chat(fake_openai_server, "other", "hi", key="k")
    assert status == 404 and body["error"]["code"] == "model_not_found"
    with urllib.request.urlopen(f"{fake_openai_server.url}/models") as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == ["m"]


def test_script_is_consumed_in_order_then_normal(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.script("m", [503, FakeResponse(429, json={"error": {"message": "slow"}}), "empty_text"])
    assert chat(fake_openai_server, "m", "hi")[0] == 503
    assert chat(fake_openai_server, "m", "hi") == (429, {"error": {"message": "slow"}})
    assert chat(fake_openai_server, "m", "hi")[1]["choices"][0]["message"]["content"] == ""
    assert chat(fake_openai_server, "m", "hi")[0] == 200
    assert fake_openai_server.requests["m"] == 4


def test_embedding_symbols(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.script("e", ["empty_vector", "wrong_dimensions", "nan"])
    assert embed(fake_openai_server, "e", ["a"])[1]["data"][0]["embedding"] == []
    assert len(embed(fake_openai_server, "e", ["a"])[1]["data"][0]["embedding"]) == 385
    assert math.isnan(embed(fake_openai_server, "e", ["a"])[1]["data"][0]["embedding"][0])


def test_fail_when_and_fail_rate(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.fail_when("m", "poison", 500)
    assert chat(fake_openai_server, "m", "a poison pill")[0] == 500
    assert chat(fake_openai_server, "m", "a poison pill")[0] == 500  # permanent
    assert chat(fake_openai_server, "m", "fine")[0] == 200
    fake_openai_server.fail_rate("r", 0.5, statuses=(502, 503), seed=1)
    first = [chat(fake_openai_server, "r", "x")[0] for _ in range(40)]
    assert {502, 503, 200} == set(first)
    fake_openai_server.fail_rate("r", 0.5, statuses=(502, 503), seed=1)
    assert [chat(fake_openai_server, "r", "x")[0] for _ in range(40)] == first  # seeded
    fake_openai_server.clear()
    assert chat(fake_openai_server, "m", "a poison pill")[0] == 200


def test_bad_script_items_are_rejected(fake_openai_server: FakeOpenAIServer) -> None:
    with pytest.raises(ValueError, match="unknown scripted symbol"):
        fake_openai_server.script("m", ["explode"])
    with pytest.raises(TypeError):
        fake_openai_server.script("m", [True])


async def test_in_flight_bookkeeping_per_model(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.set_latency("a", 0.1)
    fake_openai_server.set_latency("b", 0.1)
    url = f"{fake_openai_server.url}/chat/completions"
    async with aiohttp.ClientSession() as session:

        async def one(model: str) -> int:
            payload = {"model": model, "messages": [{"role": "user", "content": "x"}]}
            async with session.post(url, json=payload) as resp:
                await resp.read()
                return resp.status

        statuses = await asyncio.gather(*(one("a") for _ in range(3)), *(one("b") for _ in range(2)))
    assert statuses == [200] * 5
    assert fake_openai_server.peak_in_flight == 5
    assert fake_openai_server.peak_in_flight_by_model == {"a": 3, "b": 2}
    assert fake_openai_server.total_requests == 5 and fake_openai_server.in_flight == 0
    fake_openai_server.reset_stats()
    assert fake_openai_server.total_requests == 0 and not fake_openai_server.requests


def test_stop_cuts_a_hang_short() -> None:
    server = FakeOpenAIServer().start()
    server.script("m", ["hang"])
    result: list[Any] = []

    def call() -> None:
        try:
            result.append(chat(server, "m", "hi", timeout=30)[0])
        except Exception as exc:  # the connection may be closed instead
            result.append(type(exc).__name__)

    thread = threading.Thread(target=call)
    thread.start()
    for _ in range(100):
        if server.in_flight:
            break
        time.sleep(0.01)
    start = time.monotonic()
    server.stop()
    thread.join(timeout=10)
    assert time.monotonic() - start < 5
    assert result and result[0] in (504, "RemoteDisconnected", "ConnectionResetError")


def test_wait_idle_waits_for_the_clients_connections_to_close(fake_openai_server: FakeOpenAIServer) -> None:
    """A run that ends mid-flight may leave requests on the wire; ``wait_idle`` returns
    only once its connections are closed, so what the server counts next is the next run's."""
    import socket

    body = json.dumps({"model": "writer", "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    assert fake_openai_server.port is not None
    with socket.create_connection(("127.0.0.1", fake_openai_server.port), timeout=30) as conn:
        conn.sendall(head + body)
        assert conn.recv(12).startswith(b"HTTP/1.1 200")  # answered; the connection stays open (keep-alive)
        with pytest.raises(TimeoutError, match=r"1 client connection\(s\) open"):
            fake_openai_server.wait_idle(timeout=0.3)
    fake_openai_server.wait_idle()  # closed: returns
    assert fake_openai_server.total_requests == 1 and fake_openai_server.in_flight == 0


def test_the_base64_vectors_the_fake_server_sends_are_the_float32_bytes_of_its_rounded_vectors() -> None:
    from genwire.testing.fake_openai.wire import as_base64, vector_base64
    from genwire.testing.vectors import fake_vector

    for i in range(200):
        text = f"answer to: question {i}"
        assert vector_base64(text, 384) == f'"{as_base64(fake_vector(text, 384))}"'
