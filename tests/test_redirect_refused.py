"""A model POST is never followed to another host (issue 49, item 5): the configured headers
(``api_key``, ``headers:``) would go with it, and aiohttp strips only Authorization. Two
real servers: the endpoint at 127.0.0.1 answering 307 to one at ``localhost`` (another
origin), on the lean client and on aiohttp (a URL with credentials keeps aiohttp)."""

from __future__ import annotations

import asyncio

import pytest

from genwire.errors import ErrorClass, ModelError
from tests.test_wire import RawServer, answer, chat_of, make_provider


@pytest.mark.parametrize("client", ["lean", "aiohttp"])
async def test_a_redirect_to_another_host_is_refused_and_said(client: str) -> None:
    async def elsewhere(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = answer("stolen")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    other = RawServer(elsewhere)
    async with other as other_url:
        target = other_url.replace("127.0.0.1", "localhost") + "/chat/completions"

        async def moved(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % target.encode()
            )

        async with RawServer(moved) as url:
            if client == "aiohttp":
                url = url.replace("http://", "http://user:pw@")
            p = make_provider(url, headers={"X-Api-Key": "sk-tenant-0123456789"})
            try:
                with pytest.raises(ModelError) as caught:
                    await chat_of(p).complete("hi")
            finally:
                await p.aclose()
    assert other.heads == []  # nothing, and so no header, reached the other host
    failure = caught.value
    assert failure.error_class is ErrorClass.BAD_RESPONSE
    assert failure.attempts == 1
    host = target.split("/v1")[0]
    assert f"redirected to another host, {host}: not followed" in failure.message
    assert "sk-tenant" not in failure.message
