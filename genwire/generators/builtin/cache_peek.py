"""The built-in chat generators' synchronous cache peek.

On a rerun most rows' answers are in the response cache, and an asyncio task per row
costs more than the hit itself. So a chat column first renders its rows' prompts, then
asks the model handle for the cached answers of the whole batch at once
(``_cached_completions``: the route, the request and the accounting made once, then a key
and a dict lookup in the column's bulk lookup per row); only the misses become tasks,
gathered concurrently. A first run makes no key there (nothing is stored for its rows).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from genwire.generators.outcome import RowFailure, gather_rows

R = TypeVar("R")

# A row's first step: ``(value, None)`` when the row is done (its answer was cached), or
# ``(None, awaitable)`` for what is still to be asked.
Step = tuple[Any, Awaitable[Any] | None]
# A row's rendered prompt and system prompt.
Prompt = tuple[str, str | None]


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
        return await _fill(out, positions, pending)
    return out


async def _fill(out: list[Any], positions: list[int], pending: list[Awaitable[Any]]) -> list[Any]:
    """``out`` with what ``pending`` gave (concurrently) at ``positions``."""
    for position, result in zip(positions, await gather_rows(pending), strict=True):
        out[position] = result
    return out


def peek_completions(
    model: object, indices: Sequence[int], prompts: Sequence[Prompt | None], params: Mapping[str, Any]
) -> list[str | None]:
    """``peek_completion`` for a batch: the cached answer of each row ``indices[i]`` for
    ``prompts[i]`` (None: a miss, or no prompt), each hit counted. The handle's bulk
    ``_cached_completions`` when it has one, else its ``_cached_completion`` row by row."""
    bulk = getattr(type(model), "_cached_completions", None)
    if bulk is not None:
        found: list[str | None] | None = bulk(model, indices, prompts, params)  # texts that passed is_text
        return [None] * len(prompts) if found is None else found  # None: nothing stored for these rows
    return [
        None if prompt is None else peek_completion(model, index, prompt[0], prompt[1], params)
        for index, prompt in zip(indices, prompts, strict=True)
    ]


async def gather_peeked(
    model: object,
    rows: Sequence[dict[str, Any]],
    indices: Sequence[int],
    render: Callable[[Sequence[dict[str, Any]]], list[Prompt | Exception]],
    params: Mapping[str, Any],
    ask: Callable[[Prompt, int], Awaitable[Any]],
    hit: Callable[[str, Prompt, int], Step] | None = None,
) -> list[Any]:
    """A chat column's batch: each row's prompt rendered (``render(rows)``: a prompt, or
    the exception that fails that row only), the cached answers of all of them peeked at
    once, ``hit(text, prompt, index)`` for each one found (without ``hit``: the text is
    the value), ``ask(prompt, index)`` for the rest (gathered concurrently). One value
    per row, in order (a ``RowFailure`` for a row that failed)."""
    rendered = render(rows)
    prompts = [None if isinstance(p, Exception) else p for p in rendered]
    out: list[Any] = [RowFailure(p) if isinstance(p, Exception) else None for p in rendered]  # fails that row only
    try:
        texts = peek_completions(model, indices, prompts, params)
    except Exception as exc:  # the handle cannot look (its provider closed): each row fails as its request would
        return [value if prompt is None else RowFailure(exc) for value, prompt in zip(out, prompts, strict=True)]
    if hit is None and None not in texts:  # every row rendered and served (a cached rerun)
        return texts
    positions: list[int] = []
    pending: list[Awaitable[Any]] = []
    for position, text in enumerate(texts):
        prompt = prompts[position]
        if prompt is None:
            continue
        if text is not None and hit is None:
            out[position] = text
            continue
        rest: Awaitable[Any] | None
        try:
            if text is None:
                value, rest = None, ask(prompt, indices[position])
            else:
                assert hit is not None  # a hit without ``hit`` was taken above
                value, rest = hit(text, prompt, indices[position])
        except Exception as exc:
            value, rest = RowFailure(exc), None
        if rest is not None:
            positions.append(position)
            pending.append(rest)
        out[position] = value
    return await _fill(out, positions, pending) if pending else out
