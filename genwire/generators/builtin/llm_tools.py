"""``llm-tools``: a chat model that may call the tools of one MCP server (SPEC §18).

Per row: the rendered prompt (and system prompt) and the allowed tools as OpenAI ``tools``
go to the model; each ``tool_calls`` turn is answered by calling the tools, until the model
answers in text or ``max_turns`` model turns have been spent. A tool that reports an error
(or a call the model got wrong: an unknown tool, arguments that are not JSON) goes back to
the model as that tool's result; a failed call (the server unreachable, a timeout, a
protocol error) fails the row with its class. The model turns go through the response
cache like any model call; tool results never do (tools may have effects).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator

from genwire.errors import ErrorClass, ModelError, WiringError
from genwire.generators.base import Generator
from genwire.generators.builtin.common import CompiledPrompt, PromptParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import gather_rows
from genwire.generators.resources import Resources
from genwire.providers.request_context import cached_rows
from genwire.providers.tools.handle import ListedTools

RESULT_CHARS_TO_MODEL = 100_000  # a longer tool result is cut before it goes back to the model


class LLMToolsParams(PromptParams):
    """``prompt``, optional ``system``, ``max_turns`` (model turns per row) and
    ``trace_column``; any other key is a model param."""

    max_turns: int = Field(6, ge=1, le=64)
    trace_column: str | None = None

    @field_validator("trace_column")
    @classmethod
    def _trace_key(cls, value: str | None) -> str | None:
        if value is not None and (not value.isidentifier() or value == "answer"):
            raise ValueError(f"got {value!r}: trace_column is a name (letters, digits, '_') other than 'answer'")
        return value


class LLMTools(Generator[LLMToolsParams]):
    metadata = GeneratorMetadata(
        name="llm-tools",
        description="Answer a Jinja2 prompt with a chat model that may call the allowed tools of an MCP "
        "server (OpenAI tool calling); the final answer is the cell.",
        required_resources={"model": ResourceKind.CHAT_MODEL, "tools": ResourceKind.TOOLS},
    )
    params_model = LLMToolsParams

    def __init__(self, *, column: str, params: LLMToolsParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._templates = CompiledPrompt(params, column)
        self._model_params = params.model_params

    @classmethod
    def reads(cls, params: LLMToolsParams) -> set[str]:
        return params.reads()

    @classmethod
    def request_shape(cls, params: LLMToolsParams, *, slot: str, column: str) -> dict[str, Any] | None:
        # The server's tools are known once it runs: the pre-flight lists it, then offers
        # the model exactly the allowed tools and schemas the run will send.
        if slot != "model":
            return None
        return {**params.model_params, "system": params.system, "tools": ListedTools("tools")}

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._rows(rows, [None] * len(rows))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._rows(rows, list(indices))

    async def _rows(self, rows: list[dict[str, Any]], indices: Sequence[int | None]) -> list[Any]:
        model = self.resources.model
        if not hasattr(model, "converse"):
            raise WiringError(
                f"column {self.column!r} (generator 'llm-tools'): model {getattr(model, 'alias', '?')!r} cannot call "
                "tools (its handle has no converse()); bind an OpenAI-compatible model (provider kind: openai)"
            )
        specs = await self.resources.tools.list()
        offered = [spec.openai() for spec in specs]
        names = {spec.name for spec in specs}
        return await gather_rows(
            self._row(row, index, offered, names) for row, index in zip(rows, indices, strict=True)
        )

    async def _row(self, row: dict[str, Any], index: int | None, offered: list[Any], names: set[str]) -> Any:
        prompt, system = self._templates.render(row)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system is not None else []
        messages.append({"role": "user", "content": prompt})
        trace: list[dict[str, Any]] = []
        model, tools = self.resources.model, self.resources.tools
        with cached_rows(() if index is None else (index,)):
            for _ in range(self.params.max_turns):
                reply = await model.converse(messages, tools=offered, **self._model_params)
                calls = reply.get("tool_calls") or []
                if not calls:
                    answer = reply.get("content")
                    if not isinstance(answer, str) or not answer.strip():
                        raise ModelError(ErrorClass.BAD_RESPONSE, "the model's final answer is empty")
                    return self._cell(answer, trace)
                messages.append(reply)
                for call in calls:
                    name, text, size = call["function"]["name"], "", 0
                    arguments, problem = _arguments(call["function"]["arguments"])
                    entry: dict[str, Any] = {"tool": name, "arguments": arguments if problem is None else None}
                    if problem is not None:
                        text, error = f"error: {problem}", True
                    elif name not in names:
                        text, error = f"error: no tool named {name!r} (tools: {', '.join(sorted(names))})", True
                    else:
                        result = await tools.call(name, arguments)
                        size, error = len(result.text), result.is_error
                        text = f"error: {result.text}" if error else result.text
                    trace.append({**entry, "result_chars": size, "is_error": error})
                    content = text[:RESULT_CHARS_TO_MODEL]
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        raise ModelError(
            ErrorClass.BAD_RESPONSE,
            f"no final answer within max_turns={self.params.max_turns} model turns ({len(trace)} tool calls)",
        )

    def _cell(self, answer: str, trace: list[dict[str, Any]]) -> Any:
        key = self.params.trace_column
        return answer if key is None else {"answer": answer, key: trace}


def _arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg})"
    if not isinstance(value, dict):
        return {}, "the arguments are not a JSON object"
    return value, None
