"""One probe per resource kind, typed against the protocols the run uses. The container
registers each kind's probe beside its factory (``container.graph.build_graph``), so the
pre-flight runner calls ``target.probe`` and never asks what kind a target is.

A probe raises ``ProbeFailure`` (or ``ModelError``) or returns what it saw.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genwire.errors import DatasetError, ErrorClass, plural
from genwire.providers.base import ChatModel, Dataset, EmbeddingModel, chat_messages
from genwire.providers.structured import parse_reply, requested_schema
from genwire.providers.threads import in_daemon_thread

CHAT_PROBE_PROMPT = "Reply with one short word."
STRUCTURED_PROBE_PROMPT = "Reply with a small JSON object that matches the schema."
STRUCTURED_PROBE_TOKENS = 256  # JSON needs room: a 16-token budget cuts any object short
EMBED_PROBE_TEXT = "genwire pre-flight probe"


class ProbeFailure(Exception):
    def __init__(self, error_class: ErrorClass, message: str) -> None:
        self.error_class = error_class
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class ProbeRequest:
    """What one probe is asked to check."""

    max_tokens: int = 16  # chat: the probe's completion budget
    shape: dict[str, Any] | None = None  # chat: what a column adds to its requests
    columns: Sequence[str] = field(default_factory=tuple)  # dataset: columns the pipeline reads


@dataclass(frozen=True)
class ProbeResult:
    message: str
    dimensions: int | None = None  # embedding: the vector's length, judged per alias


Probe = Callable[[Any, ProbeRequest], Awaitable[ProbeResult]]


async def probe_chat(model: ChatModel, request: ProbeRequest) -> ProbeResult:
    """The tiny prompt, sent with what the shape adds to the run's requests (``system``,
    params, ``response_format``). A structured shape's reply must be JSON that validates."""
    params = dict(request.shape or {})
    system = params.pop("system", None)
    tools = params.pop("tools", None)
    if tools:  # a tool-calling column (llm-tools): the endpoint must take `tools`
        return await _probe_tool_calling(model, system, tools, params, request.max_tokens)
    params.pop("max_completion_tokens", None)  # the probe's budget is probe_max_tokens
    schema = requested_schema(params.get("response_format"))
    max_tokens = request.max_tokens if schema is None else max(request.max_tokens, STRUCTURED_PROBE_TOKENS)
    params["max_tokens"] = max_tokens
    prompt = CHAT_PROBE_PROMPT if schema is None else STRUCTURED_PROBE_PROMPT
    text = await model.complete(prompt, system=system, **params)
    if schema is not None:
        _, problem = parse_reply(text if isinstance(text, str) else "", schema)
        if problem is not None:
            raise ProbeFailure(ErrorClass.BAD_RESPONSE, f"the structured reply does not match the schema: {problem}")
        return ProbeResult(f"replied JSON matching the schema ({len(text)} chars)")
    if not isinstance(text, str) or not text.strip():
        raise ProbeFailure(
            ErrorClass.BAD_RESPONSE,
            f"empty reply to a {max_tokens}-token probe (a reasoning model may need a larger "
            "probe_max_tokens in its model config)",
        )
    return ProbeResult(f"replied {len(text)} chars")


async def _probe_tool_calling(
    model: Any, system: str | None, tools: Any, params: dict[str, Any], max_tokens: int
) -> ProbeResult:
    converse = getattr(model, "converse", None)
    if converse is None:
        raise ProbeFailure(
            ErrorClass.BAD_RESPONSE, "this model cannot call tools (bind an OpenAI-compatible model, kind: openai)"
        )
    params.pop("max_completion_tokens", None)
    params["max_tokens"] = max_tokens  # the probe's budget is probe_max_tokens
    reply = await converse(chat_messages(CHAT_PROBE_PROMPT, system), tools=tools, **params)
    calls = reply.get("tool_calls") if isinstance(reply, dict) else None
    if calls:
        return ProbeResult(f"took tools; replied with {len(calls)} tool call(s)")
    return ProbeResult("took tools; replied in text")


async def probe_embedding(model: EmbeddingModel, request: ProbeRequest) -> ProbeResult:
    """One text in, exactly one finite, non-zero vector out (dimension checks are per alias)."""
    vectors = await model.embed([EMBED_PROBE_TEXT])
    if not isinstance(vectors, list) or len(vectors) != 1:
        got = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, f"expected exactly 1 vector for 1 text, got {got}")
    vector = vectors[0]
    if not isinstance(vector, Sequence) or len(vector) == 0:
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, "returned an empty vector")
    try:
        values = [float(v) for v in vector]
    except (TypeError, ValueError):
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, "vector holds non-numeric values") from None
    if not all(math.isfinite(v) for v in values):
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, "vector holds NaN or infinite values")
    if math.sqrt(sum(v * v for v in values)) == 0.0:
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, "vector has zero norm")
    return ProbeResult(f"1 vector, {len(values)} dimensions", dimensions=len(values))


def check_dimensions(got: int, expected: int | None) -> None:
    if expected is not None and got != expected:
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, f"returned {got} dimensions, but dimensions is set to {expected}")


async def probe_dataset(dataset: Dataset, request: ProbeRequest) -> ProbeResult:
    load = getattr(dataset, "load", None)
    try:
        if load is not None:
            await in_daemon_thread(load)  # a FIFO or stalled mount cannot outlive the deadline
        rows = len(dataset)
        columns = list(dataset.columns)
    except DatasetError as exc:
        path = getattr(dataset, "path", None)
        missing = isinstance(path, Path) and not path.exists()
        raise ProbeFailure(ErrorClass.NOT_FOUND if missing else ErrorClass.BAD_RESPONSE, str(exc)) from None
    if rows == 0:
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, "has no rows")
    absent = [c for c in request.columns if c not in columns]
    if absent:
        raise ProbeFailure(
            ErrorClass.BAD_RESPONSE,
            f"lacks column(s) the pipeline reads: {', '.join(absent)} (has: {', '.join(columns)})",
        )
    return ProbeResult(f"{plural(rows, 'row')}, columns: {', '.join(columns)}")
