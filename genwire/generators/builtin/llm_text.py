"""``llm-text``: renders a Jinja2 prompt over each row and asks the chat model for text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genwire.generators.base import Generator
from genwire.generators.builtin.common import CompiledPrompt, PromptParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import gather_rows
from genwire.generators.resources import Resources
from genwire.providers.request_context import cached_rows


class LLMTextParams(PromptParams):
    """``prompt`` and optional ``system`` (templates) and any model params."""


class LLMText(Generator[LLMTextParams]):
    metadata = GeneratorMetadata(
        name="llm-text",
        description="Render a Jinja2 prompt (and optional system prompt) over each row "
        "and return the chat model's text.",
        required_resources={"model": ResourceKind.CHAT_MODEL},
    )
    params_model = LLMTextParams

    def __init__(self, *, column: str, params: LLMTextParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._templates = CompiledPrompt(params, column)
        self._model_params = params.model_params

    @classmethod
    def reads(cls, params: LLMTextParams) -> set[str]:
        return params.reads()

    @classmethod
    def request_shape(cls, params: LLMTextParams, *, slot: str, column: str) -> dict[str, Any] | None:
        return {**params.model_params, "system": params.system}

    async def _one(self, row: dict[str, Any], cache_rows: Sequence[int]) -> str:
        prompt, system = self._templates.render(row)
        with cached_rows(cache_rows):  # an empty answer raises inside: it is never cached
            text = await self.resources.model.complete(prompt, system=system, **self._model_params)
            if not isinstance(text, str) or not text.strip():
                raise ValueError("model returned empty text")
        return text

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        """Without the rows' indices: nothing is cached (two rows must never share a key)."""
        return await gather_rows(self._one(row, ()) for row in rows)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        # All rows at once: the provider, not the generator, enforces the concurrency cap.
        return await gather_rows(self._one(row, (index,)) for row, index in zip(rows, indices, strict=True))
