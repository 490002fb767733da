"""A lean HTTP/1.1 client for the model requests of an ``http://`` endpoint.

At thousands of requests a second against a fast endpoint (a local vLLM or SGLang), the
client's own CPU per request decides the run's speed, and aiohttp's request machinery
(per-request ``ClientRequest``/``ClientResponse``, timers, cookie jar, URL and header
merging, traces, redirects) costs about 70 us of the 110 us a plain aiohttp client spends
on one request (issue 44). This client does only what a model request needs: one POST of
a JSON body over a kept-alive connection, its answer read whole (``Content-Length``,
chunked, or up to the end of the connection), inflated if gzip or deflate, never past
``max_body`` bytes (the limit is on what the body inflates to), within ``timeout_s`` from
connect to the last byte. A redirect is left to the caller (aiohttp follows it).

No proxy (the provider's aiohttp session ignores the environment's too) and no TLS: an
``https://`` endpoint, or one whose URL carries credentials, keeps aiohttp.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from urllib.parse import urlsplit

from multidict import CIMultiDict, CIMultiDictProxy

__all__ = ["Answer", "BodyTooLarge", "WireClient", "WireError", "serves"]

MAX_HEAD = 1 << 16  # bytes of a status line and headers, at most (aiohttp: 8 KiB a line, 128 headers)
MAX_HEADERS = 128
_NO_BODY = frozenset({204, 304})
# What aiohttp advertises without brotli or zstd installed: a server may compress the answer.
ACCEPT_ENCODING = "gzip, deflate"
_INFLATE = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class WireError(Exception):
    """The connection failed: refused, reset, closed before the whole answer, or an answer
    that is not HTTP/1.x. The request may be retried."""


class BodyTooLarge(Exception):
    """The answer's body (inflated) is larger than the client's ``max_body``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


Answer = tuple[int, CIMultiDictProxy[str], bytes]


def serves(base_url: str, headers: Mapping[str, str]) -> bool:
    """Whether this client serves ``base_url`` with ``headers``: plain HTTP, no credentials
    in the URL, no line break in a header (aiohttp says what is wrong with the others)."""
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return False
    if parts.scheme != "http" or parts.username is not None or parts.password is not None or not parts.hostname:
        return False
    return not any(c in name + value for name, value in headers.items() for c in "\r\n")


