"""An answer aiohttp's parser refused, read as the lean client reads one (``providers.wire``):
malformed framing is the server's answer, broken (``bad_response``: not retried, a broken
server answers the same again), while a connection refused, reset or cut short is the way
there (``unreachable``: retried). Used on the aiohttp path only, where aiohttp is imported.

aiohttp reports a refused head as ``ClientResponseError`` caused by one of its
``http_exceptions`` (bad status line, two ``Content-Length``, an invalid chunk size arriving
with the head...), a body that cannot be decoded as ``ClientPayloadError`` caused by a
``ContentEncodingError``, and a body cut short as ``ClientPayloadError`` caused by
``ContentLengthError``/``TransferEncodingError`` ("not enough data"). Chunk framing it refuses
*after* the head (``0x9``, two bytes after chunk data, a chunk size past 2^64) it records on
the connection and closes it, but the read waits on until ``timeout_s`` (aiohttp 3.14):
``framed`` ends such a read as the connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from genwire.providers.wire import MalformedAnswer

if TYPE_CHECKING:
    import aiohttp

__all__ = ["aiohttp_framing", "framed"]

T = TypeVar("T")


def aiohttp_framing(error: BaseException) -> str | None:
    """What aiohttp's parser refused in the answer that raised ``error`` (its first line),
    or None when ``error`` is not about the answer's framing (refused, reset, cut short)."""
    from aiohttp import ClientPayloadError, ClientResponseError
    from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError

    cause = error.__cause__
    if isinstance(error, ClientResponseError) and isinstance(cause, HttpProcessingError):
        return _first_line(cause.message)
    if isinstance(error, ClientPayloadError) and isinstance(cause, ContentEncodingError):
        return _first_line(cause.message)
    return None


def _first_line(message: str) -> str:
    return (message.strip().splitlines() or ["the answer's framing"])[0].rstrip(":")


async def framed(response: aiohttp.ClientResponse, read: Coroutine[Any, Any, T]) -> T:
    """``read`` (of ``response``'s body), ended as a ``MalformedAnswer`` when aiohttp's
    parser refuses the body's framing and closes the connection under it."""
    from aiohttp.http_exceptions import HttpProcessingError

    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    closed = protocol.closed if protocol is not None else None
    if protocol is None or closed is None:  # the body is in hand already
        return await read
    reading = asyncio.ensure_future(read)
    try:
        await asyncio.wait((reading, closed), return_when=asyncio.FIRST_COMPLETED)
        if not reading.done():
            await asyncio.sleep(0)  # a clean end of the body wakes the read first
        refused = protocol.exception()
        if not reading.done() and isinstance(refused, HttpProcessingError):
            raise MalformedAnswer(f"{_first_line(refused.message)} (aiohttp)")
        return await reading
    finally:
        if not reading.done():
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading
