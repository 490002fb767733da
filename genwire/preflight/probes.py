"""One probe per resource kind. A probe raises ProbeFailure/ModelError or returns a short
description of what it saw."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genwire.errors import DatasetError, ErrorClass
from genwire.providers.threads import in_daemon_thread

CHAT_PROBE_PROMPT = "Reply with one short word."
EMBED_PROBE_TEXT = "genwire pre-flight probe"


class ProbeFailure(Exception):
    def __init__(self, error_class: ErrorClass, message: str) -> None:
        self.error_class = error_class
        self.message = message
        super().__init__(message)


async def probe_chat(model: Any, max_tokens: int) -> str:
    text = await model.complete(CHAT_PROBE_PROMPT, max_tokens=max_tokens)
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
