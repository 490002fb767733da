"""An endpoint pool's handles (SPEC §17): ``PooledChatModel`` / ``PooledEmbeddingModel`` hold a
route token to their ``EndpointPool`` (nothing else: no member, provider or key), and
``make_pool_model`` builds a pooled alias from its member providers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from genwire.config.schema import ModelConfig
from genwire.providers.pool.endpoints import EndpointPool, PoolMember
from genwire.providers.routes import Route, TokenHandle, open_route, resolve_route

__all__ = ["PooledChatModel", "PooledEmbeddingModel", "make_pool_model", "open_pool", "pool_identity"]


def open_pool(pool: EndpointPool, keep: list[Route[EndpointPool]]) -> int:
    return open_route(pool, pool.alias, "", keep)


class _PooledHandle(TokenHandle):
    __slots__ = ()


def _pool_of(token: int) -> EndpointPool:
    return resolve_route(token, EndpointPool).provider


class PooledChatModel(_PooledHandle):
    """A chat model alias served by an endpoint pool."""

    __slots__ = ()

    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str:
        answer: str = await _pool_of(self._token).call(lambda m: m.complete(prompt, system=system, **params))
        return answer

    async def converse(
        self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping[str, Any]] = (), **params: Any
    ) -> dict[str, Any]:
        """One turn of a tool-calling conversation (``llm-tools``), routed and failed over
        like ``complete``: each turn goes to whichever member the pool chooses."""
        reply: dict[str, Any] = await _pool_of(self._token).call(lambda m: m.converse(messages, tools=tools, **params))
        return reply

    def _cached_completion(
        self, rows: tuple[int, ...], prompt: str, system: str | None, params: Mapping[str, Any]
    ) -> str | None:
        """Members serving one model share its cache entries (one key), so the first
        primary's peek answers for them all; another model's answers are not this one's."""
        first = next(m for m in _pool_of(self._token).members if m.role == "primary")
        peek = getattr(type(first.handle), "_cached_completion", None)
        found: str | None = peek(first.handle, rows, prompt, system, params) if peek is not None else None
        return found

    def _cached_completions(
        self, rows: Sequence[int], prompts: Sequence[tuple[str, str | None] | None], params: Mapping[str, Any]
    ) -> list[str | None] | None:
        """``_cached_completion`` for a batch's rows at once, from the first primary's entries."""
        first = next(m for m in _pool_of(self._token).members if m.role == "primary")
        peek = getattr(type(first.handle), "_cached_completions", None)
        if peek is not None:
            found: list[str | None] | None = peek(first.handle, rows, prompts, params)
            return found
        return [
            None if p is None else self._cached_completion((r,), p[0], p[1], params)
            for r, p in zip(rows, prompts, strict=True)
        ]


class PooledEmbeddingModel(_PooledHandle):
    """An embedding model alias served by an endpoint pool."""

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
        vectors: list[list[float]] = await _pool_of(self._token).call(lambda m: m.embed(inputs))
        return vectors


# --- building a pool ----------------------------------------------------------------------


# Batch mode: a member's calls wait in its provider's batch files, not in HTTP slots, so
# the pool does not hold a round's rows back (a round holds every live row).
BATCH_CAPACITY = 1 << 30


def _capacity(client: Any) -> int:
    """A member's slots now: its provider's current (adaptive) concurrency."""
    return BATCH_CAPACITY if client.batcher is not None else int(client.gate.current)


def pool_identity(alias: str) -> str:
    """The response cache's endpoint identity of a pool: its members share entries (the
    request body still names each member's model, so different models never share)."""
    return f"pool:{alias}"


def make_pool_model(
    pools: dict[str, EndpointPool], keep: list[Route[EndpointPool]], alias: str, config: ModelConfig, *clients: Any
) -> PooledChatModel | PooledEmbeddingModel:
    """The handle of a pooled alias: one member model per endpoint (``clients`` in the
    order of ``config.endpoints``), each made by its provider with the pool's identity."""
    from genwire.providers.openai.provider import OpenAIProvider  # the loader admits only these in pools

    members = []
    for endpoint, client in zip(config.endpoint_list, clients, strict=True):
        if not isinstance(client, OpenAIProvider):
            raise TypeError(f"pool member {endpoint.name!r} of {alias!r} is not an OpenAI-compatible provider")
        member_config = config.for_endpoint(endpoint)
        make = client.chat_model if config.kind == "chat" else client.embedding_model
        handle = make(alias, member_config, pool=pool_identity(alias))
        capacity = functools.partial(_capacity, client)  # read at every routing decision
        members.append(PoolMember(endpoint.name, endpoint.provider, handle, endpoint.role, endpoint.weight, capacity))
    pool = pools[alias] = EndpointPool(alias, members)
    token = open_pool(pool, keep)
    if config.kind == "chat":
        return PooledChatModel(token, alias, config)
    return PooledEmbeddingModel(token, alias, config)
