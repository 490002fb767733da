"""What a model request knows about the run that sends it: the response cache, the column
and the row(s). Handles do not know the column or the row; the engine and the generators
say them through context variables, so no signature changes and plugins are unaffected.

* The engine opens a ``batch_scope`` (the run's cache) per batch and a ``column_scope``
  for each column's ``generate_batch``.
* A generator says which row a request is for with ``cached_row(index)`` (or
  ``cached_rows(indices)`` for one request made for several rows: the request is keyed
  by all of them). The built-in generators do; a plugin may, as documented in the README.
* A request made with no row said is never cached: two rows must never share a key.
  The pre-flight's probes run outside any batch, so they never read or write the cache.

Only answers of a row block that ends without an exception are kept (``cached_row``
commits on a clean exit); a generator that rejects an answer inside the block (a reply
that fails its schema) calls ``RowScope.discard()``. Kept answers are written in one
transaction when the column's batch ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from genwire.providers.response_cache import CachedAnswer, Entry, ResponseCache, entry_key
from genwire.providers.usage import ModelUsage

__all__ = [
    "BatchScope",
    "CacheSlot",
    "RowScope",
    "are_vectors",
    "batch_scope",
    "cache_slot",
    "cached_row",
    "cached_rows",
    "column_scope",
    "endpoint_id",
]

log = logging.getLogger("genwire.cache")


@dataclass
class BatchScope:
    """One batch of a run: its cache, the answers its rows kept, and its hits."""

    cache: ResponseCache
    kept: list[Entry] = field(default_factory=list)
    hits: int = 0

    def take_kept(self) -> list[Entry]:
        kept, self.kept = self.kept, []
        return kept


@dataclass
class RowScope:
    rows: tuple[int, ...]
    pending: list[Entry] = field(default_factory=list)

    def discard(self) -> None:
        """Forget the answers received so far in this block (they were rejected)."""
        self.pending.clear()


_batch: ContextVar[BatchScope | None] = ContextVar("genwire_cache_batch", default=None)
_column: ContextVar[str | None] = ContextVar("genwire_cache_column", default=None)
_row: ContextVar[RowScope | None] = ContextVar("genwire_cache_row", default=None)


@contextlib.contextmanager
def batch_scope(cache: ResponseCache | None) -> Iterator[BatchScope | None]:
    if cache is None:
        yield None
        return
    scope = BatchScope(cache)
    token = _batch.set(scope)
    try:
        yield scope
    finally:
        _batch.reset(token)


@contextlib.contextmanager
def column_scope(column: str) -> Iterator[None]:
    token = _column.set(column)
    try:
        yield
    finally:
        _column.reset(token)


@contextlib.contextmanager
def cached_rows(indices: Sequence[int]) -> Iterator[RowScope]:
    """Requests inside are for the rows ``indices`` (their global positions, as
    ``generate_batch`` receives them); their answers are kept if the block ends cleanly."""
    scope = RowScope(tuple(int(i) for i in indices))
    token = _row.set(scope)
    try:
        yield scope
    finally:
        _row.reset(token)
    # Reached only on a clean exit: an exception inside the block skips the commit.
    batch = _batch.get()
    if batch is not None and scope.pending:
        batch.kept.extend(scope.pending)


def cached_row(index: int) -> contextlib.AbstractContextManager[RowScope]:
    """``cached_rows([index])``: requests inside are for row ``index``."""
    return cached_rows([index])


@dataclass
class CacheSlot:
    """Where one request's answer is looked up and, once it is good, kept."""

    batch: BatchScope
    row: RowScope
    column: str
    key: str

    def get(self, usage: ModelUsage, usable: Callable[[Any], bool]) -> CachedAnswer | None:
        """The stored answer, counted as a hit; None (a miss) when there is none or when it
        is not what this kind of request answers (a damaged entry: warned, then replaced)."""
        found = self.batch.cache.get(self.key)
        if found is not None and not usable(found.answer):
            log.warning("ignoring a response cache entry of the wrong shape in %s", self.batch.cache.path)
            return None
        if found is not None:
            self.batch.hits += 1
            self.batch.cache.hits += 1
            usage.cached += 1
            usage.saved_tokens += found.prompt_tokens + found.completion_tokens
        return found

    def keep(self, answer: Any, tokens: tuple[int, int]) -> None:
        """The answer passed the handle's checks: pending until the row block commits."""
        first = self.row.rows[0] if self.row.rows else -1
        self.row.pending.append(Entry(self.key, self.column, first, answer, tokens[0], tokens[1]))


def cache_slot(endpoint: str, body: Any) -> CacheSlot | None:
    """The slot for a request with this body, or None when it is not cached (no run
    cache, outside a column, or no row said)."""
    batch, column, row = _batch.get(), _column.get(), _row.get()
    if batch is None or column is None or row is None or not row.rows:
        return None
    return CacheSlot(batch, row, column, entry_key(endpoint, body, column, row.rows))


def current_column() -> str | None:
    """The column whose generator is running (None outside one): part of the identity of
    a request no row was said for (batch mode's request ids)."""
    return _column.get()


def endpoint_id(kind: str, base_url: str, api_key: str | None) -> str:
    """An endpoint's identity for the cache key: kind, URL and a sha256 of the key."""
    key_hash = hashlib.sha256((api_key or "").encode()).hexdigest()
    return json.dumps([kind, base_url, key_hash])


def are_vectors(answer: Any, count: int) -> bool:
    """Whether a stored embedding answer is ``count`` lists of numbers."""
    return (
        isinstance(answer, list)
        and len(answer) == count
        and all(isinstance(v, list) and all(type(x) is float or type(x) is int for x in v) for v in answer)
    )
