"""A fake OpenAI-compatible server: real HTTP on 127.0.0.1, scriptable failures.

The server runs an aiohttp app in its own thread with its own event loop, so sync tests,
async tests, CLI subprocesses (pass ``server.url`` as the base URL) and benchmarks can
all use it the same way::

    with FakeOpenAIServer(latency=0.01) as server:
        server.script("writer", [503, "malformed"])   # next two requests for "writer"
        ...                                           # then back to normal answers
        assert server.requests["writer"] == 3

Scripted items (``script``, ``fail_when``, ``fail_rate``) are an HTTP status code, a
``FakeResponse``, or one of the symbols in ``SYMBOLS``.

The server is built in layers, one module each: what a test may script
(``scripted``), the settings tests change (``behaviours``), how one request is
answered (``answering``), the bodies on the wire (``wire``); this module holds
the server's life (thread, loop, port), its routes and its counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from types import TracebackType
from typing import Any

from aiohttp import web

from genwire.testing.fake_openai.answering import FakeAnswering
from genwire.testing.fake_openai.batches import FakeBatches
from genwire.testing.fake_openai.wire import error_body, raw_response

__all__ = ["FakeOpenAIServer"]


class FakeOpenAIServer(FakeAnswering):
    """OpenAI-compatible chat/embeddings server for tests; see the module docstring.

    Configuration methods may be called from any thread at any time; the bookkeeping
    attributes (``requests``, ``in_flight``, ``peak_in_flight``...) are safe to read.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        dimensions: int = 384,
        hang_s: float = 3600.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.default_latency = latency
        self.default_dimensions = dimensions
        self.hang_s = hang_s  # "hang" sleeps this long, or until the client goes away
        self.host = host
        self.known_models: set[str] | None = None  # None: every model name is served
        self.health_status: Callable[[], int] = lambda: 200  # GET /health (a managed server's readiness)
        self.port: int | None = None
        self._bind_port = port  # 0: any free port (``port`` tells which once started)
        super().__init__()  # the behaviours' settings (genwire.testing.fake_openai.behaviours)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        # The Files and Batches API; its lines are answered like online requests.
        self.batches = FakeBatches(self._answer_line, lambda: self._api_key)
        self.reset_stats()

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for clients, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self.port is None:
            raise RuntimeError("FakeOpenAIServer is not started")
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        """Start serving (idempotent); returns once the port accepts connections."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        errors: list[BaseException] = []
        thread = threading.Thread(target=self._serve, args=(ready, errors), name="FakeOpenAIServer", daemon=True)
        thread.start()
        if not ready.wait(timeout=30):
            raise RuntimeError("FakeOpenAIServer did not start within 30 s")
        if errors:
            thread.join()
            raise RuntimeError(f"FakeOpenAIServer failed to start: {errors[0]!r}") from errors[0]
        self._thread = thread
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent). Pending hangs are cut short."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        stopping = self._stopping
        if stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=30)
        self._thread = None
        self.port = None

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Return once no client connection is open and no request is being answered.

        A run that was interrupted (or a process that was killed) may have requests on the
        wire when it ends: the server still reads and counts them after the client has
        gone. Once the client's connections are closed on both sides, every request it
        sent has been counted (or dropped): a test that counts what the *next* run sends
        calls this (then ``reset_stats``) instead of sleeping and hoping."""
        loop = self._loop
        if loop is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            open_now = asyncio.run_coroutine_threadsafe(self._open_connections(), loop).result(timeout)
            with self._lock:
                busy = self.in_flight
            if open_now == 0 and busy == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"FakeOpenAIServer still has {open_now} client connection(s) open and {busy} request(s) "
                    f"in flight after {timeout:g} s; a client of the test was not closed"
                )
            time.sleep(0.01)

    def open_connections(self) -> int:
        """Client connections open now (kept-alive ones included)."""
        loop = self._loop
        if loop is None:
            return 0
        return asyncio.run_coroutine_threadsafe(self._open_connections(), loop).result(10)

    async def _open_connections(self) -> int:
        runner = self._runner
        server = runner.server if runner is not None else None
        return 0 if server is None else len(server.connections)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self.port is not None else "stopped"
        return f"FakeOpenAIServer({where})"

    def _serve(self, ready: threading.Event, errors: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
        except BaseException as exc:
            errors.append(exc)
        finally:
            ready.set()  # unblocks start() if setup failed before signalling
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._loop = None

    async def _main(self, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=256 * 1024 * 1024)  # batch files are big (OpenAI: 200 MB)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        self.batches.mount(app)
        # handler_cancellation: a client that timed out and hung up ends its handler, so
        # in_flight reflects what clients wait for. access_log off: tests stay quiet.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if self._bind_port:  # a fixed port: reusable at once after an earlier server's exit
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._bind_port))
            sock.listen(1024)
            sock.setblocking(False)
            site = web.SockSite(runner, sock, backlog=1024)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self.port = sock.getsockname()[1]
        self._runner = runner
        ready.set()
        try:
            await self._stopping.wait()
        finally:
            await runner.cleanup()
            self._runner = None

    def reset_stats(self) -> None:
        """Zero every counter, the batch API's too."""
        if hasattr(self, "batches"):
            self.batches.reset_stats()
        with self._lock:
            self.requests: dict[str, int] = defaultdict(int)
            self.total_requests = 0
            self.in_flight = 0
            self.peak_in_flight = 0
            self.in_flight_by_model: dict[str, int] = defaultdict(int)
            self.peak_in_flight_by_model: dict[str, int] = defaultdict(int)
            self.last_body: dict[str, Any] = {}  # last decoded request body, per model
            self.last_headers: dict[str, dict[str, str]] = {}  # last request's headers, per model
            self.bodies: list[tuple[str, dict[str, Any]]] = []  # (model, body) of every request
            self.rate_limited = 0  # requests answered 429 by ``rate_limit``
            self.released = 0  # requests ``hold`` let go on its condition (not its timeout)
            # (time.monotonic(), model, 429 or 200 = admitted) of every request, in arrival order.
            self.log: list[tuple[float, str, int]] = []
            # Tokens reported in the ``usage`` of answered requests, per model.
            self.prompt_tokens: dict[str, int] = defaultdict(int)
            self.completion_tokens: dict[str, int] = defaultdict(int)

    # --- handlers ----------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        """An inference server's readiness path: 200, or what ``health_status`` says now."""
        status = self.health_status()
        return web.json_response({"status": "ok" if status == 200 else "loading"}, status=status)

    async def _models(self, request: web.Request) -> web.Response:
        with self._lock:
            names = (
                set(self.known_models)
                if self.known_models is not None
                else (set(self._latency) | set(self._dimensions) | set(self.requests))
            )
        data = [{"id": n, "object": "model", "owned_by": "fake"} for n in sorted(names)]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "chat")

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "embeddings")

    async def _handle(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(model, str):
            with self._lock:
                self.total_requests += 1
            return raw_response(400, error_body(400, "request body must be JSON with a 'model'"))
        with self._lock:
            self.total_requests += 1
            self.requests[model] += 1
            self.last_body[model] = body
            self.last_headers[model] = dict(request.headers)
            self.bodies.append((model, body))
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self.in_flight_by_model[model] += 1
            self.peak_in_flight_by_model[model] = max(
                self.peak_in_flight_by_model[model], self.in_flight_by_model[model]
            )
            latency = self._latency.get(model, self.default_latency)
            bucket = self._bucket_of(model)
            limited = bucket is not None and not bucket.take(time.monotonic())
            if limited:
                self.rate_limited += 1
            self.log.append((time.monotonic(), model, 429 if limited else 200))
        if limited:
            assert bucket is not None
            with self._lock:
                self.in_flight -= 1
                self.in_flight_by_model[model] -= 1
            headers = {"Retry-After": f"{bucket.retry_after:g}"}
            return raw_response(429, error_body(429, "Rate limit reached for requests"), headers)
        try:
            await self._held()
            if latency > 0:
                await asyncio.sleep(latency)
            response = await self._answer(request, endpoint, model, body)
            with self._lock:
                advertised = self._advertised.get(model, self._advertised.get("*"))
            if advertised and response.status == 200 and not response.prepared:
                response.headers.update(advertised)
            return response
        finally:
            with self._lock:
                self.in_flight -= 1
                self.in_flight_by_model[model] -= 1
