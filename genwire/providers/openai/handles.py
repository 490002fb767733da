"""What a plugin holds of an OpenAI-compatible model: ``OpenAIChatModel`` and
``OpenAIEmbeddingModel``, read-only handles with an opaque route token (no provider, session
or key reachable from them). A call is answered from the response cache, by batch mode, or
sent through the endpoint's ``post``; the answer is checked before it is kept or returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from genwire.config.schema import ModelConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers.base import chat_messages, count_attempt
from genwire.providers.batch.format import uncached_base
from genwire.providers.budget.meter import metered_batch_call
from genwire.providers.openai.endpoint import OpenAIEndpoint
from genwire.providers.packed_floats import unpacked_bytes
from genwire.providers.request_context import (
    admit_request,
    are_vectors,
    cache_slot,
    cache_slots_per_row,
    current_column,
    is_text,
    may_hold,
    peek_in,
    peek_many,
    peek_scope,
    vectors_problem,
)
from genwire.providers.response_cache.keys import HOLE
from genwire.providers.routes import Route, TokenHandle, resolve_route
from genwire.providers.tool_calls import assistant_message, is_assistant_message
from genwire.providers.tracing import trace_cache_hit, tracer
from genwire.providers.usage import reported_tokens, token_shares
from genwire.providers.vectors import embedding_answer

if TYPE_CHECKING:
    from genwire.providers.vectors import Matrix

__all__ = ["CHAT", "OpenAIChatModel", "OpenAIEmbeddingModel"]

T = TypeVar("T")

CHAT = "/chat/completions"
_NUMBER: frozenset[type] = frozenset({float, int})


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
        data, attempts = await _sent(route, path, body, slot.key if slot is not None else None)
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
        route = resolve_route(self._token, OpenAIEndpoint)
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
        route = resolve_route(self._token, OpenAIEndpoint)
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
        # base64 unless the config's params say otherwise (as OpenAI's own client does): a
        # vector's bytes are half its JSON numbers' and decode in C (64 x 384: 3 ms vs 11 ms)
        payload = {"encoding_format": "base64", **self._params, "input": inputs}
        count = len(inputs)
        by_row = await self._embed_by_row(payload, inputs)
        if by_row is not None:
            return embedding_answer(by_row)
        answer = await self._ask(
            "/embeddings",
            payload,
            "input",
            lambda data, attempts: self._vectors(data, count, attempts),
            lambda answer: are_vectors(answer, count, self._dimensions),
        )
        return embedding_answer(answer)

    async def _embed_by_row(self, payload: dict[str, Any], inputs: list[str]) -> Matrix | None:
        """The vectors of a request made for one row per text (``cached_rows`` with a row
        per text, as the built-in embedding gate and column say), each cached under its own
        row (``cache_slots_per_row``): only the texts whose rows have no answer stored are
        sent, in one request. None when the request is not cached that way."""
        route, body, request = _routed(self._token, "/embeddings", payload, "input")
        provider = route.provider
        slots = cache_slots_per_row(route.pool or provider.cache_endpoint, request, [[text] for text in inputs])
        if slots is None:
            return None
        import numpy as np

        usage = provider._usage(route.alias)
        found = [slot.get(usage, self._usable_alone) for slot in slots]
        lengths = {np.shape(answer.answer)[-1] for answer in found if answer is not None}
        if len(lengths) > 1:  # stored under another length (a model that changed): all asked again
            found = [None] * len(slots)
        missing = [i for i, answer in enumerate(found) if answer is None]
        vectors: list[Any] = [None if answer is None else answer.answer for answer in found]
        if missing:
            asked = {**body, "input": [inputs[i] for i in missing]}
            data, attempts = await _sent(route, "/embeddings", asked, None)
            fresh = self._vectors(data, len(missing), attempts)
            if lengths and fresh.shape[1] not in lengths:
                # The stored rows' vectors have another length (the model changed, its
                # `dimensions` unset): every row asked again, and kept in their place.
                missing = list(range(len(slots)))
                data, attempts = await _sent(route, "/embeddings", {**body, "input": inputs}, None)
                fresh = self._vectors(data, len(missing), attempts)
            shares = token_shares(reported_tokens(data), len(missing))
            for j, i in enumerate(missing):
                vectors[i] = fresh[j : j + 1]
                slots[i].keep(vectors[i], shares[j])
        for i in range(len(slots)):
            if found[i] is not None:
                trace_cache_hit(route.alias, route.model, "/embeddings")
        return np.concatenate([np.asarray(v, dtype=np.float64).reshape(1, -1) for v in vectors])

    def _usable_alone(self, answer: Any) -> bool:
        return are_vectors(answer, 1, self._dimensions)

    def _vectors(self, data: Any, count: int, attempts: int) -> Matrix:
        """The answer's vectors as one checked float64 matrix (``providers.vectors``)."""

        def bad(why: str) -> ModelError:
            return ModelError(
                ErrorClass.BAD_RESPONSE,
                f"embedding response {why}",
                target=self.alias,
                attempts=attempts,
            )

        import numpy as np

        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise bad("has no data list")
        if len(items) != count:
            raise bad(f"has {len(items)} vectors for {count} inputs")
        out: list[bytes | list[float] | None] = [None] * count
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise bad(f"data[{position}] is not an object")
            index = item.get("index", position)
            if type(index) is not int or not 0 <= index < count or out[index] is not None:
                raise bad(f"data[{position}].index is missing, out of range or repeated")
            vector = item.get("embedding")
            if isinstance(vector, str):  # encoding_format: base64 of float32, OpenAI's format
                raw = unpacked_bytes(vector, 4)
                if raw is None:
                    raise bad(f"data[{position}].embedding is not base64 of float32 numbers")
                out[index] = raw
                continue
            if not isinstance(vector, list):
                raise bad(f"data[{position}].embedding is not a list of numbers")
            # Exact type checks: bool is an int subclass but never a vector component.
            if not set(map(type, vector)) <= _NUMBER:
                raise bad(f"data[{position}].embedding holds a value that is not a number")
            out[index] = vector
        given = [v for v in out if v is not None]
        lengths = [len(v) // 4 if isinstance(v, bytes) else len(v) for v in given]
        expected = self._dimensions if self._dimensions is not None else lengths[0]
        if lengths.count(expected) != count:  # what vectors_problem says of such lists
            position = next(i for i, length in enumerate(lengths) if length != expected)
            against = "dimensions is set to" if self._dimensions is not None else "data[0] has"
            raise bad(f"data[{position}].embedding has {lengths[position]} dimensions, but {against} {expected}")
        if all(isinstance(v, bytes) for v in given):
            matrix = np.frombuffer(b"".join(given), dtype="<f4").reshape(count, -1).astype(np.float64)  # type: ignore[arg-type]
        else:
            try:  # JSON numbers (encoding_format: float)
                matrix = np.array(
                    [np.frombuffer(v, dtype="<f4") if isinstance(v, bytes) else v for v in given], dtype=np.float64
                )
            except OverflowError:  # an integer no float holds
                raise bad("holds a number too large for a float") from None
        problem = vectors_problem(matrix, count, self._dimensions)
        if problem is not None:  # checked before the cache keeps it or a generator uses it
            raise bad(problem)
        return matrix


# --- helpers -----------------------------------------------------------------------------


async def _sent(route: Route[OpenAIEndpoint], path: str, body: dict[str, Any], key: str | None) -> tuple[Any, int]:
    """(response, attempts) of ``body`` sent to the route: in a batch job in batch mode
    (its line named by the cache ``key``, or by the body when it is not cached), else by
    the endpoint's ``post``."""
    provider = route.provider
    batcher = provider.batcher
    if batcher is None:
        return await provider.post(route.alias, path, body, failover=route.pool is not None)
    admit_request()  # a run stopping on its failure rate puts no more lines in a round
    base = key if key is not None else uncached_base(provider.cache_endpoint, path, body, current_column())
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

    return await metered_batch_call(provider.meter, route.alias, path, body, ask)


def _routed(
    token: int, path: str, payload: dict[str, Any], part: str
) -> tuple[Route[OpenAIEndpoint], dict[str, Any], dict[str, Any]]:
    """A handle's request: its route, the body as sent and the request as the response
    cache keys it (``HOLE`` in place of the payload's ``part``, which the key template
    fills). A function, not a handle method: nothing on a handle returns its route."""
    route = resolve_route(token, OpenAIEndpoint)
    # The route's model, whatever the payload says: a handle sends only for its model.
    body = {**payload, "model": route.model}
    return route, body, {"path": path, "body": {**body, part: HOLE}}
