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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import random
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, get_args

from aiohttp import web

from genwire.providers.structured import requested_schema
from genwire.testing.fake_answers import AnswerShape, answers_asked, sized_text
from genwire.testing.fake_batches import FakeBatches
from genwire.testing.fake_tool_calls import Call, ToolScript, tool_turn
from genwire.testing.fake_usage import RealisticUsage
from genwire.testing.schema_instances import schema_instance
from genwire.testing.vectors import fake_vector

__all__ = ["SYMBOLS", "FakeOpenAIServer", "FakeResponse", "Scripted", "fake_answer", "fake_vector"]

Symbol = Literal[
    "ok",  # answered as if unscripted (a script's way to let requests through first)
    "hang",
    "malformed",
    "empty_vector",
    "wrong_dimensions",
    "one_wrong_dimension",
    "nan",
    "reset",
    "empty_text",
    "echo_auth",
    "not_json",
    "endless_body",
    "chunked",
    "truncated",
]
SYMBOLS: frozenset[str] = frozenset(get_args(Symbol))


@dataclass(frozen=True)
class FakeResponse:
    """A fully specified answer: ``json`` (serialised) or ``body`` (sent as is).

    With neither, an OpenAI-style error body for ``status`` is sent. ``echo_auth`` puts
    the request's Authorization header into the error message, as some misbehaving
    proxies do; tests use it to prove a client never repeats its key.
    """

    status: int = 200
    json: Any = None
    body: bytes | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    echo_auth: bool = False


Scripted = int | FakeResponse | Symbol | str

_ERROR_TYPES = {
    400: ("invalid_request_error", "Bad request"),
    401: ("invalid_request_error", "Incorrect API key provided"),
    403: ("permission_error", "You are not allowed to use this model"),
    404: ("invalid_request_error", "Not found"),
    429: ("rate_limit_error", "Rate limit reached, please retry later"),
    500: ("server_error", "The server had an error while processing your request"),
    502: ("server_error", "Bad gateway"),
    503: ("server_error", "The engine is currently overloaded, please try again later"),
    504: ("server_error", "Gateway timeout"),
}


def _error_body(status: int, message: str | None = None, code: str | None = None) -> bytes:
    kind, default = _ERROR_TYPES.get(status, ("api_error", f"HTTP {status}"))
    error = {"message": message or default, "type": kind, "param": None, "code": code}
    return json.dumps({"error": error}).encode()


@functools.lru_cache(maxsize=8192)
def _vector_json(text: str, dimensions: int) -> str:
    # Cached encoded form: pipelines embed the same texts repeatedly (dedup, probes).
    # Same numbers as json.dumps would give for the 6-decimal floats, 40% cheaper.
    return "[" + ",".join(map("{:.6f}".format, fake_vector(text, dimensions))) + "]"


def fake_answer(prompt: str) -> str:
    """The default chat answer: deterministic and never empty."""
    return f"answer to: {prompt[:40]}"


