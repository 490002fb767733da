"""The ``local`` provider and the handles plugins hold (alias, model, params, a route token).

One module (~410 lines) on purpose: the provider builds its handles and a handle resolves its
route to the provider's class, so apart they would import each other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from genwire.config.schema import LocalProviderConfig, ModelConfig
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.base import chat_messages, count_attempt
from genwire.providers.budget.meter import CostMeter
from genwire.providers.local.catalog import Kind, LocalModelSpec, canonical_model_name, resolve_model
from genwire.providers.local.runtime import (
    _CHAT_DEFAULT_MAX_TOKENS,
    MiniLMRuntime,
    SmolLMRuntime,
    _get_executor,
    load_model,
)
from genwire.providers.metrics import note_gave_up, timed_attempt
from genwire.providers.request_context import (
    are_vectors,
    cache_slot,
    endpoint_id,
    is_text,
    peek_answer,
    vectors_problem,
)
from genwire.providers.response_cache.keys import HOLE
from genwire.providers.routes import Route, open_route, resolve_route
from genwire.providers.usage import Concurrency, ModelUsage, reported_tokens, requests_of
from genwire.providers.vectors import embedding_answer

T = TypeVar("T")
A = TypeVar("A")

# The response cache's endpoint identity of every local provider: the weights are the
# installed package's, whatever the provider's name.
LOCAL_ENDPOINT = endpoint_id("local", "")


# --- provider ----------------------------------------------------------------------------


class LocalProvider:
    """Builds the local chat and embedding models; bounds this provider's in-flight calls."""

    def __init__(self, name: str, config: LocalProviderConfig) -> None:
        self.name = name
        self.config = config
        self.usage: dict[str, ModelUsage] = {}  # inference calls and tokens, per model alias
        self.in_flight = 0  # calls holding a slot: running, or waiting for the CPU gate
        self.peak_in_flight = 0
        self.waiting = 0  # calls queued for a slot
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._routes: list[Route[LocalProvider]] = []  # keeps the handles' routes alive
        self.meter: CostMeter | None = None  # the run's, while a run meters its models (engine.money.costs)

    def __repr__(self) -> str:
        return f"LocalProvider(name={self.name!r})"

    def chat_model(self, alias: str, config: ModelConfig) -> LocalChatModel:
        return LocalChatModel(open_route(self, alias, config.model, self._routes), alias, config)

    def embedding_model(self, alias: str, config: ModelConfig) -> LocalEmbeddingModel:
        return LocalEmbeddingModel(open_route(self, alias, config.model, self._routes), alias, config)

    async def aclose(self) -> None:
        """Idempotent. Weights stay loaded (they are shared process-wide); a later call
        simply creates a new semaphore."""
        self._semaphore, self._loop = None, None

    def _get_semaphore(self) -> asyncio.Semaphore:
        # An asyncio.Semaphore binds to the loop it first waits on; a provider reused from
        # another loop (asyncio.run twice, per-test loops) gets a fresh one.
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
            self._loop = loop
        return self._semaphore

    def count(self, alias: str) -> None:
        """One inference call for ``alias`` (also one that fails before it runs)."""
        count_attempt()
        self.usage_of(alias).requests += 1

    def concurrency(self) -> Concurrency:
        cap = self.config.max_concurrency
        return Concurrency(self.in_flight, cap, cap, self.peak_in_flight, waiting=self.waiting)

    def usage_of(self, alias: str) -> ModelUsage:
        return self.usage.setdefault(alias, ModelUsage())

    @property
    def requests(self) -> dict[str, int]:
        """Inference calls, per model alias."""
        return requests_of(self.usage)

    async def run(
        self,
        alias: str,
        spec: LocalModelSpec,
        call: Callable[[object], T],
        paid: Callable[[T], tuple[int, int]] = lambda _: (0, 0),
        *,
        chars: int = 0,
        max_tokens: int = 0,
    ) -> T:
        """Run ``call(runtime)`` in a worker thread under the concurrency bound, loading
        the model first if needed. The caller has counted the call (``count``).

        Accounted as an HTTP model's request is (SPEC §16, §19): the run's cost meter holds
        its worst case (``chars`` of request, ``max_tokens`` of answer) and settles it at
        the ``paid`` (input, output) tokens, which the ledger and the estimate read; the
        run's request recorder sees it in flight and its latency. A call that raised is
        released, as a failed HTTP request is."""
        meter = self.meter
        hold = await meter.reserve(alias, chars, max_tokens, output=spec.kind == "chat") if meter else None
        try:
            result, latency_s = await self._run(alias, spec, call)
        except BaseException as exc:
            if meter is not None and hold is not None:
                meter.release(hold)
            if isinstance(exc, ModelError):
                note_gave_up(alias, exc.error_class.value)  # an embedded call is not retried
            raise
        tokens = paid(result)
        usage = self.usage_of(alias)
        usage.prompt_tokens += tokens[0]
        usage.completion_tokens += tokens[1]
        if meter is not None and hold is not None:
            meter.settle(hold, tokens, latency_s)
        return result

    async def _run(self, alias: str, spec: LocalModelSpec, call: Callable[[object], T]) -> tuple[T, float]:
        """``call``'s result and its latency (from the moment it held a slot)."""
        semaphore = self._get_semaphore()
        loop = asyncio.get_running_loop()
        self.waiting += 1
        try:
            await semaphore.acquire()
        finally:
            self.waiting -= 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

        def release() -> None:
            self.in_flight -= 1
            semaphore.release()

        def on_done(_: concurrent.futures.Future[T]) -> None:
            # Runs when the thread really finishes, even if the awaiting task was
            # cancelled (e.g. a pre-flight timeout): a cancelled call keeps its slot
            # until the CPU work ends, so the bound holds for threads, not just tasks.
            with contextlib.suppress(RuntimeError):  # loop closed: nothing to release
                loop.call_soon_threadsafe(release)

        started = time.monotonic()
        try:
            future = _get_executor().submit(lambda: call(load_model(spec)))
        except BaseException:
            release()
            raise
        future.add_done_callback(on_done)
        try:
            result = await timed_attempt(alias, asyncio.wrap_future(future))
        except ModelError as exc:
            if exc.target is not None:
                raise
            # Load failures are raised without knowing the alias; name it here.
            raise ModelError(exc.error_class, exc.message, target=alias) from exc
        return result, time.monotonic() - started


