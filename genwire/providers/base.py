"""What generators see of models and datasets: small protocols, implemented by real
providers (openai, local), by datasets, and by the fakes in genwire.testing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass
class Attempts:
    """HTTP/inference attempts made inside the current task, and the last 429 while its
    request waits it out (the pre-flight reads both, without every model returning them)."""

    count: int = 0
    rate_limited: str | None = None


attempt_log: ContextVar[Attempts | None] = ContextVar("genwire_attempts", default=None)


def count_attempt(n: int = 1) -> None:
    log = attempt_log.get()
    if log is not None:
        log.count += n


def note_rate_limited(message: str | None) -> None:
    """A request is waiting out a 429 (``message``), or was answered (None)."""
    log = attempt_log.get()
    if log is not None:
        log.rate_limited = message


def chat_messages(prompt: str, system: str | None) -> list[dict[str, str]]:
    """The OpenAI message list of one call: an optional system message, then the prompt."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": prompt})
    return messages


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
