"""The built-in chat generators' synchronous cache peek.

On a rerun most rows' answers are in the response cache, and an asyncio task per row
costs more than the hit itself. So a chat column first walks its rows synchronously:
it renders the prompt and asks the model handle for the cached answer (a dict lookup in
the column's bulk lookup); only the misses become tasks, gathered concurrently. A first
run pays one extra key per request (microseconds against a model call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from genwire.generators.outcome import RowFailure, gather_rows

R = TypeVar("R")

# A row's first step: ``(value, None)`` when the row is done (its answer was cached), or
# ``(None, awaitable)`` for what is still to be asked.
Step = tuple[Any, Awaitable[Any] | None]


def peek_completion(
    model: object, index: int | None, prompt: str, system: str | None, params: Mapping[str, Any]
) -> str | None:
    """The answer ``model.complete(prompt, system=system, **params)`` would take from the
    response cache for row ``index`` (counted as a hit), else None: a miss, no cache, no
    row, or a model that cannot say (fakes and overrides: they are simply asked)."""
    if index is None:
        return None
    # Looked up on the type: an override whose __getattr__ answers anything is not asked.
    peek = getattr(type(model), "_cached_completion", None)
    if peek is None:
        return None
    text = peek(model, (index,), prompt, system, params)
    return text if isinstance(text, str) else None


async def gather_cache_first(items: Iterable[R], first: Callable[[R], Step]) -> list[Any]:
    """``first(item)`` for each item, synchronously, in order; then what is left to ask,
    concurrently (``gather_rows``). One value per item, in order; an exception in either
    part fails that item only (a ``RowFailure``)."""
    out: list[Any] = []
    positions: list[int] = []
    pending: list[Awaitable[Any]] = []
    for item in items:
        try:
            value, rest = first(item)
        except Exception as exc:  # a template that cannot render fails its row only
            value, rest = RowFailure(exc), None
        if rest is not None:
            positions.append(len(out))
            pending.append(rest)
        out.append(value)
    if pending:
        for position, result in zip(positions, await gather_rows(pending), strict=True):
            out[position] = result
    return out
