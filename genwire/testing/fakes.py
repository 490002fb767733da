"""In-process fakes of chat and embedding models for tests and overrides."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from genwire.providers.base import count_attempt
from genwire.testing.vectors import hash_vector


class FakeChatModel:
    """Answers every prompt deterministically: ``reply(prompt)`` or a canned text."""

    def __init__(self, reply: str | Callable[[str], str] = "fake answer", *, name: str = "fake-chat") -> None:
        self._reply = reply
        self.model = name
        self.calls: list[dict[str, Any]] = []

    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str:
        count_attempt()
        self.calls.append({"prompt": prompt, "system": system, **params})
        return self._reply(prompt) if callable(self._reply) else self._reply

    async def converse(self, messages: Sequence[Any], *, tools: Sequence[Any] = (), **params: Any) -> dict[str, Any]:
        """One turn (``llm-tools``): the reply to the last user message, never a tool call."""
        prompt = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        return {"role": "assistant", "content": await self.complete(prompt, **params)}

    def __repr__(self) -> str:
        return f"FakeChatModel(model={self.model!r})"


class FakeEmbeddingModel:
    """Deterministic unit vectors of ``dimensions`` derived from a hash of each text."""

    def __init__(self, dimensions: int = 384, *, name: str = "fake-embedding") -> None:
        if dimensions <= 0:
            raise ValueError("dimensions must be positive")
        self._dimensions = dimensions
        self.model = name
        self.calls: list[list[str]] = []

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        count_attempt()
        self.calls.append(list(texts))
        return [hash_vector(t, self._dimensions) for t in texts]

    def __repr__(self) -> str:
        return f"FakeEmbeddingModel(dimensions={self._dimensions})"