class _Connection(asyncio.Protocol):
    """One kept-alive connection; it parses the answer to the request it carries."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._status = 0
        self._headers: CIMultiDictProxy[str] | None = None
        self._length: int | None = None  # bytes of body left; None: chunked or to the end
        self._chunked = False
        self._chunk_left = 0  # of the current chunk; -1: between chunks (a size line next)
        self._trailers = False
        self._body = bytearray()
        self._inflate: zlib._Decompress | None = None

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # unasked bytes on an idle connection: it is not HTTP we can trust
            self.abort()
            return
        self._buffer += data
        try:
            self._parse()
        except (WireError, BodyTooLarge, zlib.error, ValueError) as exc:
            self._fail(exc if not isinstance(exc, zlib.error | ValueError) else WireError(f"bad answer: {exc}"))

    def eof_received(self) -> bool:
        # The server is done with this connection (an idle one is never taken again);
        # a body that runs to the end ends with connection_lost, which follows.
        self.closed = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is not None and self._length is None and not self._chunked:
            try:
                self._finish()  # a body that runs to the end of the connection ended here
            except (BodyTooLarge, zlib.error) as failed:
                self._fail(failed if isinstance(failed, BodyTooLarge) else WireError(f"bad answer: {failed}"))
            return
        why = f": {exc}" if exc is not None else ""
        waiter.set_exception(WireError(f"Server disconnected{why}"))
        self._waiter = None

    # --- one exchange -------------------------------------------------------------------

    def begin(self, waiter: asyncio.Future[Answer]) -> None:
        self._waiter = waiter
        self._headers = None
        self._body = bytearray()
        self._inflate = None
        self._chunked = self._trailers = False

    def abort(self) -> None:
        """Drop the connection (a request cut short: its answer is never read)."""
        self.closed = True
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _parse(self) -> None:
        if self._headers is None and not self._head():
            return
        if self._chunked:
            self._chunks()
        elif self._length is not None:
            take = min(self._length, len(self._buffer))
            if take:
                self._feed(bytes(self._buffer[:take]) if take < len(self._buffer) else bytes(self._buffer))
                del self._buffer[:take]
                self._length -= take
            if self._length == 0:
                self._finish()
        elif self._buffer:  # to the end of the connection
            self._feed(bytes(self._buffer))
            self._buffer.clear()

    def _head(self) -> bool:
        """Parse the status line and headers once they are all in; skip 1xx answers."""
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    raise WireError(f"answer headers longer than {MAX_HEAD} bytes")
                return False
            lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
                raise WireError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
            status = int(code)
            if 100 <= status < 200 and status != 101:
                continue  # 100 Continue and the like: the real answer follows
            if len(lines) > MAX_HEADERS + 1:
                raise WireError(f"more than {MAX_HEADERS} answer headers")
            fields: CIMultiDict[str] = CIMultiDict()
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon or not name or name != name.strip():
                    raise WireError(f"bad answer header line {line[:80]!r}")
                fields.add(name, value.strip())
            break
        self._status = status
        headers = self._headers = CIMultiDictProxy(fields)
        connection = headers.get("Connection", "").lower()
        self.reusable = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in _INFLATE:
            self._inflate = zlib.decompressobj(_INFLATE[encoding])
        if status == 101:
            raise WireError("the server switched protocols")
        if status in _NO_BODY:
            self._length = 0
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._chunked, self._chunk_left, self._length = True, -1, None
        elif "Content-Length" in headers:
            declared = headers["Content-Length"].strip()
            if not declared.isdigit():
                raise WireError(f"bad Content-Length {declared[:40]!r}")
            self._length = int(declared)
            if self._length > self.max_body:
                raise BodyTooLarge(status)
        else:
            self._length = None
            self.reusable = False  # the body ends with the connection
        return True

    def _chunks(self) -> None:
        buffer = self._buffer
        while True:
            if self._trailers:  # after the last chunk: trailer lines up to an empty one
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                del buffer[: end + 2]
                if end == 0:
                    self._finish()
                    return
                continue
            if self._chunk_left < 0:  # a size line
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD:
                        raise WireError("chunk size line too long")
                    return
                size = bytes(buffer[:end]).split(b";", 1)[0].strip()
                del buffer[: end + 2]
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise WireError(f"bad chunk size {size[:20]!r}") from None
                if self._chunk_left == 0:
                    self._trailers = True
                    continue
            take = min(self._chunk_left, len(buffer))
            if take:
                self._feed(bytes(buffer[:take]))
                del buffer[:take]
                self._chunk_left -= take
            if self._chunk_left:
                return
            if len(buffer) < 2:  # the CRLF after the chunk's data
                return
            if buffer[:2] != b"\r\n":
                raise WireError("chunk data not followed by CRLF")
            del buffer[:2]
            self._chunk_left = -1

    def _feed(self, data: bytes) -> None:
        inflate = self._inflate
        room = self.max_body - len(self._body)
        if inflate is not None:
            # Never more than the limit (plus one byte, to know it was passed) in memory.
            data = inflate.decompress(data, room + 1)
            if inflate.unconsumed_tail:
                raise BodyTooLarge(self._status)
        if len(data) > room:
            raise BodyTooLarge(self._status)
        self._body += data

    def _finish(self) -> None:
        if self._inflate is not None:
            rest = self._inflate.flush()
            if len(self._body) + len(rest) > self.max_body:
                raise BodyTooLarge(self._status)
            self._body += rest
        waiter, self._waiter = self._waiter, None
        assert self._headers is not None
        if self._buffer:  # bytes past the answer: nothing was asked for them
            self.reusable = False
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, self._headers, bytes(self._body)))
        self._body = bytearray()


def _expire(waiter: asyncio.Future[Answer]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class WireClient:
    """Kept-alive connections to one ``http://`` endpoint (see ``serves``), bound to the
    event loop that made it. The caller bounds the requests in flight (the provider's
    gate), so at most that many connections are open."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, timeout_s: float, max_body: int) -> None:
        parts = urlsplit(base_url)
        assert serves(base_url, headers), base_url
        self._host = parts.hostname or ""
        self._port = parts.port or 80
        self._base = base_url.rstrip("/")
        self._prefix = parts.path.rstrip("/")
        self._query = f"?{parts.query}" if parts.query else ""
        self._timeout = timeout_s
        self._max_body = max_body
        host = f"[{self._host}]" if ":" in self._host else self._host
        fields = {"Host": host if parts.port in (None, 80) else f"{host}:{self._port}"}
        fields["Accept-Encoding"] = ACCEPT_ENCODING
        merged: CIMultiDict[str] = CIMultiDict(fields)
        for name, value in headers.items():  # case-insensitive: a configured header replaces ours
            merged[name] = value
        self._fields = "".join(f"{name}: {value}\r\n" for name, value in merged.items()).encode("latin-1")
        self._targets: dict[str, bytes] = {}  # per URL: the request line's head
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._loop = asyncio.get_running_loop()
        self.closed = False

    def _target(self, url: str) -> bytes:
        head = self._targets.get(url)
        if head is None:
            if not url.startswith(self._base):
                raise ValueError(f"{url} is not under {self._base}")
            path = self._prefix + url[len(self._base) :].split("?", 1)[0]
            head = self._targets[url] = f"POST {path or '/'}{self._query} HTTP/1.1\r\n".encode() + self._fields
        return head

    async def post(self, url: str, body: bytes) -> Answer:
        """POST ``body`` (JSON) to ``url``: status, headers (case-insensitive), body.
        Raises ``TimeoutError`` past ``timeout_s``, ``WireError``, ``BodyTooLarge``."""
        if self.closed:
            raise WireError("the client is closed")
        loop = self._loop
        deadline = loop.time() + self._timeout
        conn = None
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                break
            self._open.discard(conn)  # the server closed it while it was idle
            conn = None
        if conn is None:
            conn = await self._connect(deadline)
        waiter: asyncio.Future[Answer] = loop.create_future()
        conn.begin(waiter)
        transport = conn.transport
        assert transport is not None
        transport.write(self._target(url) + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            answer = await waiter
        except BaseException:  # timed out, failed or cancelled mid-answer: never reused
            self._drop(conn)
            raise
        finally:
            timer.cancel()
        if conn.reusable and not conn.closed and not self.closed:
            idle.append(conn)
        else:
            self._drop(conn)
        return answer

    async def _connect(self, deadline: float) -> _Connection:
        loop = self._loop
        max_body = self._max_body
        try:
            async with asyncio.timeout_at(deadline):
                _, conn = await loop.create_connection(lambda: _Connection(max_body), self._host, self._port)
        except TimeoutError:
            raise
        except OSError as exc:
            raise WireError(f"Cannot connect to host {self._host}:{self._port} [{exc.strerror or exc}]") from None
        self._open.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        conn.abort()
        self._open.discard(conn)

    def close_idle(self) -> None:
        """Close the idle connections; the requests in flight finish (then theirs close)."""
        self.closed = True
        for conn in self._idle:
            self._drop(conn)
        self._idle.clear()

    def close(self) -> None:
        """Close every connection (idempotent)."""
        self.closed = True
        for conn in self._open:
            conn.abort()
        self._open.clear()
        self._idle.clear()
