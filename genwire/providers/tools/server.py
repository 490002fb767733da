"""An MCP server as genwire uses it: one connection (and, for stdio, one process) per
server per run, shared by every column bound to it, closed with the container.

The SDK's transports and ``ClientSession`` are anyio context managers that must be entered
and left in one task, so each connection lives in a task of its own (``_serve``) that
holds them open until asked to stop; calls from any task go through its session.

Failures are ``ModelError``s with a class: ``unreachable`` (cannot start or connect, the
server went away), ``timeout`` (``timeout_s``), ``bad_response`` (a protocol error, a
result larger than ``max_result_mb``). A server that goes away mid-run is started again
once; after a second loss its calls fail as ``unreachable`` at once. Tool results are
never cached: a tool may have effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from genwire import scrub
from genwire.config.tools import HttpToolServerConfig, StdioToolServerConfig
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.tools import launcher
from genwire.providers.tools.handle import ToolResult, ToolServerBase, ToolSpec
from genwire.providers.tools.stdio import TOO_LARGE, stdio_transport

CONNECTION_CLOSED = -32000  # the SDK's code for "the transport ended" (mcp_types.CONNECTION_CLOSED)
STOP_TIMEOUT_S = 5.0  # a started server stops within ~2 s (stdin closed, then its group killed)
STDERR_TAIL_CHARS = 400  # of a server's stderr, shown when it fails to start
MIN_SECRET_CHARS = 4
_MIB = 1 << 20

# The SDK's log records (a traceback of a line it could not parse, an HTTP error) may hold
# what a server printed: they go through the scrubber, without traceback unless --debug.
scrub.route_logging("mcp", "tool server")


@dataclass
class _Connection:
    ready: asyncio.Future[ClientSession]
    stop: asyncio.Event
    loop: asyncio.AbstractEventLoop
    errlog: IO[str] | None
    task: asyncio.Task[None] = field(init=False)
    pid: int | None = None  # a stdio server's reaper: the leader of its process group

    def kill(self) -> None:
        """End a stdio server's process group at once (nothing to wait for). Once its task
        is done the transport has stopped (and reaped) it: nothing is signalled then."""
        if self.pid is not None and not self.task.done():
            launcher.kill_group(self.pid)


class McpToolServer(ToolServerBase):
    def __init__(
        self, name: str, config: StdioToolServerConfig | HttpToolServerConfig, cwd: Path | None = None
    ) -> None:
        super().__init__(name, config)
        self._cwd = cwd
        self._conn: _Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._tools: dict[str, ToolSpec] | None = None
        self._restarts = 0
        self._gone: str | None = None  # why calls fail at once (lost twice)
        self.starts = 0  # connections opened (processes started, for stdio)
        self.calls = 0
        for secret in self._secrets():  # the SDK's log records are scrubbed of them too
            scrub.remember(secret, MIN_SECRET_CHARS)

    def __repr__(self) -> str:
        return f"McpToolServer(name={self.name!r}, transport={self.config.transport!r})"

    # --- the connection ----------------------------------------------------------------

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _session(self) -> ClientSession:
        if self._gone is not None:
            raise self._error(ErrorClass.UNREACHABLE, self._gone)
        conn = self._conn
        loop = asyncio.get_running_loop()
        if conn is None or conn.loop is not loop or conn.task.done():
            async with self._loop_lock():
                conn = self._conn
                if conn is None or conn.loop is not loop or conn.task.done():
                    if conn is not None:
                        ready = conn.ready
                        lost = (
                            conn.loop is loop and ready.done() and not ready.cancelled() and ready.exception() is None
                        )
                        await self._discard(conn)
                        if lost:  # its connection ended by itself: a loss like any other
                            self._count_loss("the connection closed")
                            if self._gone is not None:
                                raise self._error(ErrorClass.UNREACHABLE, self._gone)
                    conn = self._conn = self._open(loop)
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                return await asyncio.shield(conn.ready)
        except TimeoutError:
            error = self._error(
                ErrorClass.TIMEOUT,
                f"did not start and initialise within {self.config.start_timeout_s:g} s (start_timeout_s)",
            )
        except ModelError as exc:
            error = exc
        # A start that failed counts like a loss: tried once more, then every call fails at
        # once (a run of many rows never starts a broken server once per row).
        if self._conn is conn:
            await self._discard(conn)
            last = error.message.removeprefix(self._where() + ": ")
            self._count_loss(f"could not be started twice; not started again (last: {last})")
        raise error

    def _count_loss(self, gone: str) -> None:
        """One more start after the first loss; after the second, ``gone`` for good."""
        if self._restarts >= 1:
            self._gone = gone
        else:
            self._restarts += 1

    def _open(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        self.starts += 1
        errlog = None
        if isinstance(self.config, StdioToolServerConfig):
            errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115  # closed in _discard
        ready: asyncio.Future[ClientSession] = loop.create_future()
        # Its exception is raised to whoever waits; with no one left waiting (a cancelled
        # pre-flight) it is still taken, so asyncio does not log it as never retrieved.
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        conn = _Connection(ready, asyncio.Event(), loop, errlog)
        conn.task = loop.create_task(self._serve(conn), name=f"genwire-mcp-{self.name}")
        return conn

    async def _serve(self, conn: _Connection) -> None:
        ready, errlog = conn.ready, conn.errlog
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(conn))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                ready.set_result(session)
                await conn.stop.wait()
        except BaseException as exc:  # reported through ``ready``
            if not ready.done():
                ready.set_exception(self._start_failure(exc, errlog))
            if not isinstance(exc, Exception):  # cancelled, interrupted: not ours to swallow
                raise
        finally:
            if not ready.done():
                ready.set_exception(self._error(ErrorClass.UNREACHABLE, "the connection closed while starting"))

    def _transport(self, conn: _Connection) -> contextlib.AbstractAsyncContextManager[Any]:
        cfg = self.config
        if isinstance(cfg, StdioToolServerConfig):
            assert conn.errlog is not None
            env = {k: v.get_secret_value() for k, v in cfg.env.items()}
            return stdio_transport(
                list(cfg.command),
                env,
                cwd=self._cwd,
                errlog=conn.errlog,
                # A message holds a result's text (JSON-escaped) and maybe its structured
                # copy, and a listing must fit too: the read stops at twice the limit + 1 MiB.
                max_message_bytes=int(2 * cfg.max_result_mb * _MIB) + _MIB,
                started=lambda pid: setattr(conn, "pid", pid),
            )
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {k: v.get_secret_value() for k, v in cfg.headers.items()}
        return _http_transport(streamable_http_client, create_mcp_http_client, cfg.url, headers)

    async def _discard(self, conn: _Connection) -> None:
        """Stop a connection (and its process): bounded, never raises. A server that never
        became ready (stuck in ``initialize``, a start given up) is killed at once."""
        if self._conn is conn:
            self._conn = None
        conn.stop.set()
        ready = conn.ready
        if not ready.done() or ready.cancelled() or ready.exception() is not None:
            conn.kill()
        if conn.loop is asyncio.get_running_loop() and not conn.task.done():
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(STOP_TIMEOUT_S):
                    await asyncio.shield(conn.task)
            if not conn.task.done():
                conn.kill()
                conn.task.cancel()
                with contextlib.suppress(BaseException):
                    await conn.task
        if conn.errlog is not None:
            conn.errlog.close()

    async def aclose(self) -> None:
        conn = self._conn
        if conn is not None:
            await self._discard(conn)

    # --- what the handle asks ------------------------------------------------------------

    async def listing(self) -> dict[str, ToolSpec]:
        if self._tools is not None:
            return self._tools
        session = await self._session()
        tools: dict[str, ToolSpec] = {}
        cursor: str | None = None
        try:
            async with asyncio.timeout(self.config.timeout_s):
                while True:
                    from mcp.types import PaginatedRequestParams

                    params = PaginatedRequestParams(cursor=cursor) if cursor else None
                    result = await session.list_tools(params=params)
                    for tool in result.tools:
                        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
                        tools[tool.name] = ToolSpec(tool.name, tool.description or "", schema)
                    cursor = result.next_cursor
                    if not cursor:
                        break
        except TimeoutError:
            raise self._error(ErrorClass.TIMEOUT, f"tools/list took over {self.config.timeout_s:g} s") from None
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                raise await self._lost(self._conn, "tools/list") from None
            raise self._error(ErrorClass.BAD_RESPONSE, f"tools/list failed: {exc.error.message}") from None
        self._tools = tools
        return tools

    async def invoke(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        session = await self._session()
        conn = self._conn
        self.calls += 1
        try:
            async with asyncio.timeout(self.config.timeout_s):
                result = await session.call_tool(name, dict(arguments))
        except TimeoutError:
            raise self._error(
                ErrorClass.TIMEOUT, f"tool {name!r} did not answer within {self.config.timeout_s:g} s (timeout_s)"
            ) from None
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                raise await self._lost(conn, f"tool {name!r}") from None
            if exc.error.code == TOO_LARGE:  # dropped as it was read (stdio.py)
                raise self._error(ErrorClass.BAD_RESPONSE, self._too_large(name)) from None
            raise self._error(ErrorClass.BAD_RESPONSE, f"tool {name!r}: {exc.error.message}") from None
        except Exception as exc:  # the transport broke under the call
            raise await self._lost(conn, f"tool {name!r}", exc) from None
        return self._result(name, result)

    async def _lost(self, conn: _Connection | None, during: str, exc: BaseException | None = None) -> ModelError:
        """The server went away during a call: start it again once; after that, fail."""
        tail = self._tail(conn.errlog) if conn is not None else ""
        detail = f" ({exception_text(exc)})" if exc is not None else f"; its stderr: {tail}" if tail else ""
        if conn is not None and self._conn is conn:
            await self._discard(conn)
            self._count_loss(f"the server went away twice (last during {during}); not started again")
        return self._error(ErrorClass.UNREACHABLE, f"the server went away during {during}{detail}")

    def _result(self, name: str, result: Any) -> ToolResult:
        texts = []
        size = 0
        limit = self.config.max_result_mb * _MIB
        for block in result.content or []:
            text = getattr(block, "text", None)
            if isinstance(text, str):
                texts.append(text)
                size += len(text)
            else:
                texts.append(f"[{getattr(block, 'type', 'content')}]")
            if size > limit:
                raise self._error(ErrorClass.BAD_RESPONSE, self._too_large(name))
        return ToolResult(self._scrub("\n".join(texts)), bool(result.is_error), result.structured_content)

    # --- messages --------------------------------------------------------------------------

    def _too_large(self, name: str) -> str:
        return f"tool {name!r} answered more than {self.config.max_result_mb:g} MB (max_result_mb)"

    def _start_failure(self, exc: BaseException, errlog: IO[str] | None) -> ModelError:
        leaf = _leaf(exc)
        what = "start" if isinstance(self.config, StdioToolServerConfig) else "connect to"
        if isinstance(leaf, MCPError) and leaf.error.code != CONNECTION_CLOSED:
            return self._error(ErrorClass.BAD_RESPONSE, f"initialisation failed: {leaf.error.message}")
        reason = "the server exited before it answered" if isinstance(leaf, MCPError) else exception_text(leaf)
        tail = self._tail(errlog)
        message = f"could not {what} the server: {reason}" + (f"; its stderr: {tail}" if tail else "")
        return self._error(ErrorClass.UNREACHABLE, message)

    def _error(self, error_class: ErrorClass, message: str) -> ModelError:
        return ModelError(error_class, self._scrub(f"{self._where()}: {message}"), target=self.name)

    def _where(self) -> str:
        cfg = self.config
        if isinstance(cfg, StdioToolServerConfig):
            return f"tool server {self.name!r} (stdio: {' '.join(cfg.command)[:120]})"
        from yarl import URL

        return f"tool server {self.name!r} ({URL(cfg.url).with_user(None).with_query(None)})"

    def _secrets(self) -> list[str]:
        cfg = self.config
        secrets = cfg.env.values() if isinstance(cfg, StdioToolServerConfig) else cfg.headers.values()
        return [s.get_secret_value() for s in secrets]

    def _scrub(self, text: str) -> str:
        """No value of ``env`` or ``headers`` in any text genwire shows or keeps."""
        return scrub.scrub(text, self._secrets(), MIN_SECRET_CHARS)

    def _tail(self, errlog: IO[str] | None) -> str:
        """The end of the server's stderr, scrubbed before the cut (a cut inside a secret
        would otherwise show the rest of it)."""
        if errlog is None or errlog.closed:
            return ""
        try:
            errlog.flush()
            errlog.seek(0)
            text = errlog.read()
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        return scrub.tail(" | ".join(lines), STDERR_TAIL_CHARS, self._secrets(), MIN_SECRET_CHARS)


@contextlib.asynccontextmanager
async def _http_transport(client_cm: Any, make_client: Any, url: str, headers: dict[str, str]) -> Any:
    async with make_client(headers=headers) as http, client_cm(url, http_client=http) as (read, write):
        yield read, write


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


__all__ = ["McpToolServer"]
