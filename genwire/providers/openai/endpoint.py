"""An OpenAI-compatible endpoint's requests: ``OpenAIEndpoint.send`` posts a payload with
retries, paced by the provider's ``ProviderGate``, metered by the run's budget, traced when
traces are on; a failed attempt becomes an ``AttemptFailure`` of one ``ErrorClass``, and a
request that gave up a ``ModelError`` with a key-free message. Batch mode's switch too.

``send`` is one coroutine, its attempts' loop included, on purpose (a frame fewer per
resumption at thousands of requests a second): it stays whole here. The clients it sends
over are ``client.HttpClients``; ``provider.OpenAIProvider`` adds the model handles.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from genwire.config.schema import OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.base import count_attempt, note_rate_limited
from genwire.providers.budget.meter import CostMeter
from genwire.providers.failures import MAX_RETRY_WAIT_S, AttemptFailure
from genwire.providers.metrics import current_recorder, note_gave_up, outcome_of
from genwire.providers.openai.answers import (
    SNIPPET_CHARS,
    max_tokens,
    parse_retry_after,
    readable_excerpt,
    says_model_missing,
)
from genwire.providers.openai.client import HttpClients, RedirectRefused
from genwire.providers.pacing import ProviderGate, estimate_tokens
from genwire.providers.request_context import endpoint_id, free_row_holds, hold_answer
from genwire.providers.tracing import answered, request_span, tracer
from genwire.providers.usage import Concurrency, ModelUsage, reported_tokens, requests_of
from genwire.providers.wire import BodyTooLarge, MalformedAnswer

if TYPE_CHECKING:  # batch mode when on
    from genwire.config.schema import BatchConfig
    from genwire.providers.batch.collector import BatchCollector, RoundSignal
    from genwire.providers.batch.ledger import Ledger
    from genwire.providers.servers.fleet import ServerWatch

__all__ = ["FAILOVER_429S", "OpenAIEndpoint"]

# A pool member's request answered 429 this many times is handed back to its pool.
FAILOVER_429S = 2
# One encoder for every request body: json.dumps with options builds a new one per call.
_BODY_ENCODER = json.JSONEncoder(separators=(",", ":"))


class OpenAIEndpoint(HttpClients):
    """An OpenAI-compatible endpoint's requests (see the module); the base of ``OpenAIProvider``."""

    def __init__(self, name: str, config: OpenAIProviderConfig, *, lean_client: bool = True) -> None:
        super().__init__(config, lean_client=lean_client)
        self.name = name
        self.usage: dict[str, ModelUsage] = {}  # per model alias: attempts, retries, 429s, tokens
        self.reported: dict[str, str] = {}  # per model alias: the model id its first answer named (the card's)
        # The gate bounds in-flight requests (max_concurrency, adapted to 429s) and paces
        # them (rate_limit); every alias of the provider shares it.
        self.gate = ProviderGate(config.max_concurrency, config.rate_limit, adaptive=config.adapt_to_rate_limits)
        self._retry_on = frozenset(config.retry_on)
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

    async def aclose(self) -> None:
        """Close the shared session. Idempotent; a later request opens a new one."""
        await self.stop_batching()
        await self._discard_session()

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
        estimate = estimate_tokens(body, max_tokens(payload)) if cfg.rate_limit else 0
        usage = self._usage(alias)
        model = payload["model"]
        recorder = current_recorder()
        gate = self.gate
        server = self.server
        started = time.monotonic()
        attempts = retries = limited = 0
        free_row_holds()  # this row's earlier answers (a tool loop's) must not hold this request back
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
                # On a Ray worker its slot stays taken until the driver stored the answer.
                gate.release(reservation, tokens=usage.count_tokens(data), ok=True, held=hold_answer(gate.unhold))
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
        elif status == 400 and says_model_missing(detail):
            error_class = ErrorClass.NOT_FOUND
            hint = "check the model name"
        elif status == 429:
            error_class = ErrorClass.RATE_LIMITED
            retry_after = parse_retry_after(headers.get("Retry-After"))
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
