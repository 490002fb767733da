"""One probe per resource kind. A probe raises ProbeFailure/ModelError or returns a short
description of what it saw."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genwire.errors import DatasetError, ErrorClass
from genwire.generators.builtin.llm_structured import parse_reply
from genwire.providers.threads import in_daemon_thread

CHAT_PROBE_PROMPT = "Reply with one short word."
STRUCTURED_PROBE_PROMPT = "Reply with a small JSON object that matches the schema."
STRUCTURED_PROBE_TOKENS = 256


def _requested_schema(response_format: Any) -> dict[str, Any] | None:
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
            schema: dict[str, Any] = spec["schema"]
            return schema
    return None


EMBED_PROBE_TEXT = "genwire pre-flight probe"


class ProbeFailure(Exception):
    def __init__(self, error_class: ErrorClass, message: str) -> None:
        self.error_class = error_class
        self.message = message
        super().__init__(message)


async def probe_chat(model: Any, max_tokens: int, shape: dict[str, Any] | None = None) -> str:
    """The tiny prompt, sent with what ``shape`` adds to the run's requests (``system``,
    params, ``response_format``). A structured shape's reply must be JSON that validates."""
    params = dict(shape or {})
    system = params.pop("system", None)
    params.pop("max_completion_tokens", None)  # the probe's budget is probe_max_tokens
    schema = _requested_schema(params.get("response_format"))
    if schema is not None:
        # JSON needs room: a 16-token budget would cut any object short.
        max_tokens = max(max_tokens, STRUCTURED_PROBE_TOKENS)
    params["max_tokens"] = max_tokens
    text = await model.complete(
        CHAT_PROBE_PROMPT if schema is None else STRUCTURED_PROBE_PROMPT, system=system, **params
    )
    if schema is not None:
        _, problem = parse_reply(text if isinstance(text, str) else "", schema)
        if problem is not None:
            raise ProbeFailure(ErrorClass.BAD_RESPONSE, f"the structured reply does not match the schema: {problem}")
        return f"replied JSON matching the schema ({len(text)} chars)"
    if not isinstance(text, str) or not text.strip():
        raise ProbeFailure(
            ErrorClass.BAD_RESPONSE,
            f"empty reply to a {max_tokens}-token probe (a reasoning model may need a larger "
            "probe_max_tokens in its model config)",
        )
    return f"replied {len(text)} chars"


async def probe_embedding(model: Any) -> list[float]:
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
    return values


def check_dimensions(values: list[float], expected: int | None) -> str:
    if expected is not None and len(values) != expected:
        raise ProbeFailure(
            ErrorClass.BAD_RESPONSE,
            f"returned {len(values)} dimensions, but dimensions is set to {expected}",
        )
    return f"1 vector, {len(values)} dimensions"


async def probe_dataset(dataset: Any, needed_columns: Sequence[str]) -> str:
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
    absent = [c for c in needed_columns if c not in columns]
    if absent:
        raise ProbeFailure(
            ErrorClass.BAD_RESPONSE,
            f"lacks column(s) the pipeline reads: {', '.join(absent)} (has: {', '.join(columns)})",
        )
    return f"{rows} rows, columns: {', '.join(columns)}"
