"""The lean HTTP/1.1 client of an http:// endpoint's model requests (providers/wire.py),
through the provider, against real servers: the fake OpenAI server, and for the framings
it cannot send (1xx, a body to the end of the connection, headers in pieces) a raw TCP
server in the test. Whatever the framing, the answer is what aiohttp would have read."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from genwire.config.schema import ModelConfig, OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers.openai import USER_AGENT, OpenAIChatModel, OpenAIProvider
from genwire.providers.wire import serves
from genwire.testing.fake_server import FakeOpenAIServer, FakeResponse

MODEL = "writer"


def make_provider(base_url: str, **overrides: Any) -> OpenAIProvider:
    settings = {"kind": "openai", "base_url": base_url, "timeout_s": 5.0, "retries": 2, "backoff_s": 0.01}
    return OpenAIProvider("srv", OpenAIProviderConfig.model_validate({**settings, **overrides}))


def chat_of(p: OpenAIProvider) -> OpenAIChatModel:
    return p.chat_model("writer", ModelConfig(provider="srv", model=MODEL, kind="chat"))


@pytest.fixture
async def provider(fake_openai_server: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    p = make_provider(fake_openai_server.url)
    try:
        yield p
    finally:
        await p.aclose()


def answer(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def test_which_endpoints_it_serves() -> None:
    assert serves("http://127.0.0.1:8000/v1", {})
    assert not serves("https://api.openai.com/v1", {})  # TLS: aiohttp
    assert not serves("http://user:secret@127.0.0.1:8000/v1", {})  # credentials in the URL: aiohttp
    assert not serves("http://127.0.0.1:8000/v1", {"X-Bad": "a\r\nInjected: yes"})


async def test_requests_reuse_kept_alive_connections(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    chat = chat_of(provider)
    for i in range(5):
        assert await chat.complete(f"q{i}") == f"answer to: q{i}"
    assert fake_openai_server.open_connections() == 1


async def test_both_clients_send_the_same_headers(fake_openai_server: FakeOpenAIServer) -> None:
    """The lean client's request, then (aiohttp taking over, as after a redirect) aiohttp's:
    the same headers, genwire's User-Agent on both."""
    p = make_provider(fake_openai_server.url, api_key="sk-test-0123456789", headers={"X-Tenant": "blue"})
    sent: list[dict[str, str]] = []
    try:
        for prompt in ("lean", "aiohttp"):
            await chat_of(p).complete(prompt)
            sent.append({k.lower(): v for k, v in fake_openai_server.last_headers[MODEL].items()})
            p._leave_wire()
    finally:
        await p.aclose()
    lean, aio = sent
    assert lean["authorization"] == "Bearer sk-test-0123456789"
    assert lean["x-tenant"] == "blue"
    assert lean["content-type"] == "application/json"
    assert lean["accept"] == "application/json"
    assert lean["user-agent"] == USER_AGENT
    assert lean["accept-encoding"] == "gzip, deflate"
    for name in ("authorization", "x-tenant", "content-type", "accept", "user-agent", "accept-encoding"):
        assert aio[name] == lean[name], name
    assert fake_openai_server.last_body[MODEL]["messages"] == [{"role": "user", "content": "aiohttp"}]


async def test_a_chunked_answer_is_read_whole(fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider) -> None:
    fake_openai_server.script(MODEL, ["chunked", "chunked"])
    chat = chat_of(provider)
    assert await chat.complete("one") == "answer to: one"
    assert await chat.complete("two") == "answer to: two"  # the connection stays usable
    assert fake_openai_server.requests[MODEL] == 2


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_compressed_answer_is_inflated(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider, encoding: str
) -> None:
    body = gzip.compress(answer("packed")) if encoding == "gzip" else zlib.compress(answer("packed"))
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    fake_openai_server.script(MODEL, [FakeResponse(body=body, headers=headers)])
    assert await chat_of(provider).complete("hi") == "packed"


