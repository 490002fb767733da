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

The answer is parsed by llhttp (``httptools``; aiohttp's C parser is llhttp too), strict:
a hand parser is where response desync comes from. Whatever is not well-formed fails its
request as ``MalformedAnswer``; everything of an answer but its body (head, chunk lines,
trailers) is bounded by ``MAX_HEAD``.

No proxy (the provider's aiohttp session ignores the environment's too) and no TLS: an
``https://`` endpoint, or one whose URL carries credentials, keeps aiohttp.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from urllib.parse import urlsplit

from multidict import CIMultiDict, CIMultiDictProxy

__all__ = ["Answer", "BodyTooLarge", "MalformedAnswer", "WireClient", "WireError", "serves"]

MAX_HEAD = 1 << 16  # bytes of a status line and headers, at most (aiohttp: 8 KiB a line, 128 headers)
MAX_HEADERS = 128
_NO_BODY = frozenset({204, 304})
# What aiohttp advertises without brotli or zstd installed: a server may compress the answer.
ACCEPT_ENCODING = "gzip, deflate"
_INFLATE = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class WireError(Exception):
    """The connection failed: refused, reset, or closed before the whole answer. The
    request may be retried."""


class MalformedAnswer(Exception):
    """The answer is not well-formed HTTP/1.x (llhttp's verdict, or a head or trailer past
    ``MAX_HEAD``): a server that answers so is broken, and asking again does not help."""


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
    """One kept-alive connection; llhttp (``httptools``) parses the answer to the request it
    carries, and the callbacks below keep what of it we need."""

    def __init__(self, max_body: int) -> None:
        from httptools import HttpResponseParser  # here: importing genwire does not load it

        self.max_body = max_body
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self._parser = HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._status = 0
        self._fields: CIMultiDict[str] = CIMultiDict()
        self._headers: CIMultiDictProxy[str] | None = None  # set once the head is whole
        self._to_eof = False  # no Content-Length, not chunked: the body ends with the connection
        self._head_bytes = 0  # of header and trailer lines parsed (bounded by MAX_HEAD)
        self._gap = 0  # bytes received since the last body bytes (a line still coming)
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
        from httptools import HttpParserCallbackError, HttpParserError, HttpParserUpgrade

        body_before = len(self._body)
        try:
            self._parser.feed_data(data)
        except HttpParserCallbackError as failed:  # one of ours, raised in a callback
            self._fail(failed.__context__ or MalformedAnswer(str(failed)))
            return
        except HttpParserUpgrade:
            self._fail(MalformedAnswer("the server switched protocols"))
            return
        except HttpParserError as failed:
            self._fail(MalformedAnswer(f"{failed} (llhttp)"))
            return
        # Head and trailer lines are bounded even while one is still coming (llhttp keeps
        # nothing, httptools the line so far): everything of an answer but its body.
        self._gap = 0 if len(self._body) != body_before else self._gap + len(data)
        if self._waiter is not None and self._gap > MAX_HEAD:
            self._fail(MalformedAnswer(f"answer head or trailers longer than {MAX_HEAD} bytes"))

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
        if self._headers is not None and self._to_eof:
            try:
                self.on_message_complete()  # a body that runs to the end of the connection ended here
            except (BodyTooLarge, MalformedAnswer) as failed:
                self._fail(failed)
            return
        why = f": {exc}" if exc is not None else ""
        waiter.set_exception(WireError(f"Server disconnected{why}"))
        self._waiter = None

    # --- llhttp's callbacks (httptools calls those defined) ----------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second answer to one request: nothing was asked for it
            raise MalformedAnswer("bytes past the end of the answer")
        self._fields = CIMultiDict()
        self._headers = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD:
            raise MalformedAnswer(f"answer headers or trailers longer than {MAX_HEAD} bytes")
        if self._headers is None:  # trailers (after the last chunk) are bounded, not kept
            if len(self._fields) >= MAX_HEADERS:
                raise MalformedAnswer(f"more than {MAX_HEADERS} answer headers")
            self._fields.add(name.decode("latin-1"), value.decode("latin-1").rstrip())

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = self._status = parser.get_status_code()
        headers = self._headers = CIMultiDictProxy(self._fields)
        if status == 101:
            raise MalformedAnswer("the server switched protocols")
        if status < 200:
            return  # 100 Continue and the like: the real answer follows
        self.reusable = parser.should_keep_alive()
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in _INFLATE:
            self._inflate = zlib.decompressobj(_INFLATE[encoding])
        declared = headers.get("Content-Length")  # llhttp checked it is one number
        if declared is not None and int(declared) > self.max_body:
            raise BodyTooLarge(status)
        chunked = "Transfer-Encoding" in headers
        self._to_eof = declared is None and not chunked and status not in _NO_BODY
        if self._to_eof:
            self.reusable = False

    def on_body(self, data: bytes) -> None:
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

    def on_message_complete(self) -> None:
        if self._status < 200:  # an interim answer: the parser goes on to the real one
            self._head_bytes = 0
            return
        if self._inflate is not None:
            try:
                rest = self._inflate.flush()
            except zlib.error as failed:
                raise MalformedAnswer(f"bad compressed body: {failed}") from None
            if len(self._body) + len(rest) > self.max_body:
                raise BodyTooLarge(self._status)
            self._body += rest
        waiter, self._waiter = self._waiter, None
        assert self._headers is not None
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, self._headers, bytes(self._body)))

    # --- one exchange -------------------------------------------------------------------

    def begin(self, waiter: asyncio.Future[Answer]) -> None:
        self._waiter = waiter
        self._headers = None
        self._body = bytearray()
        self._inflate = None
        self._head_bytes = self._gap = 0

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
            if isinstance(exc, zlib.error):
                exc = MalformedAnswer(f"bad compressed body: {exc}")
            waiter.set_exception(exc)


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
        Raises ``TimeoutError`` past ``timeout_s``, ``WireError``, ``MalformedAnswer``,
        ``BodyTooLarge``."""
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
