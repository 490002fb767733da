"""What generators see of models and datasets: small protocols, implemented by real
providers (openai, local), by datasets, and by the fakes in genwire.testing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

# Counts HTTP/inference attempts made inside the current task (the pre-flight reads it
# to report "attempts" without every model having to return it).
attempt_counter: ContextVar[list[int] | None] = ContextVar("genwire_attempts", default=None)


def count_attempt() -> None:
    counter = attempt_counter.get()
    if counter is not None:
        counter[0] += 1


@runtime_checkable
class ChatModel(Protocol):
    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str: ...


@runtime_checkable
class EmbeddingModel(Protocol):
    @property
    def dimensions(self) -> int | None: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class Dataset(Protocol):
    @property
    def columns(self) -> list[str]: ...

    def __len__(self) -> int: ...

    def rows(self) -> AsyncIterator[dict[str, Any]]: ...

    def sample(self, n: int, seed: int) -> list[dict[str, Any]]: ...


def endpoint_key(resource: object) -> Hashable:
    """Identity of the endpoint behind a dataset or an override: equal keys are probed once.

    Datasets define ``endpoint_key``; anything else (a fake, an override) is its own
    endpoint. Configured models are identified by the container from their config.
    """
    key = getattr(resource, "endpoint_key", None)
    return key if key is not None else ("object", id(resource))


class Closeable(Protocol):
    async def aclose(self) -> None: ...
