"""``llm-text``: renders a Jinja2 prompt over each row and asks the chat model for text."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from genwire.generators.base import Generator
from genwire.generators.builtin.common import compile_template, render_row, template_variables
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure, gather_rows
from genwire.generators.resources import Resources


class LLMTextParams(BaseModel):
    """``prompt`` and optional ``system`` are templates; every other key is passed to the
    chat model as a parameter (``temperature``, ``max_tokens``, ...)."""

    model_config = ConfigDict(extra="allow")

    prompt: str
    system: str | None = None

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("prompt must be a non-empty template")
        compile_template(value, "prompt")
        return value

    @field_validator("system")
    @classmethod
    def _check_system(cls, value: str | None) -> str | None:
        if value is not None:
            compile_template(value, "system")
        return value

    @model_validator(mode="after")
    def _check_extra(self) -> LLMTextParams:
        # Extra keys are model params, so a typo of a real field would otherwise be sent
        # to the model silently (and the template it held ignored).
        for key in self.model_params:
            close = difflib.get_close_matches(key, ["prompt", "system"], n=1, cutoff=0.75)
            if close:
                raise ValueError(f"unknown key {key!r}; did you mean {close[0]!r}?")
        return self

    @property
    def model_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


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
        self._prompt = compile_template(params.prompt, "prompt")
        self._system = compile_template(params.system, "system") if params.system is not None else None
        self._model_params = params.model_params

    @classmethod
    def reads(cls, params: LLMTextParams) -> set[str]:
        names = template_variables(params.prompt)
        if params.system is not None:
            names |= template_variables(params.system)
        return names

    @classmethod
    def request_shape(cls, params: LLMTextParams, *, slot: str, column: str) -> dict[str, Any] | None:
        return {**params.model_params, "system": params.system}

    async def _one(self, row: dict[str, Any]) -> str:
        prompt = render_row(self._prompt, "prompt", row, self.column)
        system = render_row(self._system, "system", row, self.column) if self._system is not None else None
        text = await self.resources.model.complete(prompt, system=system, **self._model_params)
        if not isinstance(text, str) or not text.strip():
            raise ValueError("model returned empty text")
        return text

    async def generate(self, rows: list[dict[str, Any]]) -> list[str | RowFailure]:
        # All rows at once: the provider, not the generator, enforces the concurrency cap.
        return await gather_rows(self._one(row) for row in rows)