async def test_a_body_cut_short_is_unreachable_and_retried(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    fake_openai_server.script(MODEL, ["truncated"])
    assert await chat_of(provider).complete("hi") == "answer to: hi"
    assert fake_openai_server.requests[MODEL] == 2
    fake_openai_server.script(MODEL, ["truncated"] * 3)
    with pytest.raises(ModelError) as caught:
        await chat_of(provider).complete("again")
    assert caught.value.error_class is ErrorClass.UNREACHABLE
    assert caught.value.attempts == 3
    assert "Server disconnected" in caught.value.message


async def test_a_redirect_is_followed(fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider) -> None:
    target = fake_openai_server.url + "/chat/completions"
    fake_openai_server.script(MODEL, [FakeResponse(307, body=b"", headers={"Location": target})])
    assert await chat_of(provider).complete("hi") == "answer to: hi"
    assert fake_openai_server.requests[MODEL] == 2


async def test_a_request_cancelled_mid_answer_drops_its_connection(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    fake_openai_server.script(MODEL, ["hang"])
    chat = chat_of(provider)
    task = asyncio.create_task(chat.complete("stuck"))
    while fake_openai_server.in_flight == 0:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await chat.complete("next") == "answer to: next"
    for _ in range(200):  # the server saw the client hang up: its handler ended
        if fake_openai_server.in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert fake_openai_server.in_flight == 0


# --- framings the fake server cannot send: a raw server ----------------------------------

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """A request's head (its body read and dropped)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return head


class RawServer:
    """A TCP server on 127.0.0.1 answering each request with ``reply``; counts connections."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.heads: list[bytes] = []  # of the requests, lower-cased
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self.handlers.add(asyncio.current_task())  # type: ignore[arg-type]
            try:
                while True:
                    self.heads.append((await read_request(reader)).lower())
                    await self.reply(reader, writer)
                    if writer.is_closing():
                        return
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        # Each handler ends once it reads the client's hang-up (Python 3.11's wait_closed does not wait).
        if self.handlers:
            await asyncio.wait(self.handlers, timeout=10)


async def ask_twice(
    reply: Reply, *, host: str = "127.0.0.1", pause_s: float = 0.0
) -> tuple[RawServer, list[str], OpenAIProvider]:
    """Two completions ("a", then "b", ``pause_s`` apart) through one provider against a
    ``RawServer`` answering with ``reply`` (at ``host``): the server, the answers, the provider."""
    server = RawServer(reply)
    async with server as url:
        p = make_provider(url.replace("127.0.0.1", host))
        try:
            first = await chat_of(p).complete("a")
            if pause_s:
                await asyncio.sleep(pause_s)
            second = await chat_of(p).complete("b")
        finally:
            await p.aclose()
    return server, [first, second], p


async def test_a_1xx_answer_before_the_real_one_is_skipped() -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = answer("after continue")
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    async with RawServer(reply) as url:
        p = make_provider(url)
        try:
            assert await chat_of(p).complete("hi") == "after continue"
        finally:
            await p.aclose()


async def test_a_body_to_the_end_of_the_connection_is_read_and_the_connection_not_reused() -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        writer.write(answer("until eof"))
        await writer.drain()
        writer.close()

    server, answers, _ = await ask_twice(reply)
    assert answers == ["until eof", "until eof"]
    assert server.connections == 2


async def test_headers_and_body_in_pieces_and_a_connection_the_server_closed_while_idle() -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = answer("in pieces")
        data = b"HTTP/1.1 200 OK\r\nX-Ratelimit-Limit-Requests: 10\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        for start in range(0, len(data), 5):
            writer.write(data[start : start + 5])
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()  # keep-alive by the headers, but the server hangs up once idle

    server, answers, p = await ask_twice(reply, pause_s=0.2)  # the server's close reaches the client
    assert answers == ["in pieces", "in pieces"]
    assert server.connections == 2
    assert p.requests == {"writer": 2}  # no attempt failed on the closed connection


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
MALFORMED = {
    "not HTTP": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "two Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
    "chunk size 0_9": CHUNKED_HEAD + b"0_9\r\n",
    "chunk size +9": CHUNKED_HEAD + b"+9\r\n",
    "chunk size 0x9": CHUNKED_HEAD + b"0x9\r\n",
    "chunk size -1": CHUNKED_HEAD + b"-1\r\n",
    "chunk size 2^128-1": CHUNKED_HEAD + b"%x\r\n" % (2**128 - 1),
    "status 2000": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
    "two bytes after chunk data": CHUNKED_HEAD + b"2\r\n{}XY0\r\n\r\n",
}


async def malformed_failure(reply: Reply) -> tuple[ModelError, RawServer]:
    """The failure of one completion (retries allowed) against a raw server answering ``reply``."""
    server = RawServer(reply)
    async with server as url:
        p = make_provider(url, max_response_mb=1)
        try:
            with pytest.raises(ModelError) as caught:
                await chat_of(p).complete("hi")
        finally:
            await p.aclose()
    return caught.value, server


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_answer_fails_at_once_as_bad_response(case: str) -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(MALFORMED[case])
        await writer.drain()  # and the connection stays open: nothing ends the answer but the parser

    failure, server = await malformed_failure(reply)
    assert failure.error_class is ErrorClass.BAD_RESPONSE, failure.message
    assert failure.attempts == 1  # not retried: a broken server answers the same again
    assert len(server.heads) == 1
    assert "malformed answer from POST http://127.0.0.1:" in failure.message


@pytest.mark.parametrize("trailer", ["one endless line", "many lines"])
async def test_trailers_past_the_head_limit_fail_the_request(trailer: str) -> None:
    """A trailer after the last chunk is bounded by MAX_HEAD (64 KiB), not by the body's
    limit: the server offers 4 MiB of it, the client hangs up early."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = answer("trailed")
        writer.write(CHUNKED_HEAD + b"%x\r\n%s\r\n0\r\n" % (len(body), body))
        piece = b"X-Pad: " + b"a" * (1 << 16) if trailer == "one endless line" else b"X-Pad: aaaaaaaa\r\n" * 4096
        try:
            for _ in range(64):
                writer.write(piece)
                await writer.drain()
        except ConnectionError:
            pass

    failure, _ = await malformed_failure(reply)
    assert failure.error_class is ErrorClass.BAD_RESPONSE, failure.message
    assert "longer than 65536 bytes" in failure.message


async def test_a_cookie_the_server_sets_is_sent_back_as_aiohttp_would() -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = answer("with cookie")
        writer.write(
            b"HTTP/1.1 200 OK\r\nSet-Cookie: lb=node-7; Path=/\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    # A host name: a jar refuses the cookies of an IP address, as aiohttp's does.
    server, answers, _ = await ask_twice(reply, host="localhost")
    assert answers == ["with cookie", "with cookie"]
    assert b"cookie: lb=node-7" not in server.heads[0]
    assert b"cookie: lb=node-7" in server.heads[1]


async def test_an_ip_address_s_cookie_is_dropped_and_the_connection_kept() -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = answer("ok")
        writer.write(b"HTTP/1.1 200 OK\r\nSet-Cookie: lb=1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    server, answers, _ = await ask_twice(reply)
    assert answers == ["ok", "ok"]
    assert server.connections == 1
    assert b"cookie:" not in server.heads[1]


async def test_after_a_redirect_aiohttp_sends_the_requests_and_follows_them() -> None:
    """An endpoint that moved: the lean client's one request is redirected, and from then
    on aiohttp sends each request once to the old place, as it did before the lean client."""
    server: RawServer

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if server.heads[-1].startswith(b"post /v1/"):
            writer.write(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /v2/chat/completions\r\nContent-Length: 0\r\n\r\n"
            )
            return
        body = answer("moved")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    server = RawServer(reply)
    async with server as url:
        p = make_provider(url)
        try:
            for prompt in ("a", "b", "c"):
                assert await chat_of(p).complete(prompt) == "moved"
        finally:
            await p.aclose()
    old = [head for head in server.heads if head.startswith(b"post /v1/")]
    assert len(old) == 4  # the lean client's, then aiohttp's three (not two a request)
    assert p.requests == {"writer": 3}
