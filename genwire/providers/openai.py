"""OpenAI-compatible HTTP models (NIM, vLLM, OpenAI, Ollama...) over aiohttp.

One ``OpenAIProvider`` per configured provider owns one ``aiohttp.ClientSession`` and one
``ProviderGate``; every model alias of that provider shares both, so ``max_concurrency``
caps the provider's in-flight requests whatever the number of aliases, while 429s brake
only the model that got them (``genwire.providers.pacing``). Failures are raised as
``ModelError`` with one ``ErrorClass``; only transient classes are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from yarl import URL  # light, and loaded with the config already (its base_url check)

from genwire.config.schema import ModelConfig, OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.base import chat_messages, count_attempt, note_rate_limited
from genwire.providers.batch.format import uncached_base
from genwire.providers.budget import CostMeter, metered_batch_call
from genwire.providers.failures import MAX_RETRY_WAIT_S, AttemptFailure
from genwire.providers.metrics import current_recorder, note_gave_up, outcome_of
from genwire.providers.pacing import ProviderGate, estimate_tokens
from genwire.providers.request_context import (
    are_vectors,
    cache_slot,
    current_column,
    endpoint_id,
    is_text,
    may_hold,
    peek_in,
    peek_many,
    peek_scope,
    vectors_problem,
)
from genwire.providers.response_cache import HOLE
from genwire.providers.routes import Route, TokenHandle, open_route, resolve_route
from genwire.providers.tool_calls import assistant_message, is_assistant_message
from genwire.providers.tracing import answered, request_span, trace_cache_hit, tracer
from genwire.providers.usage import Concurrency, ModelUsage, reported_tokens, requests_of
from genwire.providers.wire import BodyTooLarge, MalformedAnswer, WireClient, WireError, serves
from genwire.scrub import scrub
from genwire.version import __version__

if TYPE_CHECKING:  # aiohttp with the first request (a rerun the cache serves sends none); batch mode when on
    import aiohttp
    from aiohttp.client_middlewares import ClientHandlerType
    from multidict import CIMultiDictProxy

    from genwire.config.schema import BatchConfig
    from genwire.providers.batch.collector import BatchCollector, RoundSignal
    from genwire.providers.batch.ledger import Ledger
    from genwire.providers.servers.fleet import ServerWatch

__all__ = ["OpenAIChatModel", "OpenAIEmbeddingModel", "OpenAIProvider"]

T = TypeVar("T")

# Keys shorter than this are placeholders (vLLM's "1", "EMPTY", "none") that guard
# nothing; scrubbing them would mangle every message ("HTTP 40*** from http://***27.0...").
# Real keys (OpenAI, NVIDIA, Anthropic...) are 20+ characters.
MIN_SECRET_CHARS = 8
_MIB = 1 << 20
_READ_CHUNK = 1 << 16  # bytes taken from the socket at a time while reading a body
# A pool member's request answered 429 this many times is handed back to its pool.
FAILOVER_429S = 2
# Response-body snippets in error messages are cut to this many characters.
SNIPPET_CHARS = 200
# Phrases with which servers say "this model does not exist" in a 400 body
# (OpenAI answers 404; some vLLM/TGI/NIM versions answer 400).
_MISSING_MODEL_PHRASES = (
    "does not exist",
    "doesn't exist",
    "not found",
    "model_not_found",
    "unknown model",
    "no such model",
    "not a valid model",
    "invalid model",
)


CHAT = "/chat/completions"
CONTENT_ENCODING = "Content-Encoding"  # a compressed body is bounded as it is inflated (_read_body)
# One encoder for every request body: json.dumps with options builds a new one per call.
_BODY_ENCODER = json.JSONEncoder(separators=(",", ":"))
_FLOAT: frozenset[type] = frozenset({float})
_NUMBER: frozenset[type] = frozenset({float, int})


# Sent by both clients (the lean one and aiohttp): one name whichever sends a request.
USER_AGENT = f"genwire/{__version__}"


class RedirectRefused(Exception):
    """A redirect to another origin (named): never followed with the provider's headers."""


class _NeverRaised(Exception):
    """Stands for aiohttp's errors until aiohttp is imported (no request was sent yet)."""


