"""``llm-text``: renders a Jinja2 prompt over each row and asks the chat model for text."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

from genwire.generators.base import Generator
from genwire.generators.builtin.cache_peek import Prompt, Step, gather_cache_first, gather_peeked
from genwire.generators.builtin.common import CompiledPrompt, PromptParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
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

    def _first(self, row: dict[str, Any]) -> Step:
        """A row without its index: asked, never cached."""
        prompt, system = self._templates.render(row)
        return None, self._ask(prompt, system, ())

    async def _ask(self, prompt: str, system: str | None, cache_rows: Sequence[int]) -> str:
        with cached_rows(cache_rows):  # an empty answer raises inside: it is never cached
            text = await self.resources.model.complete(prompt, system=system, **self._model_params)
            if not isinstance(text, str) or not text.strip():
                raise ValueError("model returned empty text")
        return text

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        """Without the rows' indices: nothing is cached (two rows must never share a key)."""
        return await gather_cache_first(rows, self._first)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        # Cached rows are served at once (one bulk peek); the rest are asked all together:
        # the provider, not the generator, enforces the concurrency cap.
        return await gather_peeked(
            self.resources.model, rows, indices, self._templates.render_many, self._model_params, self._ask_row
        )

    def _ask_row(self, prompt: Prompt, index: int) -> Awaitable[str]:
        return self._ask(prompt[0], prompt[1], (index,))
