"""``llm-structured``: a JSON object per row, asked for with a JSON schema and validated
against it (``jsonschema``), asked again when a reply does not parse or validate."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from genwire.errors import ErrorClass, ModelError
from genwire.generators.base import Generator
from genwire.generators.builtin.cache_peek import Prompt, Step, gather_cache_first, gather_peeked
from genwire.generators.builtin.common import CompiledPrompt, PromptParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.providers.request_context import cached_rows
from genwire.providers.structured import checked_schema, parse_reply, response_format


class LLMStructuredParams(PromptParams):
    """``prompt`` and optional ``system`` (templates), ``schema`` (a JSON Schema object),
    ``max_attempts``, and any model params."""

    json_schema: dict[str, Any] = Field(alias="schema")
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3

    @field_validator("json_schema")
    @classmethod
    def _check_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        checked_schema(value)
        if value.get("type") != "object":
            raise ValueError("the schema must describe an object (type: object): the cell is that object")
        return value

    @model_validator(mode="after")
    def _no_response_format(self) -> LLMStructuredParams:
        if "response_format" in self.model_params:
            raise ValueError("response_format is set by llm-structured from schema; remove it")
        return self


class LLMStructured(Generator[LLMStructuredParams]):
    metadata = GeneratorMetadata(
        name="llm-structured",
        description="Render a Jinja2 prompt over each row and return the chat model's JSON "
        "object, validated against a JSON Schema (asked again when it does not validate).",
        required_resources={"model": ResourceKind.CHAT_MODEL},
    )
    params_model = LLMStructuredParams

    def __init__(self, *, column: str, params: LLMStructuredParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._templates = CompiledPrompt(params, column)
        # What every request of this column carries besides its messages.
        self._params_with_format = {
            **params.model_params,
            "response_format": response_format(column, params.json_schema),
        }

    @classmethod
    def reads(cls, params: LLMStructuredParams) -> set[str]:
        return params.reads()

    @classmethod
    def request_shape(cls, params: LLMStructuredParams, *, slot: str, column: str) -> dict[str, Any] | None:
        return {
            **params.model_params,
            "system": params.system,
            "response_format": response_format(column, params.json_schema),
        }

    def _first(self, row: dict[str, Any]) -> Step:
        """A row without its index: asked, never cached."""
        prompt, system = self._templates.render(row)
        return None, self._ask(prompt, system, ())

    def _served(self, text: str, prompt: Prompt, index: int) -> Step:
        value, problem = parse_reply(text, self.params.json_schema)
        if problem is None:
            return value, None
        # A cached reply that fails the schema (stored by an older genwire, or damaged)
        # was this row's first attempt: the next ones say what was wrong.
        return None, self._ask(prompt[0], prompt[1], (index,), problem)

    def _ask_row(self, prompt: Prompt, index: int) -> Awaitable[Any]:
        return self._ask(prompt[0], prompt[1], (index,))

    async def _ask(self, prompt: str, system: str | None, cache_rows: Sequence[int], problem: str | None = None) -> Any:
        """Ask until a reply matches the schema, at most ``max_attempts`` in all;
        ``problem``: the first attempt's (a cached reply) when it was already made."""
        schema = self.params.json_schema
        attempts = self.params.max_attempts if problem is None else self.params.max_attempts - 1
        for _ in range(attempts):
            ask = prompt if problem is None else self._told(prompt, problem)
            with cached_rows(cache_rows) as asked:
                text = await self.resources.model.complete(ask, system=system, **self._params_with_format)
                value, problem_or_none = parse_reply(text if isinstance(text, str) else "", schema)
                if problem_or_none is not None:
                    asked.discard()  # a reply that failed its schema is never cached
            if problem_or_none is None:
                return value
            problem = problem_or_none
        raise ModelError(
            ErrorClass.BAD_RESPONSE,
            f"llm-structured column {self.column!r}: no reply matched the schema in "
            f"{self.params.max_attempts} attempts; last: {problem}",
            attempts=self.params.max_attempts,
        )

    @staticmethod
    def _told(prompt: str, problem: str) -> str:
        # The error goes back to the model: most models fix their reply when told what is wrong.
        return (
            f"{prompt}\n\nYour previous reply was rejected: {problem}\n"
            "Reply with only a JSON object that matches the schema."
        )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any | RowFailure]:
        """Without the rows' indices: nothing is cached (two rows must never share a key)."""
        return await gather_cache_first(rows, self._first)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any | RowFailure]:
        return await gather_peeked(
            self.resources.model,
            rows,
            indices,
            self._templates.render_many,
            self._params_with_format,
            self._ask_row,
            self._served,
        )
