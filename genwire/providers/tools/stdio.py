"""The stdio transport of a tool server: its process (under the launcher's reaper) and its
JSON-RPC lines, read with bounded memory.

genwire's own, not the SDK's ``stdio_client``, for three reasons: a message longer than
``max_message_bytes`` is dropped while it is read (never held whole: ``max_result_mb``
bounds memory) and its request answered with an error the call reports as
``bad_response``; a line that is not JSON-RPC is dropped without a word (the SDK logs it
in a traceback, and the line may hold anything the server printed); and a stop can be
immediate (``kill``: the whole process group at once, for a server stuck in
``initialize``, a cancelled start, Ctrl-C) where the SDK waits out its grace periods.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import IO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage

from genwire.providers.tools import launcher

TOO_LARGE = -32099  # the code of the error that answers a dropped message (server-defined range)
GRACE_S = 2.0  # a server asked to stop (stdin closed) has this long before its group is killed
_HEAD_BYTES = 512  # of a dropped message, kept to find the id of the request it answers
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,256}")')

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@contextlib.asynccontextmanager
async def stdio_transport(
    server: list[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None,
    errlog: IO[str],
    max_message_bytes: int,
    started: Callable[[int], None],
) -> AsyncIterator[Streams]:
    """Start ``server`` under its reaper with only ``env`` (plus ``PATH``); ``started``
    is told the reaper's PID (the group's: ``launcher.kill_group`` ends it). Leaving the
    block normally stops the server gracefully; leaving it by an exception (a
    cancellation included) kills its group at once."""
    argv = launcher.command(os.getpid(), list(env), server)
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        cwd=cwd,
        env={"PATH": os.environ.get("PATH", os.defpath), **env},
        start_new_session=True,
    )
    started(process.pid)
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with read_in:
                lines = _Lines(max_message_bytes)
                async for chunk in process.stdout:
                    for item in lines.feed(chunk):
                        await read_in.send(item)

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_out:
                async for message in write_out:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_in.aclose()  # the session sees the connection end, not a hang

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        try:
            yield read_out, write_in
        except BaseException:
            if process.returncode is None:
                launcher.kill_group(process.pid)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_out, write_in, read_in, write_out):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    """Close the server's stdin, give it ``GRACE_S`` to exit, then kill its group; reap it."""
    if process.returncode is None and process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
        with anyio.move_on_after(GRACE_S):
            while process.returncode is None:
                await anyio.sleep(0.02)
    # The reaper ends its group before it exits itself: once it has exited, its PID (a
    # group id no longer) is not signalled, for it may belong to another process by now.
    if process.returncode is None:
        launcher.kill_group(process.pid)
    with anyio.move_on_after(GRACE_S):
        await process.wait()


class _Lines:
    """Splits the server's stdout into JSON-RPC messages; holds at most ``limit`` bytes of
    one (plus a chunk)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.head: bytes | None = None  # a message over the limit: its first bytes

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception]:
        out: list[SessionMessage | Exception] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self.head is None:
                self.buffer += piece
                if len(self.buffer) > self.limit:  # drop it as it comes: keep only its head
                    self.head = bytes(self.buffer[:_HEAD_BYTES])
                    self.buffer = bytearray()
            if end < 0:
                return out
            item = self._message()
            if item is not None:
                out.append(item)
            start = end + 1

    def _message(self) -> SessionMessage | Exception | None:
        head, line = self.head, bytes(self.buffer)
        self.head, self.buffer = None, bytearray()
        if head is not None:
            return _too_large(head, self.limit)
        if not line.strip():
            return None
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError:
            return None  # not JSON-RPC (a stray print): dropped, never echoed


def _too_large(head: bytes, limit: int) -> SessionMessage | Exception:
    """The error that answers the request whose answer was dropped for its size."""
    found = _ID.search(head)
    message = f"the answer was larger than {limit / (1 << 20):g} MB"
    if found is None:
        return ValueError(message)
    raw = found.group(1).decode()
    request_id: int | str = int(raw) if raw[0] != '"' else raw[1:-1]
    error = types.ErrorData(code=TOO_LARGE, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