# --- models ------------------------------------------------------------------------------


class _LocalHandle:
    """What a plugin holds: alias, model, params and an opaque route token; the provider
    (and through it every other alias) is not reachable from it."""

    __slots__ = ("_kind", "_params", "_token", "alias", "model")
    _kind: Kind
    _params: Mapping[str, Any]
    _token: int
    alias: str
    model: str

    def __init__(self, token: int, alias: str, config: ModelConfig, kind: Kind) -> None:
        object.__setattr__(self, "_token", token)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "alias", alias)
        object.__setattr__(self, "model", config.model)
        object.__setattr__(self, "_params", MappingProxyType(dict(config.params)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alias={self.alias!r}, model={self.model!r})"

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    @property
    def spec(self) -> LocalModelSpec:
        """The catalog entry; raises ``ModelError(not_found)`` for an unknown model."""
        return resolve_model(self.model, self._kind, target=self.alias)

    async def load(self) -> None:
        """Load the weights now (otherwise the first call does)."""
        spec = self.spec
        await asyncio.to_thread(load_model, spec)

    async def _run(
        self, call: Callable[[object], T], paid: Callable[[T], tuple[int, int]], *, chars: int, max_tokens: int = 0
    ) -> T:
        route = resolve_route(self._token, LocalProvider)
        route.provider.count(route.alias)
        spec = self.spec
        return await route.provider.run(route.alias, spec, call, paid, chars=chars, max_tokens=max_tokens)

    def _key_body(self, request: dict[str, Any], part: str) -> dict[str, Any]:
        """The request as the response cache keys it: by the canonical model name, with
        ``HOLE`` in place of the request's ``part`` (which the key template fills)."""
        return {"model": canonical_model_name(self.model), "kind": self._kind, "body": {**request, part: HOLE}}

    async def _cached(
        self,
        request: dict[str, Any],
        part: str,
        ask: Callable[[], Any],
        usable: Callable[[Any], bool],
        tokens: Callable[[A], tuple[int, int]],
    ) -> A:
        """``await ask()``, or its answer from the response cache (keyed by the canonical
        model name and ``request``, whose ``part`` varies from request to request); a hit
        runs no inference and takes no slot."""
        slot = cache_slot(LOCAL_ENDPOINT, self._key_body(request, part), request[part])
        if slot is not None:
            found = slot.get(_usage_of(self._token), usable)
            if found is not None:
                cached: A = found.answer
                return cached
        answer: A = await ask()
        if slot is not None:
            slot.keep(answer, tokens(answer))
        return answer


def _usage_of(token: int) -> ModelUsage:
    """A handle's usage counters (a function: nothing on a handle returns them)."""
    route = resolve_route(token, LocalProvider)
    return route.provider.usage_of(route.alias)


class LocalEmbeddingModel(_LocalHandle):
    """An embedding alias served by a ``LocalProvider``."""

    __slots__ = ("_dimensions",)
    _dimensions: int | None

    def __init__(self, token: int, alias: str, config: ModelConfig) -> None:
        super().__init__(token, alias, config, "embedding")
        object.__setattr__(self, "_dimensions", config.dimensions)

    @property
    def dimensions(self) -> int | None:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):  # a str is a Sequence[str] of characters: a caller bug
            raise TypeError("embed() takes a sequence of texts, not a single str")
        inputs = list(texts)
        if not inputs:
            return []
        for text in inputs:
            if not isinstance(text, str):
                raise TypeError(f"embed() takes texts (str), got {type(text).__name__}")
        alias = self.alias

        def call(runtime: object) -> tuple[list[list[float]], int]:
            assert isinstance(runtime, MiniLMRuntime)
            try:
                return runtime.embed_counted(inputs)
            except Exception as exc:
                raise ModelError(
                    ErrorClass.SERVER_ERROR,
                    f"onnxruntime failed ({exception_text(exc)})",
                    target=alias,
                ) from exc

        paid: list[tuple[int, int]] = []

        async def ask() -> list[list[float]]:
            vectors, tokens = await self._run(call, lambda answer: (answer[1], 0), chars=sum(map(len, inputs)))
            paid.append((tokens, 0))
            problem = vectors_problem(vectors, len(inputs), self._dimensions)
            if problem is not None:  # the one check every embedding answer passes before it is used or cached
                raise ModelError(ErrorClass.BAD_RESPONSE, f"embedding answer {problem}", target=alias)
            return vectors

        count = len(inputs)
        answer: Any = await self._cached(
            {"input": inputs},
            "input",
            ask,
            lambda answer: are_vectors(answer, count, self._dimensions),
            lambda _: paid[0],
        )
        return embedding_answer(answer)  # a cache hit is a matrix (providers.vectors)