class OpenAIProvider:
    """An OpenAI-compatible endpoint; builds the chat and embedding models that use it."""

    def __init__(self, name: str, config: OpenAIProviderConfig) -> None:
        self.name = name
        self.config = config  # api_key stays a SecretStr; unwrapped only for the header
        self.base_url = config.url.rstrip("/")
        # Shown in messages: never the userinfo part a base URL might carry.
        self._display_url = str(URL(self.base_url).with_user(None))
        self.usage: dict[str, ModelUsage] = {}  # per model alias: attempts, retries, 429s, tokens
        self.reported: dict[str, str] = {}  # per model alias: the model id its first answer named (the card's)
        # The gate bounds in-flight requests (max_concurrency, adapted to 429s) and paces
        # them (rate_limit); every alias of the provider shares it.
        self.gate = ProviderGate(config.max_concurrency, config.rate_limit, adaptive=config.adapt_to_rate_limits)
        self._retry_on = frozenset(config.retry_on)
        self._max_body = int(config.max_response_mb * _MIB)  # bytes of an answer, at most
        self._session: aiohttp.ClientSession | None = None
        # The model requests of an http:// endpoint go over this lean client (issue 44: a
        # fast endpoint's speed is the client's CPU); opened and closed with the session.
        self._wire: WireClient | None = None
        self._aiohttp_only = False  # set once a redirect or a cookie made aiohttp take over
        self._origin = URL(self.base_url).origin()  # where requests may go (no redirect elsewhere)
        # aiohttp's errors, known once it is imported (with the first session).
        self._invalid_url: type[BaseException] = _NeverRaised
        self._client_errors: tuple[type[BaseException], ...] = (OSError, WireError)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._routes: list[Route[OpenAIProvider]] = []  # keeps the handles' routes alive
        # The response cache's endpoint identity: kind, URL and a hash of the headers that
        # are not credentials. Never the API key: rotating it keeps the cache.
        # A managed server's (SPEC §23) is its name: its port changes from run to run.
        self.cache_endpoint = endpoint_id(
            "openai",
            f"server:{config.server}" if config.server else self.base_url,
            {name: value.get_secret_value() for name, value in config.headers.items()},
        )
        # Batch mode (SPEC §14): set by the run after its pre-flight; calls then go to it.
        self.batcher: BatchCollector | None = None
        # The run's cost meter (SPEC §16): reserves each request's worst case, settles it.
        self.meter: CostMeter | None = None
        # The managed server it is served by (SPEC §23), set by the container's graph.
        self.server: ServerWatch | None = None

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self._display_url!r})"

    # --- models ------------------------------------------------------------------------

    def chat_model(self, alias: str, config: ModelConfig, *, pool: str | None = None) -> OpenAIChatModel:
        """``pool``: the cache identity of the endpoint pool this model is a member of."""
        return OpenAIChatModel(open_route(self, alias, config.model, self._routes, pool), alias, config)

    def embedding_model(self, alias: str, config: ModelConfig, *, pool: str | None = None) -> OpenAIEmbeddingModel:
        return OpenAIEmbeddingModel(open_route(self, alias, config.model, self._routes, pool), alias, config)

    # --- session lifecycle -------------------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """aiohttp's session, or None before it is needed / after ``aclose``."""
        return self._session

    @property
    def client(self) -> WireClient | aiohttp.ClientSession | None:
        """What sends the requests (the lean client of an http:// endpoint it serves, else
        aiohttp's session), or None before the first request / after ``aclose``."""
        return self._wire or self._session

    def load_client_code(self) -> None:
        """Import the client code this endpoint's requests need (aiohttp: ~150 ms), so that a
        timed stage (the pre-flight) does not pay for it at its first request."""
        if self._aiohttp_only or not serves(self.base_url, self._request_headers()):
            import aiohttp  # noqa: F401
        else:
            import httptools  # noqa: F401

    def _bound_here(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether this provider's clients may be used from ``loop``. A client is bound to
        its loop; reusing the provider from another loop is only safe once the old loop is
        gone (e.g. a container entered twice)."""
        if self._loop is loop:
            return True
        if self._loop is not None and self._loop.is_running() and (self._wire is not None or self._session is not None):
            raise RuntimeError(f"{self!r} is in use by another running event loop; call aclose() first")
        return False

    async def _ensure_client(self, loop: asyncio.AbstractEventLoop) -> None:
        """The lean client for an endpoint it serves, else aiohttp's session: an http://
        endpoint's run never imports aiohttp (~150 ms) unless it follows a redirect or
        keeps a cookie (issue 49)."""
        if not self._bound_here(loop):
            await self._discard_session()
        if self._wire is not None or (self._session is not None and not self._session.closed):
            return
        headers = self._request_headers()
        if not self._aiohttp_only and serves(self.base_url, headers):
            cfg = self.config
            self._wire = WireClient(self.base_url, headers, timeout_s=cfg.timeout_s, max_body=self._max_body)
            self._loop = loop
        else:
            self._open_session(loop)

    async def _ensure_session(self) -> aiohttp.ClientSession:
        """aiohttp's session (opened now if need be), bound to the running loop."""
        loop = asyncio.get_running_loop()
        if not self._bound_here(loop):
            await self._discard_session()
        session = self._session
        if session is not None and not session.closed:
            return session
        return self._open_session(loop)

    def _request_headers(self) -> dict[str, str]:
        """What every request carries, whichever client sends it: ours, then the configured
        ones (case-insensitive: a configured header replaces ours)."""
        from multidict import CIMultiDict

        cfg = self.config
        headers: CIMultiDict[str] = CIMultiDict(
            {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": USER_AGENT}
        )
        if cfg.api_key is not None:
            headers["Authorization"] = f"Bearer {cfg.api_key.get_secret_value()}"
        for name, value in cfg.headers.items():
            headers[name] = value.get_secret_value()
        return dict(headers.items())

    def _open_session(self, loop: asyncio.AbstractEventLoop) -> aiohttp.ClientSession:
        # Created synchronously (no await) so concurrent first calls cannot open two.
        import aiohttp  # here, not at the top: a run the response cache or the lean client serves never needs it

        self._invalid_url, self._client_errors = aiohttp.InvalidURL, (aiohttp.ClientError, OSError, WireError)
        cfg = self.config
        connector = aiohttp.TCPConnector(limit=cfg.max_concurrency, limit_per_host=cfg.max_concurrency)
        session = aiohttp.ClientSession(
            connector=connector,
            headers=self._request_headers(),
            timeout=aiohttp.ClientTimeout(total=cfg.timeout_s),
            raise_for_status=False,
            middlewares=(self._same_origin_only,),
        )
        self._session, self._loop = session, loop
        return session

    async def _same_origin_only(
        self, request: aiohttp.ClientRequest, handler: ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Every request aiohttp sends, redirects included: never to another host, which
        would receive the configured headers (aiohttp strips only Authorization)."""
        if request.url.origin() != self._origin:
            raise RedirectRefused(str(request.url.origin()))
        return await handler(request)

    async def _discard_session(self) -> None:
        session, wire = self._session, self._wire
        self._session, self._loop, self._wire = None, None, None
        self._aiohttp_only = False
        if wire is not None:
            wire.close()
        if session is not None and not session.closed:
            try:
                await session.close()
            except Exception:  # best effort: the session's old loop may be closed already
                session.detach()

    async def aclose(self) -> None:
        """Close the shared session. Idempotent; a later request opens a new one."""
        await self.stop_batching()
        await self._discard_session()

    # --- batch mode ----------------------------------------------------------------------

    async def start_batching(
        self, config: BatchConfig, ledger: Ledger, spool_dir: Path, signal: RoundSignal | None = None
    ) -> BatchCollector:
        """From now on model calls go out in Batch API files (the pre-flight ran online)."""
        from genwire.providers.batch.collector import BatchCollector

        self.batcher = BatchCollector(self, config, ledger, spool_dir, signal)
        await self.batcher.recover()
        return self.batcher

    async def stop_batching(self) -> None:
        """Back to online calls; batches already submitted keep running at the provider."""
        batcher, self.batcher = self.batcher, None
        if batcher is not None:
            await batcher.aclose()

    def failure_of(self, url: str, status: int, raw: bytes) -> tuple[ErrorClass, str, bool]:
        """An HTTP error answer classified as online (class, key-free message, retried?)."""
        try:
            self._raise_for_status(url, status, raw, {})
        except AttemptFailure as failure:
            return failure.error_class, self._scrub(failure.message), failure.retry

    # --- requests ----------------------------------------------------------------------

    def post(
        self, alias: str, path: str, payload: dict[str, Any], *, failover: bool = False
    ) -> Awaitable[tuple[Any, int]]:
        """``send``, traced when traces are on (``providers.tracing``). With them off, it is
        ``send`` itself: no coroutine around it, whose every resumption (several a request)
        would pass through one more frame."""
        if tracer() is None:
            return self.send(alias, path, payload, failover=failover)
        return self._traced_send(alias, path, payload, failover)

    async def _traced_send(self, alias: str, path: str, payload: dict[str, Any], failover: bool) -> tuple[Any, int]:
        with request_span(alias, path, payload) as traced:
            data, attempts = await self.send(alias, path, payload, failover=failover)
            answered(traced, data, attempts)
            return data, attempts

    async def send(self, alias: str, path: str, payload: dict[str, Any], *, failover: bool = False) -> tuple[Any, int]:
        """POST ``payload`` to ``{base_url}{path}`` with retries.

        ``failover``: the model is a member of an endpoint pool, which re-sends a failed
        request to another endpoint at once; a transient failure is raised without a
        retry, and a 429 that persists (``FAILOVER_429S`` for one request) is raised too.

        Returns the decoded JSON body and the number of attempts it took. A 429 is retried
        until ``rate_limit_wait_s`` has passed: a stray one waits out its own
        ``Retry-After``; a persistent run of them brakes the model (``ModelGate``). Other
        retried failures count against ``retries``.

        The run's budget (SPEC §16), when a meter is set: the worst case is held before the
        first attempt, and settled from the answer's usage (released if nothing was answered).
        One coroutine for all of it (the attempts' loop included): at thousands of requests a
        second, each frame between a request's task and the socket costs on every resumption.
        """
        body = _BODY_ENCODER.encode(payload).encode()  # encoded once, all tries
        meter = self.meter
        hold = None if meter is None else await meter.reserve_request(alias, path, payload, len(body))
        cfg = self.config
        url = self.base_url + path
        estimate = estimate_tokens(body, _max_tokens(payload)) if cfg.rate_limit else 0
        usage = self._usage(alias)
        model = payload["model"]
        recorder = current_recorder()
        gate = self.gate
        server = self.server
        started = time.monotonic()
        attempts = retries = limited = 0
        try:
            while True:
                attempts += 1
                reservation = await gate.acquire(model, estimate)
                generation = server.generation if server is not None else 0
                sent = time.monotonic()
                begun = recorder.begin(alias) if recorder is not None else 0.0
                try:
                    data, headers = await self._attempt(usage, url, body)
                except AttemptFailure as failure:
                    if recorder is not None:
                        recorder.end(alias, begun, failure.error_class.value)
                    if failure.retry and failure.error_class is ErrorClass.RATE_LIMITED and cfg.adapt_to_rate_limits:
                        server_wait = self._retry_wait(0, failure.retry_after)
                        gate.rate_limited(reservation, server_wait)  # evidence for the model's brake
                        # Its own wait grows when the same request is refused again and again
                        # (a server answering "Retry-After: 0" forever is not retried in a hot loop).
                        wait = max(server_wait, self._retry_wait(limited, None)) if limited else server_wait
                        limited += 1
                        waited = time.monotonic() - started
                        if waited + wait <= cfg.rate_limit_wait_s and not (failover and limited >= FAILOVER_429S):
                            note_rate_limited(self._scrub(failure.message))
                            usage.retries += 1
                            await asyncio.sleep(wait)  # a braked model's line waits out the rest
                            continue
                        failure.message += f"; still rate-limited after {waited:.0f} s (rate_limit_wait_s)"
                    else:
                        gate.release(reservation, tokens=None, ok=False)
                        # A managed server that died (SPEC §23): sent again once it restarted, no retry spent.
                        # Only a connection that failed can mean that (a 503 comes from a live server).
                        if (
                            server is not None
                            and failure.error_class is ErrorClass.UNREACHABLE
                            and failure.retry
                            and not failover
                            and await server.came_back(generation)
                        ):
                            continue
                        if failure.retry and retries < cfg.retries and not failover:
                            wait = self._retry_wait(retries, failure.retry_after)
                            retries += 1
                            usage.retries += 1
                            await asyncio.sleep(wait)
                            continue
                    note_gave_up(alias, failure.error_class.value)
                    raise ModelError(
                        failure.error_class,
                        self._scrub(failure.message),
                        target=alias,
                        retry_after=failure.retry_after,
                        attempts=attempts,
                    ) from None  # the cause adds nothing the message lacks
                except BaseException as exc:
                    if recorder is not None:
                        recorder.end(alias, begun, outcome_of(exc))
                    gate.release(reservation, tokens=None, ok=None)  # cancelled mid-request
                    raise
                latency = time.monotonic() - sent
                if recorder is not None:
                    recorder.end(alias, begun, None)
                # Tokens counted once: into the alias's usage and, as the real figure, the pacing.
                gate.release(reservation, tokens=usage.count_tokens(data), ok=True)
                note_rate_limited(None)
                if alias not in self.reported:
                    self._note_reported(alias, data)
                break
        except BaseException:
            if meter is not None and hold is not None:
                meter.release(hold)
            raise
        if meter is not None and hold is not None:
            # The answer's advertised rate limits (x-ratelimit-limit-*) go to the estimate.
            meter.settle(hold, reported_tokens(data), latency, headers)
        return data, attempts

    def concurrency(self) -> Concurrency:
        gate = self.gate
        return Concurrency(
            gate.in_flight, gate.current, gate.max_concurrency, gate.peak_in_flight, gate.pauses, gate.waiting
        )

    @property
    def in_flight(self) -> int:
        return self.gate.in_flight

    @property
    def peak_in_flight(self) -> int:
        return self.gate.peak_in_flight

    @property
    def requests(self) -> dict[str, int]:
        """HTTP requests sent (every attempt), per model alias."""
        return requests_of(self.usage)

    def _note_reported(self, alias: str, data: Any) -> None:
        """Keep the model id the server says answered (``model`` of its body), cut and
        scrubbed: the dataset card names it beside the one asked for."""
        reported = data.get("model") if isinstance(data, dict) else None
        if isinstance(reported, str) and reported:
            self.reported[alias] = self._scrub(reported)[:200]

    def _usage(self, alias: str) -> ModelUsage:
        usage = self.usage.get(alias)  # on every cache hit: no throwaway ModelUsage
        if usage is None:
            usage = self.usage[alias] = ModelUsage()
        return usage

    def _retry_wait(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_WAIT_S)
        # Exponential backoff with full jitter: spreads retries of many tasks that failed
        # together instead of having them hit the server again in lockstep.
        ceiling = min(self.config.backoff_s * 2**retry, MAX_RETRY_WAIT_S)
        return random.uniform(0, ceiling)

    async def _attempt(self, usage: ModelUsage, url: str, body: bytes) -> tuple[Any, Mapping[str, str]]:
        """One POST: the decoded answer and its headers (case-insensitive)."""
        loop = asyncio.get_running_loop()
        wire = self._wire
        if self._loop is not loop or (wire is None and (self._session is None or self._session.closed)):
            await self._ensure_client(loop)
            wire = self._wire
        count_attempt()
        usage.requests += 1
        # No slot is taken here: the caller holds the gate, which bounds what is in flight.
        headers: Mapping[str, str]
        try:
            if wire is not None:
                status, answered_headers, raw = await wire.post(url, body)
                if "Set-Cookie" in answered_headers:
                    self._keep_cookies(await self._ensure_session(), url, answered_headers)
                headers = answered_headers
                if 300 <= status < 400 and "Location" in headers:
                    self._check_redirect(url, headers["Location"])
                    # aiohttp follows redirects: from now on it sends this provider's requests.
                    self._leave_wire()
                    status, headers, raw = await self._exchange(await self._ensure_session(), url, body)
            else:
                assert self._session is not None
                status, headers, raw = await self._exchange(self._session, url, body)
        except BodyTooLarge as exc:
            raise self._too_large(exc.status, url) from None
        except RedirectRefused as exc:
            raise AttemptFailure(
                ErrorClass.BAD_RESPONSE,
                f"POST {self._where(url)} was redirected to another host, {exc}: not followed, since the "
                "request carries the provider's api_key and headers (set base_url to the new place if it is "
                "the model's)",
                retry=False,
                retry_after=None,
            ) from None
        except MalformedAnswer as exc:
            raise AttemptFailure(
                ErrorClass.BAD_RESPONSE,
                f"malformed answer from POST {self._where(url)}: {self._scrub(str(exc))}",
                retry=False,
                retry_after=None,
            ) from None
        except TimeoutError:  # aiohttp's timeouts subclass TimeoutError
            raise AttemptFailure(
                ErrorClass.TIMEOUT,
                f"no response from POST {self._where(url)} within {self.config.timeout_s:g} s (timeout_s)",
                retry=True,
                retry_after=None,
            ) from None
        except self._invalid_url as exc:
            raise AttemptFailure(
                ErrorClass.UNREACHABLE,
                f"invalid URL {self._where(url)}: {exc}",
                retry=False,
                retry_after=None,
            ) from None
        except self._client_errors as exc:
            # Connect refused/reset, DNS failure, server disconnected, truncated body.
            raise AttemptFailure(
                ErrorClass.UNREACHABLE,
                f"POST {self._where(url)} failed: {exception_text(exc)}",
                retry=True,
                retry_after=None,
            ) from None
        if 200 <= status < 300:
            try:
                decoded = json.loads(raw)
            except ValueError:
                raise AttemptFailure(
                    ErrorClass.BAD_RESPONSE,
                    f"HTTP {status} from POST {self._where(url)} with a body that is not JSON: {self._snippet(raw)}",
                    retry=False,
                    retry_after=None,
                ) from None
            return decoded, headers
        if status == 429:
            usage.rate_limited += 1
        self._raise_for_status(url, status, raw, headers)

    def _check_redirect(self, url: str, location: str) -> None:
        """Raise ``RedirectRefused`` for a redirect to another origin (``MalformedAnswer``
        for a Location that is not a URL)."""
        try:
            target = URL(url).join(URL(location)).origin()
        except ValueError as exc:
            raise MalformedAnswer(f"a redirect to {location[:80]!r}, not a URL ({exc})") from None
        if target != self._origin:
            raise RedirectRefused(str(target))

    def _keep_cookies(self, session: aiohttp.ClientSession, url: str, headers: CIMultiDictProxy[str]) -> None:
        """An answer that sets cookies: into aiohttp's jar, as aiohttp would have kept them.
        If the jar keeps any (it refuses those of an IP address), later requests go over
        aiohttp, which sends them back (a load balancer's sticky session)."""
        from http.cookies import CookieError, SimpleCookie

        cookies: SimpleCookie = SimpleCookie()
        for header in headers.getall("Set-Cookie"):
            with contextlib.suppress(CookieError):
                cookies.load(header)
        session.cookie_jar.update_cookies(cookies, URL(url))
        if len(session.cookie_jar):
            self._leave_wire()

    def _leave_wire(self) -> None:
        """aiohttp sends the provider's requests from now on (the lean client's in flight finish)."""
        if self._wire is not None:
            self._wire.close_idle()
            self._wire = None

    async def _exchange(
        self, session: aiohttp.ClientSession, url: str, body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One POST over aiohttp: status, headers, the body read whole (``_read_body``)."""
        async with session.post(url, data=body) as resp:
            declared = resp.content_length
            if declared is not None and declared <= self._max_body and CONTENT_ENCODING not in resp.headers:
                # A plain body of a declared length within the limit: read whole at once.
                return resp.status, resp.headers, await resp.read()
            return resp.status, resp.headers, await self._read_body(resp, url)

    async def _read_body(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        """The body, read in chunks up to ``max_response_mb``: past it (or with a larger
        Content-Length) the request fails and the connection is dropped unread, so what a
        broken server sends never costs more memory than the limit."""
        limit = self._max_body
        declared = resp.content_length
        if declared is None or declared <= limit:
            body = bytearray()
            # aiohttp pauses the socket while its own buffer is full, so only the chunk in
            # hand and ``body`` hold memory; a gzip body is counted as it is inflated.
            async for chunk in resp.content.iter_chunked(_READ_CHUNK):
                body += chunk
                if len(body) > limit:
                    break
            else:
                return bytes(body)
        resp.close()  # not released to the pool: the rest of the body is never read
        raise self._too_large(resp.status, url)

    def _too_large(self, status: int, url: str) -> AttemptFailure:
        return AttemptFailure(
            ErrorClass.BAD_RESPONSE,
            f"HTTP {status} from POST {self._where(url)} with a body larger than "
            f"{self.config.max_response_mb:g} MB (max_response_mb); raise the provider's max_response_mb "
            "if such an answer is legitimate",
            retry=False,
            retry_after=None,
        )

    def _raise_for_status(self, url: str, status: int, raw: bytes, headers: Mapping[str, str]) -> NoReturn:
        detail = self._snippet(raw)
        where = f"HTTP {status} from POST {self._where(url)}"
        retry_after: float | None = None
        if status in (401, 403):
            error_class = ErrorClass.AUTH
            hint = "check the provider's api_key"
        elif status == 404:
            error_class = ErrorClass.NOT_FOUND
            hint = "check the model name and the provider's base_url"
        elif status == 400 and _says_model_missing(detail):
            error_class = ErrorClass.NOT_FOUND
            hint = "check the model name"
        elif status == 429:
            error_class = ErrorClass.RATE_LIMITED
            retry_after = _parse_retry_after(headers.get("Retry-After"))
            hint = "lower max_concurrency or raise the rate limit"
        elif status >= 500:
            error_class = ErrorClass.SERVER_ERROR
            hint = ""
        else:
            error_class = ErrorClass.BAD_RESPONSE
            hint = "the server rejected the request"
        message = f"{where}: {detail}" if detail else where
        if hint:
            message = f"{message} ({hint})"
        raise AttemptFailure(error_class, message, retry=status in self._retry_on, retry_after=retry_after)

    # --- message hygiene ---------------------------------------------------------------

    def _where(self, url: str) -> str:
        return self._display_url + url[len(self.base_url) :]

    def _scrub(self, text: str) -> str:
        """Remove the API key and header values from any text that might echo them
        (bodies, exception text)."""
        secrets = [*self.config.headers.values()]
        if self.config.api_key is not None:
            secrets.append(self.config.api_key)
        return scrub(text, [s.get_secret_value() for s in secrets], MIN_SECRET_CHARS)

    def _snippet(self, raw: bytes) -> str:
        """A short, key-free excerpt of a response body: the OpenAI error message if any."""
        text = raw.decode("utf-8", errors="replace")
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            error = decoded.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            elif isinstance(error, str):
                text = error
            elif isinstance(decoded.get("detail"), str):  # FastAPI-style servers (vLLM)
                text = decoded["detail"]
            elif isinstance(decoded.get("message"), str):
                text = decoded["message"]
        # Scrub before cutting so a cut cannot leave a recognisable part of the key.
        return readable_excerpt(" ".join(self._scrub(text).split()), SNIPPET_CHARS)


class _Handle(TokenHandle):
    """What a plugin holds: alias, model, params and an opaque route token; no provider,
    session or key is reachable from it (see genwire.providers.routes)."""

    __slots__ = ()

    async def _ask(
        self,
        path: str,
        payload: dict[str, Any],
        part: str,
        answer_of: Callable[[Any, int], T],
        usable: Callable[[Any], bool],
    ) -> T:
        """Send ``payload`` (or take its answer from the response cache) and return
        ``answer_of(response, attempts)``. A cache hit sends nothing and takes no slot of
        the provider's gate; an answer is offered to the cache only once it parsed.
        ``part``: the payload's key that varies from request to request."""
        route, body, request = _routed(self._token, path, payload, part)
        provider = route.provider
        slot = cache_slot(route.pool or provider.cache_endpoint, request, body[part])
        if slot is not None:
            found = slot.get(provider._usage(route.alias), usable)
            if found is not None:
                trace_cache_hit(route.alias, route.model, path)
                cached: T = found.answer
                return cached
        batcher = provider.batcher
        if batcher is not None:  # batch mode: the call waits for its line of a batch
            column = current_column()
            base = slot.key if slot is not None else uncached_base(provider.cache_endpoint, path, body, column)
            custom_id = batcher.request_id(base)

            async def ask() -> tuple[Any, int]:
                # Each time its line went in a batch is a request to this endpoint (a
                # pool's per-endpoint figures), answered or failed.
                try:
                    answered = await batcher.ask(route.alias, path, body, custom_id)
                except ModelError as exc:
                    count_attempt(exc.attempts)
                    raise
                count_attempt(answered[1])
                return answered

            data, attempts = await metered_batch_call(provider.meter, route.alias, path, body, ask)
        else:
            data, attempts = await provider.post(route.alias, path, body, failover=route.pool is not None)
        answer = answer_of(data, attempts)
        if slot is not None:
            slot.keep(answer, reported_tokens(data) or (0, 0))
        return answer


class OpenAIChatModel(_Handle):
    """A chat model alias served by an ``OpenAIProvider`` (``/chat/completions``)."""

    __slots__ = ()

    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str:
        payload = self._payload(prompt, system, params)
        return await self._ask(CHAT, payload, "messages", self._content, is_text)

    async def converse(
        self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping[str, Any]] = (), **params: Any
    ) -> dict[str, Any]:
        """One turn of a conversation, with OpenAI ``tools``: the assistant's message
        (``content`` and/or ``tool_calls``). Cached like ``complete`` (the whole message list
        is part of the key), so a rerun pays only for turns whose inputs changed."""
        payload = {**self._params, **params, "messages": [dict(m) for m in messages]}
        if tools:
            payload["tools"] = [dict(t) for t in tools]
        return await self._ask("/chat/completions", payload, "messages", self._message, is_assistant_message)

    def _cached_completion(
        self, rows: tuple[int, ...], prompt: str, system: str | None, params: Mapping[str, Any]
    ) -> str | None:
        """``complete``'s answer for ``rows`` if the response cache holds it (a hit), else
        None: the built-in generators' synchronous peek (``peek_completion``), a cached
        rerun's hot path. The request is keyed as ``_ask`` keys it (``_routed``: the
        route's model, ``HOLE`` in place of the messages), built here in one step."""
        scope = peek_scope(rows)
        if scope is None:  # a first run: no request to build, no key to make
            return None
        route = resolve_route(self._token, OpenAIProvider)
        provider = route.provider
        request = {"path": CHAT, "body": {**self._params, **params, "model": route.model, "messages": HOLE}}
        endpoint = route.pool or provider.cache_endpoint
        usage = provider._usage(route.alias)
        text = peek_in(scope, endpoint, request, chat_messages(prompt, system), rows, usage, is_text)
        if text is None:
            return None
        trace_cache_hit(route.alias, route.model, CHAT)
        return text if isinstance(text, str) else None

    def _cached_completions(
        self, rows: Sequence[int], prompts: Sequence[tuple[str, str | None] | None], params: Mapping[str, Any]
    ) -> list[str | None] | None:
        """``_cached_completion`` for a batch's rows at once (``prompts[i]``: the prompt and
        system of row ``rows[i]``, None for none): the route, the keyed request and the
        accounting made once, one key and one dict lookup per row. None: nothing can be
        stored for these rows (a first run)."""
        if not may_hold(rows):  # a first run: no request to build, no key to make
            return None
        route = resolve_route(self._token, OpenAIProvider)
        provider = route.provider
        request = {"path": CHAT, "body": {**self._params, **params, "model": route.model, "messages": HOLE}}
        usage = provider._usage(route.alias)
        texts = peek_many(route.pool or provider.cache_endpoint, request, prompts, rows, usage, is_text)
        if texts is not None and tracer() is not None:
            for text in texts:
                if text is not None:
                    trace_cache_hit(route.alias, route.model, CHAT)
        return texts

    def _payload(self, prompt: str, system: str | None, params: Mapping[str, Any]) -> dict[str, Any]:
        # Config params, then call params (they win); model and messages are ours.
        return {**self._params, **params, "messages": chat_messages(prompt, system)}

    def _message(self, data: Any, attempts: int) -> dict[str, Any]:
        message = assistant_message(data)
        if isinstance(message, str):
            raise ModelError(ErrorClass.BAD_RESPONSE, f"chat response {message}", target=self.alias, attempts=attempts)
        return message

    def _content(self, data: Any, attempts: int) -> str:
        def bad(why: str) -> ModelError:
            return ModelError(
                ErrorClass.BAD_RESPONSE,
                f"chat response {why}",
                target=self.alias,
                attempts=attempts,
            )

        if not isinstance(data, dict):
            raise bad("is not a JSON object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("has no choices")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise bad("has no choices[0].message")
        content = message.get("content")
        if not isinstance(content, str):
            finish = choice.get("finish_reason")
            hint = f" (finish_reason={finish!r})" if isinstance(finish, str) else ""
            raise bad(f"has no text in choices[0].message.content{hint}")
        return content


class OpenAIEmbeddingModel(_Handle):
    """An embedding model alias served by an ``OpenAIProvider`` (``/embeddings``).

    The config's ``params`` go into the request as they are (e.g. NIM's ``input_type``,
    or ``dimensions`` for models that can shorten their vectors); ``dimensions`` from the
    model config is what the pre-flight expects and is not sent by itself.
    """

    __slots__ = ("_dimensions",)
    _dimensions: int | None

    def __init__(self, token: int, alias: str, config: ModelConfig) -> None:
        super().__init__(token, alias, config)
        object.__setattr__(self, "_dimensions", config.dimensions)

    @property
    def dimensions(self) -> int | None:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        inputs = list(texts)
        if not inputs:
            return []
        payload = {**self._params, "input": inputs}
        count = len(inputs)
        return await self._ask(
            "/embeddings",
            payload,
            "input",
            lambda data, attempts: self._vectors(data, count, attempts),
            lambda answer: are_vectors(answer, count, self._dimensions),
        )

    def _vectors(self, data: Any, count: int, attempts: int) -> list[list[float]]:
        def bad(why: str) -> ModelError:
            return ModelError(
                ErrorClass.BAD_RESPONSE,
                f"embedding response {why}",
                target=self.alias,
                attempts=attempts,
            )

        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise bad("has no data list")
        if len(items) != count:
            raise bad(f"has {len(items)} vectors for {count} inputs")
        out: list[list[float] | None] = [None] * count
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise bad(f"data[{position}] is not an object")
            index = item.get("index", position)
            if type(index) is not int or not 0 <= index < count or out[index] is not None:
                raise bad(f"data[{position}].index is missing, out of range or repeated")
            vector = item.get("embedding")
            if not isinstance(vector, list):
                raise bad(f"data[{position}].embedding is not a list of numbers")
            # json.loads already made floats: keep the list as is (no copy) in that case.
            # Exact type checks: bool is an int subclass but never a vector component.
            kinds = set(map(type, vector))
            if kinds <= _FLOAT:
                out[index] = vector
            elif kinds <= _NUMBER:
                out[index] = [float(v) for v in vector]
            else:
                raise bad(f"data[{position}].embedding holds a value that is not a number")
        vectors = [v for v in out if v is not None]
        problem = vectors_problem(vectors, count, self._dimensions)
        if problem is not None:  # checked before the cache keeps it or a generator uses it
            raise bad(problem)
        return vectors


# --- helpers -----------------------------------------------------------------------------


def _routed(
    token: int, path: str, payload: dict[str, Any], part: str
) -> tuple[Route[OpenAIProvider], dict[str, Any], dict[str, Any]]:
    """A handle's request: its route, the body as sent and the request as the response
    cache keys it (``HOLE`` in place of the payload's ``part``, which the key template
    fills). A function, not a handle method: nothing on a handle returns its route."""
    route = resolve_route(token, OpenAIProvider)
    # The route's model, whatever the payload says: a handle sends only for its model.
    body = {**payload, "model": route.model}
    return route, body, {"path": path, "body": {**body, part: HOLE}}


# Sentences after the first are kept only if they carry a figure and one of these words.
_LIMIT_WORDS = re.compile(r"limit|per (?:minute|second|day)|rpm|tpm|quota|retry|try again|cooldown|seconds", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
BLOB_CHARS = 60  # a bracketed run longer than this is a dump (deployment lists, JSON), not prose


def _drop_blobs(text: str) -> str:
    """Replace long ``{...}``/``[...]``/``(...)`` runs (also one cut off at the end) with ``…``."""
    pairs = {"{": "}", "[": "]", "(": ")"}
    out: list[str] = []
    depth_stack: list[str] = []
    start = 0
    for i, ch in enumerate(text):
        if ch in pairs:
            if not depth_stack:
                start = i
            depth_stack.append(pairs[ch])
        elif depth_stack and ch == depth_stack[-1]:
            depth_stack.pop()
            if not depth_stack:
                blob = text[start : i + 1]
                out.append(blob if len(blob) <= BLOB_CHARS else blob[0] + "…" + blob[-1])
        elif not depth_stack:
            out.append(ch)
    if depth_stack:  # unbalanced to the end: a dump that was cut off
        rest = text[start:]
        out.append(rest if len(rest) <= BLOB_CHARS else rest[0] + "…")
    return "".join(out)


def readable_excerpt(text: str, limit: int) -> str:
    """A server's message as it is if it fits; else its first sentence, plus later sentences that give limit
    figures (``Limit: 40 requests per minute``, ``Try again in 5 seconds``), without long
    JSON or deployment dumps (LiteLLM puts its cooldown list before the useful part)."""
    text = " ".join(_drop_blobs(text).split())
    if len(text) <= limit:  # short enough to keep whole
        return text
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    if not sentences:
        return ""
    kept = [sentences[0]] + [s for s in sentences[1:] if _LIMIT_WORDS.search(s) and re.search(r"\d", s)]
    out = " ".join(" ".join(kept).split())
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _max_tokens(payload: Mapping[str, Any]) -> int:
    value = payload.get("max_completion_tokens", payload.get("max_tokens"))
    return value if type(value) is int and value > 0 else 0


def _says_model_missing(detail: str) -> bool:
    lowered = detail.lower()
    return "model" in lowered and any(p in lowered for p in _MISSING_MODEL_PHRASES)


def _parse_retry_after(value: str | None) -> float | None:
    """Retry-After is delta-seconds or an HTTP date; anything else is ignored."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(seconds, MAX_RETRY_WAIT_S))