class FakeOpenAIServer:
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
        self.port: int | None = None
        self._bind_port = port  # 0: any free port (``port`` tells which once started)
        self._latency: dict[str, float] = {}
        self._dimensions: dict[str, int] = {}
        self._scripts: dict[str, deque[Scripted]] = defaultdict(deque)
        self._fail_when: dict[str, list[tuple[str, Scripted]]] = defaultdict(list)
        self._fail_rate: dict[str, tuple[float, tuple[Scripted, ...], random.Random]] = {}
        self._api_key: str | None = None
        self._hold: tuple[Callable[[], bool], float] | None = None  # ``hold``
        self._buckets: dict[str | None, _TokenBucket] = {}  # per model; None: every other model
        self._no_response_format: set[str] = set()
        self._rejected_tools: dict[str, set[str]] = {}  # model -> tool names whose schema it refuses
        self._varied: set[str] = set()
        self._padding_mb: dict[str, float] = {}  # per model ("*": all): whitespace before answers
        self._answers_varied = 0
        self._tool_scripts: list[ToolScript] = []  # see genwire.testing.fake_tool_calls
        self._realistic: dict[str, RealisticUsage] = {}  # per model ("*": all)
        self._shapes: dict[str, AnswerShape] = {}  # per model ("*": all); see shape_answers
        self._advertised: dict[str, dict[str, str]] = {}  # x-ratelimit-limit-* headers, per model ("*": all)
        self._answer_fns: dict[str, Callable[[str], str]] = {}  # per model: the chat answer to a prompt
        self._varied_structured: set[str] = set()  # models ("*": all) whose structured answers vary by prompt
        self._lock = threading.Lock()
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

    # --- configuration -----------------------------------------------------------------

    def set_latency(self, model: str, seconds: float) -> None:
        """Every request for ``model`` waits ``seconds`` before it is answered."""
        with self._lock:
            self._latency[model] = seconds

    def set_dimensions(self, model: str, n: int) -> None:
        with self._lock:
            self._dimensions[model] = n

    def reject_response_format(self, model: str, reject: bool = True) -> None:
        """``model`` answers 400 to any request carrying ``response_format`` (as models
        and gateways without structured output do)."""
        with self._lock:
            if reject:
                self._no_response_format.add(model)
            else:
                self._no_response_format.discard(model)

    def answer_with(self, model: str, answer: Callable[[str], str] | None) -> None:
        """``model``'s chat answers are ``answer(prompt)`` (the last message's text), e.g.
        a judge's JSON scoring each prompt its own way; None: the default answers again."""
        with self._lock:
            if answer is None:
                self._answer_fns.pop(model, None)
            else:
                self._answer_fns[model] = answer

    def vary_structured(self, model: str = "*", vary: bool = True) -> None:
        """``model``'s structured answers vary with the prompt (deterministically): a
        bounded integer (a judge's score) or an enum takes a value of its own per prompt."""
        with self._lock:
            if vary:
                self._varied_structured.add(model)
            else:
                self._varied_structured.discard(model)

    def reject_tool_schema(self, model: str, tool: str) -> None:
        """``model`` answers 400 to any request offering tool ``tool`` (as a provider does
        that refuses a tool's JSON schema)."""
        with self._lock:
            self._rejected_tools.setdefault(model, set()).add(tool)

    def vary_answers(self, model: str = "*", vary: bool = True) -> None:
        """Plain chat answers for ``model`` ("*": every model) end with `` #N``, N a serial
        number: two requests never get the same answer, as with a sampling model (so a
        test can tell a cached answer from a new one)."""
        with self._lock:
            if vary:
                self._varied.add(model)
            else:
                self._varied.discard(model)

    def pad_answers(self, model: str = "*", mb: float = 0.0) -> None:
        """Send ``mb`` MiB of JSON whitespace before each normal answer of ``model`` ("*":
        every model), streamed without a Content-Length: a valid but huge body. ``math.inf``
        streams whitespace until the client goes away (a broken proxy); 0 turns it off."""
        with self._lock:
            if mb > 0:
                self._padding_mb[model] = mb
            else:
                self._padding_mb.pop(model, None)

    def realistic_usage(self, model: str = "*", usage: RealisticUsage | None = None) -> None:
        """Answers of ``model`` ("*": every model) report realistic ``usage`` (prompt tokens
        ≈ characters / 4 with a spread; answers of varying length, at most ``max_tokens``)
        and chat answers are that long. None turns it off (tokens = words, the default)."""
        with self._lock:
            if usage is None:
                self._realistic.pop(model, None)
            else:
                self._realistic[model] = usage

    def shape_answers(
        self,
        model: str = "*",
        *,
        tokens: int = 0,
        grow_to: int | None = None,
        over: int = 1,
        ignore_max_tokens: bool = False,
        omit_usage: bool = False,
    ) -> None:
        """Plain chat answers of ``model`` ("*": every model) are ``tokens`` tokens long,
        growing linearly to ``grow_to`` by the ``over``-th answer; bounded by the request's
        ``max_tokens`` unless ``ignore_max_tokens``. ``omit_usage``: answers carry no
        ``usage`` (``prompt_tokens`` / ``completion_tokens`` still count what was billed).
        ``tokens=0`` keeps the usual lengths. A request with ``n`` gets ``n`` choices, and
        is billed for each. Called with ``model`` alone, it turns the shaping off."""
        shape = AnswerShape(tokens, grow_to, over, ignore_max_tokens, omit_usage)
        with self._lock:
            if shape.sized or omit_usage:
                self._shapes[model] = shape
            else:
                self._shapes.pop(model, None)

    def advertise_limits(self, model: str = "*", *, requests: int | None = None, tokens: int | None = None) -> None:
        """Answers of ``model`` ("*": every model) carry ``x-ratelimit-limit-requests`` /
        ``-tokens`` (per minute, as OpenAI sends them); no argument removes them."""
        headers = {}
        if requests is not None:
            headers["x-ratelimit-limit-requests"] = str(requests)
        if tokens is not None:
            headers["x-ratelimit-limit-tokens"] = str(tokens)
        with self._lock:
            if headers:
                self._advertised[model] = headers
            else:
                self._advertised.pop(model, None)

    def hold(self, until: Callable[[], bool] | None, timeout_s: float = 60.0) -> None:
        """Every request waits, before its latency, until ``until()`` is true (asked every
        20 ms in the server's thread) or ``timeout_s`` passed; ``released`` counts the
        requests ``until`` let go. None: no hold."""
        with self._lock:
            self._hold = None if until is None else (until, timeout_s)

    async def _held(self) -> None:
        with self._lock:
            hold = self._hold
        if hold is None:
            return
        until, timeout_s = hold
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.02)
        with self._lock:
            self.released += 1

    def require_api_key(self, key: str | None) -> None:
        """Requests without ``Authorization: Bearer <key>`` get 401 (None: no check)."""
        with self._lock:
            self._api_key = key

    def rate_limit(
        self,
        requests_per_s: float | None,
        *,
        burst: float | None = None,
        retry_after: float = 1.0,
        model: str | None = None,
    ) -> None:
        """Admit ``requests_per_s`` (a token bucket holding ``burst``, default one
        second's worth); beyond it answer 429 with ``Retry-After``. None removes it.

        ``model`` limits that model alone (as hosted APIs do); without it one bucket is
        shared by every model that has no limit of its own."""
        with self._lock:
            if requests_per_s is None:
                self._buckets.pop(model, None)
            else:
                capacity = burst if burst is not None else max(1.0, requests_per_s)
                self._buckets[model] = _TokenBucket(requests_per_s, capacity, retry_after)

    def script(self, model: str, responses: Iterable[Scripted]) -> None:
        """Queue answers for ``model``: one per request, then back to normal."""
        items = list(responses)
        for item in items:
            _check_item(item)
        with self._lock:
            self._scripts[model].extend(items)

    def tool_calls_when(self, substring: str, turns: Iterable[Iterable[Call]]) -> None:
        """Conversations whose prompt contains ``substring`` and that offer tools: turn n
        makes the calls at ``turns[n]`` ((name, arguments) pairs), then answers in text."""
        script = ToolScript(substring, tuple(tuple(t) for t in turns))
        with self._lock:
            self._tool_scripts.insert(0, script)

    def fail_when(self, model: str, substring: str, status: Scripted = 500) -> None:
        """Every request for ``model`` whose text contains ``substring`` gets ``status``.

        The text is the chat messages' content or the embedding inputs. ``model="*"``
        applies to every model.
        """
        _check_item(status)
        with self._lock:
            self._fail_when[model].append((substring, status))

    def fail_rate(
        self,
        model: str,
        rate: float,
        statuses: Sequence[Scripted] = (503,),
        seed: int = 0,
    ) -> None:
        """A seeded random ``rate`` of requests for ``model`` ("*": every model without a
        rate of its own) fail with one of ``statuses``."""
        for item in statuses:
            _check_item(item)
        with self._lock:
            if rate <= 0:
                self._fail_rate.pop(model, None)
            else:
                self._fail_rate[model] = (rate, tuple(statuses), random.Random(seed))

    def clear(self, model: str | None = None) -> None:
        """Drop scripts, fail_when and fail_rate rules (for ``model``, or all)."""
        with self._lock:
            if model is None:
                self._tool_scripts.clear()
            for rules in (self._scripts, self._fail_when, self._fail_rate):
                if model is None:
                    rules.clear()
                else:
                    rules.pop(model, None)

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
            return _raw(400, _error_body(400, "request body must be JSON with a 'model'"))
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
            return _raw(429, _error_body(429, "Rate limit reached for requests"), headers)
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

    async def _answer(
        self, request: web.Request, endpoint: str, model: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        texts = _texts(endpoint, body)
        with self._lock:
            api_key = self._api_key
            known = self.known_models
            rejects_format = set(self._no_response_format)
            rejected_tools = set(self._rejected_tools.get(model, ()))
            item = self._next_item(model, texts)
        if api_key is not None and request.headers.get("Authorization") != f"Bearer {api_key}":
            return _raw(401, _error_body(401, code="invalid_api_key"))
        if known is not None and model not in known:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return _raw(404, _error_body(404, message, code="model_not_found"))
        if "response_format" in body and model in rejects_format:
            return _raw(400, _error_body(400, "response_format is not supported by this model"))
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        refused = sorted(rejected_tools.intersection(n for n in offered if isinstance(n, str)))
        if refused:
            message = f"Invalid schema for function '{refused[0]}': the schema is not supported by this model."
            return _raw(400, _error_body(400, message, code="invalid_function_parameters"))
        if item is None:
            with self._lock:
                padding = self._padding_mb.get(model, self._padding_mb.get("*", 0.0))
            answer = self._normal(endpoint, model, body, texts)
            return await self._padded(request, answer, padding) if padding else answer
        return await self._scripted(request, endpoint, model, body, texts, item)

    async def _padded(self, request: web.Request, answer: web.Response, mb: float) -> web.StreamResponse:
        """``answer`` after ``mb`` MiB of spaces (endless for ``math.inf``), streamed in
        1 MiB writes that wait for the client (the server's memory stays flat)."""
        response = web.StreamResponse(status=answer.status, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        left = mb * _MIB
        stopping = self._stopping
        try:
            while left > 0:
                if stopping is not None and stopping.is_set():
                    return response
                step = int(min(left, _MIB))
                await response.write(_SPACES[:step])
                left -= step
            assert isinstance(answer.body, bytes)
            await response.write(answer.body)
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client went away mid-body
            pass
        return response

    async def _streamed(self, request: web.Request, answer: web.Response, cut: bool) -> web.StreamResponse:
        """``answer`` in small chunks (chunked transfer encoding), or (``cut``) its declared
        length with only half the body sent before the connection is dropped."""
        assert isinstance(answer.body, bytes)
        data = answer.body
        response = web.StreamResponse(status=answer.status, headers={"Content-Type": "application/json"})
        if cut:
            response.content_length = len(data)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        if cut:
            await response.write(data[: len(data) // 2])
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        for start in range(0, len(data), 7):
            await response.write(data[start : start + 7])
        await response.write_eof()
        return response

    async def _answer_line(
        self, endpoint: str, model: str, body: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[int, bytes]:
        """A batch line's answer: what an online request would get (not counted in
        ``requests``), as (status, body)."""
        response = await self._answer(_LineRequest(headers), endpoint, model, body)  # type: ignore[arg-type]
        raw = response.body if isinstance(response, web.Response) else b""
        return response.status, raw if isinstance(raw, bytes) else b""

    def _bucket_of(self, model: str) -> _TokenBucket | None:
        # Caller holds the lock. A model without a limit of its own shares the default one.
        return self._buckets.get(model, self._buckets.get(None))

    def _next_item(self, model: str, texts: list[str]) -> Scripted | None:
        # Caller holds the lock. Order: the script queue, then content rules, then chance.
        queue = self._scripts.get(model)
        if queue:
            return queue.popleft()
        for rules_model in (model, "*"):
            for substring, item in self._fail_when.get(rules_model, ()):
                if any(substring in t for t in texts):
                    return item
        chance = self._fail_rate.get(model) or self._fail_rate.get("*")
        if chance is not None:
            rate, statuses, rng = chance
            if rng.random() < rate:
                return rng.choice(statuses)
        return None

    def _dims(self, model: str, body: dict[str, Any]) -> int:
        requested = body.get("dimensions")  # OpenAI's "shorten to n" request field
        if type(requested) is int and requested > 0:
            return requested
        with self._lock:
            return self._dimensions.get(model, self.default_dimensions)

    def _normal(
        self,
        endpoint: str,
        model: str,
        body: dict[str, Any],
        texts: list[str],
        *,
        content: str | None = None,
        vectors: list[list[float]] | None = None,
    ) -> web.Response:
        with self._lock:
            realistic = self._realistic.get(model, self._realistic.get("*"))
            shape = self._shapes.get(model, self._shapes.get("*"))
        if realistic is not None:
            prompt_tokens = realistic.prompt_tokens(texts, chat=endpoint == "chat")
        else:
            prompt_tokens = sum(map(count_tokens, texts))
        if endpoint == "chat":
            if content is None and body.get("tools") and requested_schema(body.get("response_format")) is None:
                with self._lock:
                    scripts = list(self._tool_scripts)
                text, calls = tool_turn(body, scripts)
                if calls:
                    self._count_usage(model, prompt_tokens, 1)
                    return _json(200, _chat_body(model, None, prompt_tokens, 1, calls))
                content = text
            completion_tokens: int | None = None
            with self._lock:
                answer_fn = self._answer_fns.get(model)
            if content is None and answer_fn is not None:
                content = answer_fn(texts[-1] if texts else "")
            if content is None:
                schema = requested_schema(body.get("response_format"))
                # Structured output: an instance of the requested schema, as JSON text.
                with self._lock:
                    by_prompt = model in self._varied_structured or "*" in self._varied_structured
                seed = (texts[-1] if texts else "") if by_prompt else None
                content = (
                    json.dumps(schema_instance(schema, seed=seed))
                    if schema is not None
                    else fake_answer(texts[-1] if texts else "")
                )
                with self._lock:
                    varied = model in self._varied or "*" in self._varied
                    self._answers_varied += 1
                    number = self._answers_varied
                if varied and schema is None:
                    content = f"{content} #{number}"
                if shape is not None and shape.sized and schema is None:
                    with self._lock:
                        completion_tokens = shape.next_tokens(_max_tokens(body))
                    content = (
                        sized_text(content, completion_tokens)
                        if realistic is None
                        else realistic.answer(content, completion_tokens)
                    )
                elif realistic is not None and schema is None:
                    with self._lock:
                        completion_tokens = realistic.completion_tokens(_max_tokens(body))
                    content = realistic.answer(content, completion_tokens)
            if completion_tokens is None:  # a given, structured or plain-fake answer: counted as it is
                completion_tokens = count_tokens(content) if realistic is None else realistic.text_tokens(content)
            choices = answers_asked(body)  # each choice is billed
            self._count_usage(model, prompt_tokens, completion_tokens * choices)
            answer = _chat_body(model, content, prompt_tokens, completion_tokens * choices, choices=choices)
            if shape is not None and shape.omit_usage:
                del answer["usage"]
            return _json(200, answer)
        self._count_usage(model, prompt_tokens, 0)
        if vectors is None:
            dims = self._dims(model, body)
            return _raw(200, _fast_embedding_body(model, texts, dims, prompt_tokens))
        return _json(200, _embedding_body(model, vectors, prompt_tokens))

    def _count_usage(self, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens[model] += prompt_tokens
            self.completion_tokens[model] += completion_tokens

    async def _scripted(
        self,
        request: web.Request,
        endpoint: str,
        model: str,
        body: dict[str, Any],
        texts: list[str],
        item: Scripted,
    ) -> web.StreamResponse:
        if isinstance(item, int):
            return _raw(item, _error_body(item))
        if isinstance(item, FakeResponse):
            return _fake_response(request, item)
        if item == "hang":
            await self._hang(request)
            return _raw(504, _error_body(504))  # only reached if stop() cut the hang
        if item == "reset":
            # Drop the connection with no response at all: the client sees a disconnect.
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if item == "malformed":
            return web.Response(status=200, body=b"<html>upstream proxy error", content_type="text/html")
        if item == "endless_body":
            return await self._padded(request, _raw(200, b"{}"), math.inf)
        if item in ("chunked", "truncated"):
            return await self._streamed(request, self._normal(endpoint, model, body, texts), item == "truncated")
        if item == "echo_auth":
            echoed = request.headers.get("Authorization", "")
            message = f"invalid credentials in request header Authorization: {echoed}"
            return _raw(401, _error_body(401, message))
        if endpoint == "chat":
            if item == "empty_text":
                return self._normal(endpoint, model, body, texts, content="")
            if item == "not_json":
                return self._normal(endpoint, model, body, texts, content="Sure! Here is the object you asked for.")
            return self._normal(endpoint, model, body, texts)  # embedding-only symbol
        dims = self._dims(model, body)
        if item == "empty_vector":
            vectors: list[list[float]] = [[] for _ in texts]
        elif item == "wrong_dimensions":
            vectors = [fake_vector(t, dims + 1) for t in texts]
        elif item == "one_wrong_dimension":  # the last vector one longer than the others
            vectors = [fake_vector(t, dims + (i == len(texts) - 1)) for i, t in enumerate(texts)]
        elif item == "nan":
            vectors = [[float("nan"), *fake_vector(t, dims)[1:]] for t in texts]
        else:  # "empty_text" is chat-only: embeddings answer normally
            vectors = [fake_vector(t, dims) for t in texts]
        return self._normal(endpoint, model, body, texts, vectors=vectors)

    async def _hang(self, request: web.Request) -> None:
        # Sleep in short steps so a client that gave up, or stop(), ends the hang.
        deadline = time.monotonic() + self.hang_s
        stopping = self._stopping
        while time.monotonic() < deadline:
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            if stopping is not None and stopping.is_set():
                return
            await asyncio.sleep(0.05)


# --- helpers -----------------------------------------------------------------------------

_MIB = 1 << 20
_SPACES = b" " * _MIB  # padding is valid JSON whitespace


class _LineRequest:
    """What ``_answer`` reads of a request, for a batch line: the batch's headers and no
    connection (a "hang" script ends at once)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers
        self.transport = None


class _TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity``; a request takes one."""

    def __init__(self, rate: float, capacity: float, retry_after: float) -> None:
        self.rate, self.capacity, self.retry_after = rate, capacity, retry_after
        self.tokens = capacity
        self.stamp = time.monotonic()

    def take(self, now: float) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _check_item(item: object) -> None:
    if isinstance(item, bool) or not isinstance(item, int | FakeResponse | str):
        raise TypeError(f"scripted response must be int, FakeResponse or symbol, not {item!r}")
    if isinstance(item, str) and item not in SYMBOLS:
        raise ValueError(f"unknown scripted symbol {item!r}; known: {sorted(SYMBOLS)}")


def _texts(endpoint: str, body: dict[str, Any]) -> list[str]:
    """The request's texts: message contents (chat, last is the prompt) or inputs."""
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return []
        return [m["content"] for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
    inputs = body.get("input")
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, list):
        return [t if isinstance(t, str) else json.dumps(t) for t in inputs]
    return []


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if type(value) is int and value > 0 else None


def count_tokens(text: str) -> int:
    """The fake's tokenizer: whitespace-separated words (at least 1 for any text)."""
    return max(1, len(text.split()))


def _chat_body(
    model: str,
    content: str | None,
    prompt_tokens: int,
    completion_tokens: int,
    tool_calls: Any = None,
    *,
    choices: int = 1,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
            for index in range(choices)
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _embedding_body(model: str, vectors: list[list[float]], prompt_tokens: int) -> dict[str, Any]:
    return {
        "object": "list",
        "model": model,
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def _fast_embedding_body(model: str, texts: list[str], dims: int, prompt_tokens: int) -> bytes:
    """Same document as ``_embedding_body`` with normal vectors, from cached JSON pieces."""
    items = ",".join(
        f'{{"object":"embedding","index":{i},"embedding":{_vector_json(t, dims)}}}' for i, t in enumerate(texts)
    )
    head = json.dumps({"object": "list", "model": model})[:-1]
    usage = f'"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens}}}'
    return f'{head},"data":[{items}],{usage}}}'.encode()


def _json(status: int, payload: Any) -> web.Response:
    # allow_nan (the default) is deliberate: the "nan" script sends a bare NaN token.
    return _raw(status, json.dumps(payload).encode())


def _raw(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def _fake_response(request: web.Request, item: FakeResponse) -> web.Response:
    headers = dict(item.headers)
    if item.body is not None:
        body = item.body.encode() if isinstance(item.body, str) else item.body
        content_type = headers.pop("Content-Type", "text/plain")
        return web.Response(status=item.status, body=body, content_type=content_type, headers=headers)
    if item.json is not None:
        payload = item.json
        if item.echo_auth:
            payload = {"echo": request.headers.get("Authorization", ""), "body": payload}
        return _raw(item.status, json.dumps(payload).encode(), headers)
    message = None
    if item.echo_auth:
        echoed = request.headers.get("Authorization", "")
        message = f"rejected request with header Authorization: {echoed}"
    return _raw(item.status, _error_body(item.status, message), headers)