_ERROR_CLASSES = {401: ErrorClass.AUTH, 403: ErrorClass.AUTH, 404: ErrorClass.NOT_FOUND}


class LocalChatModel(_LocalHandle):
    """A chat alias served by a ``LocalProvider``.

    Config ``params`` are defaults and call ``params`` win; they go to llama.cpp's
    OpenAI-style handler as they are (``max_tokens``, ``temperature``, ``seed``,
    ``top_p``, ``stop``, ...). ``max_tokens`` defaults to 128.
    """

    __slots__ = ()

    def __init__(self, token: int, alias: str, config: ModelConfig) -> None:
        super().__init__(token, alias, config, "chat")

    def build_request(self, prompt: str, system: str | None, params: Mapping[str, Any]) -> dict[str, Any]:
        request = {**self._params, **params}
        if "max_completion_tokens" in request:  # newer OpenAI spelling
            request.setdefault("max_tokens", request.pop("max_completion_tokens"))
        request.setdefault("max_tokens", _CHAT_DEFAULT_MAX_TOKENS)
        # Ours, whatever params say: streaming would return nothing here.
        request.update(messages=chat_messages(prompt, system), stream=False)
        return request

    def _cached_completion(
        self, rows: tuple[int, ...], prompt: str, system: str | None, params: Mapping[str, Any]
    ) -> str | None:
        """``complete``'s answer for ``rows`` if the response cache holds it (a hit), else
        None: the built-in generators' synchronous peek (``peek_completion``)."""
        request = self.build_request(prompt, system, params)
        key_body = self._key_body(request, "messages")
        text: str | None = peek_answer(
            LOCAL_ENDPOINT, key_body, request["messages"], rows, _usage_of(self._token), is_text
        )
        return text

    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str:
        request = self.build_request(prompt, system, params)
        paid: list[tuple[int, int]] = []

        alias = self.alias

        async def ask() -> str:
            response = await self._run(
                lambda rt: _call_chat(rt, request, alias),
                lambda answer: reported_tokens(answer) or (0, 0),
                chars=len(json.dumps(request["messages"], separators=(",", ":"))),
                max_tokens=request["max_tokens"] if type(request["max_tokens"]) is int else 0,
            )
            paid.append(reported_tokens(response) or (0, 0))
            return self._content(response)

        return await self._cached(request, "messages", ask, is_text, lambda _: paid[0])

    def _content(self, response: Any) -> str:
        def error(error_class: ErrorClass, why: str) -> ModelError:
            return ModelError(error_class, why, target=self.alias)

        if not isinstance(response, dict):
            raise error(ErrorClass.BAD_RESPONSE, "chat response is not an object")
        failure = _rejection(response, self.alias)
        if failure is not None:
            raise failure
        try:
            content = response["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise error(ErrorClass.BAD_RESPONSE, "chat response has no choices[0].message") from None
        if not isinstance(content, str):
            raise error(ErrorClass.BAD_RESPONSE, "chat response has no text content")
        return content.strip()


def _rejection(response: dict[str, Any], alias: str) -> ModelError | None:
    """llama.cpp's ``{"error": {...}}`` answer as the ModelError it is, classified; else None."""
    failure = response.get("error")
    if failure is None:
        return None
    code = failure.get("code") if isinstance(failure, dict) else None
    text = failure.get("message") if isinstance(failure, dict) else None
    status = code if isinstance(code, int) else 500
    error_class = _ERROR_CLASSES.get(status)
    if error_class is None:
        error_class = ErrorClass.SERVER_ERROR if status >= 500 else ErrorClass.BAD_RESPONSE
    return ModelError(error_class, f"llama.cpp rejected the request ({status}): {text or failure}", target=alias)


def _call_chat(runtime: object, request: dict[str, Any], alias: str) -> Any:
    """The chat answer; a rejection is raised (in the worker thread) so that the run's
    accounting sees a failed call, not a paid answer."""
    assert isinstance(runtime, SmolLMRuntime)
    try:
        response = runtime.complete(request)
    except (ValueError, TypeError) as exc:  # how the binding rejects malformed requests
        response = {"error": {"code": 400, "message": str(exc)}}
    except Exception as exc:
        response = {"error": {"code": 500, "message": f"{exception_text(exc)}"}}
    failure = _rejection(response, alias) if isinstance(response, dict) else None
    if failure is not None:
        raise failure
    return response
