"""A malformed answer over aiohttp (an https:// endpoint's client, or an http:// one's with
``lean_client=False``) fails its request at once as ``bad_response``, as over the lean
client (issue 49 item 4): aiohttp's parser refusals are read in the one place both clients'
errors are classified. A connection refused, reset or cut short stays ``unreachable`` and
is retried. Against the raw TCP server of ``test_wire``, which answers with exact bytes."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest
from test_wire import CHUNKED_HEAD, MALFORMED, RawServer, Reply, answer

from genwire.config.schema import ModelConfig, OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers.openai import OpenAIProvider

RETRIES = 2


def aiohttp_provider(base_url: str) -> OpenAIProvider:
    settings = {"kind": "openai", "base_url": base_url, "timeout_s": 30.0, "retries": RETRIES, "backoff_s": 0.01}
    return OpenAIProvider("srv", OpenAIProviderConfig.model_validate(settings), lean_client=False)


async def failure(reply: Reply) -> tuple[ModelError, RawServer, OpenAIProvider]:
    """The failure of one completion (retries allowed) over aiohttp against a raw server."""
    server = RawServer(reply)
    async with server as url:
        provider = aiohttp_provider(url)
        try:
            chat = provider.chat_model("writer", ModelConfig(provider="srv", model="writer", kind="chat"))
            with pytest.raises(ModelError) as caught:
                await chat.complete("hi")
            assert provider.session is not None and provider.client is provider.session  # aiohttp sent it
        finally:
            await provider.aclose()
    return caught.value, server, provider


def sent_at_once(data: bytes) -> Reply:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()  # and the connection stays open: nothing ends the answer but the parser

    return reply


def head_then(rest: bytes) -> Reply:
    """The head alone, then (once aiohttp has handed the answer on) ``rest``."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED_HEAD)
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(rest)
        await writer.drain()  # and the connection stays open: only the parser, or timeout_s (30 s), ends the read

    return reply


CASES: dict[str, Reply] = {case: sent_at_once(data) for case, data in MALFORMED.items()}
CASES |= {
    "chunk size 0x9 after the head": head_then(b"0x9\r\n"),
    "two bytes after chunk data after the head": head_then(b"2\r\n{}XY0\r\n\r\n"),
    "chunk size 2^128-1 after the head": head_then(b"%x\r\n" % (2**128 - 1)),
    "a gzip body that is not gzip": sent_at_once(
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!"
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_malformed_answer_over_aiohttp_fails_at_once_as_bad_response(case: str) -> None:
    error, server, _ = await failure(CASES[case])
    assert error.error_class is ErrorClass.BAD_RESPONSE, error.message
    assert error.attempts == 1  # not retried: a broken server answers the same again
    assert len(server.heads) == 1
    assert "malformed answer from POST http://127.0.0.1:" in error.message and "(aiohttp)" in error.message


async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The connection reset (RST) before any byte of an answer."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def closed_before_any_byte(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def cut_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    body = answer("cut")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body[:5]))
    await writer.drain()
    writer.close()


async def cut_mid_chunk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(CHUNKED_HEAD + b"9\r\n{}")
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("reply", [reset, closed_before_any_byte, cut_mid_body, cut_mid_chunk])
async def test_a_connection_reset_closed_or_cut_short_over_aiohttp_is_unreachable_and_retried(reply: Any) -> None:
    error, server, _ = await failure(reply)
    assert error.error_class is ErrorClass.UNREACHABLE, error.message
    assert error.attempts == RETRIES + 1
    assert len(server.heads) == RETRIES + 1


async def test_a_refused_connection_over_aiohttp_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    provider = aiohttp_provider(f"http://127.0.0.1:{port}/v1")
    try:
        chat = provider.chat_model("writer", ModelConfig(provider="srv", model="writer", kind="chat"))
        with pytest.raises(ModelError) as caught:
            await chat.complete("hi")
    finally:
        await provider.aclose()
    assert caught.value.error_class is ErrorClass.UNREACHABLE
    assert caught.value.attempts == RETRIES + 1
