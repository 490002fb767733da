"""Generate one batch of rows: columns in order, per-row failures kept apart."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from genwire.container.core import WiredPipeline
from genwire.errors import GenwireError, ModelError, PluginError, UndeclaredResourceError, exception_text
from genwire.generators.base import Generator
from genwire.generators.outcome import RowFailure
from genwire.providers.request_context import BatchScope, batch_scope, column_scope
from genwire.providers.response_cache import Entry, ResponseCache

T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last may be shorter), read lazily."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


@dataclass
class BatchResult:
    indices: list[int]  # of ``rows``, one each
    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    cached: int = 0  # answers the response cache served for this batch (no request sent)
    # The answers its rows kept, for a runner that does not store them itself (a Ray
    # worker: the driver is the cache's one writer).
    answers: list[Entry] = field(default_factory=list)


def failure_record(
    index: int, row: dict[str, Any], column: str, error: BaseException, error_class: str | None = None
) -> dict[str, Any]:
    if error_class is None:
        error_class = error.error_class.value if isinstance(error, ModelError) else type(error).__name__
    message = error.message if isinstance(error, ModelError) else str(error)
    return {"row": index, "column": column, "error_class": error_class, "error": message, "data": dict(row)}


class BatchRunner:
    """Runs the container's column generators over batches of row indices."""

    def __init__(
        self, container: WiredPipeline, cache: ResponseCache | None = None, *, store_answers: bool = True
    ) -> None:
        """``store_answers=False``: the answers kept go back in ``BatchResult.answers``
        for the caller to store, and ``cache`` is only read."""
        container.reset_generators()  # generators may keep per-run state (cursors, caches)
        self.generators: list[Generator[Any]] = [container.generator(c.name) for c in container.columns]
        self.columns = [c.name for c in container.columns]
        self.cache = cache
        self.store_answers = store_answers
        self.live = 0  # rows of the running batches that have not failed nor finished
        self.seed = container.config.pipeline.seed  # in every cache key: a new seed asks again

    async def run(self, indices: list[int]) -> BatchResult:
        """Rows ``indices`` (global positions; any set, e.g. the rows a resumed run still
        needs). Indices travel beside the rows: the row dicts hold user columns only.
        Model requests inside see the response cache, the column and (said by the
        generator) the row: ``providers.request_context``."""
        with batch_scope(self.cache, self.seed) as scope:
            try:
                result = await self._run(list(indices), scope)
            finally:
                if scope is not None and self.store_answers:  # a cancelled batch's answers: still stored
                    scope.cache.put_many(scope.take_kept())
            if scope is not None:
                result.cached = scope.hits
                result.answers = scope.take_kept()  # what the caller stores (empty once stored here)
            return result

    async def _run(self, indices: list[int], scope: BatchScope | None) -> BatchResult:
        live: list[dict[str, Any]] = [{} for _ in indices]
        self.live += len(live)
        try:
            return await self._columns(indices, live, scope)
        finally:
            self.live -= len(live)

    async def _columns(self, indices: list[int], live: list[dict[str, Any]], scope: BatchScope | None) -> BatchResult:
        """Each column over the rows still live; ``live`` shrinks in place as rows fail."""
        failures: list[dict[str, Any]] = []
        for gen in self.generators:
            if not live:
                break
            with column_scope(gen.column, indices):  # the column's hits, looked up in one query
                values = await self.call(gen, live, indices)
            if scope is not None and scope.kept and self.store_answers:
                kept_answers = scope.take_kept()
                if scope.cache.writable:  # one transaction per column and batch, off the event loop
                    await asyncio.to_thread(scope.cache.put_many, kept_answers)
            kept, kept_indices = [], []
            for index, row, value in zip(indices, live, values, strict=True):
                if isinstance(value, RowFailure):
                    if isinstance(value.error, UndeclaredResourceError | PluginError):
                        raise value.error  # a plugin bug, not a row problem: stop the run
                    failures.append(failure_record(index, row, gen.column, value.error))
                else:
                    row[gen.column] = value
                    kept.append(row)
                    kept_indices.append(index)
            self.live -= len(live) - len(kept)
            live[:], indices = kept, kept_indices
        failures.sort(key=lambda f: int(f["row"]))
        return BatchResult(indices, live, failures)

    @staticmethod
    async def call(gen: Generator[Any], rows: list[dict[str, Any]], indices: list[int]) -> list[Any]:
        name = gen.metadata.name
        # Generators get deep copies: a plugin mutating its input, nested values included,
        # cannot change what an earlier column wrote.
        view = copy.deepcopy(rows)
        try:
            values = await gen.generate_batch(view, list(indices))
        except ModelError as exc:
            # The model stayed unhealthy through its retries: every row of the batch fails.
            return [RowFailure(exc) for _ in rows]
        except GenwireError:
            raise
        except Exception as exc:
            raise PluginError(
                f"generator {name!r} (column {gen.column!r}) raised in generate(): {exception_text(exc)}"
            ) from exc
        if not isinstance(values, list) or len(values) != len(rows):
            got = len(values) if isinstance(values, list) else type(values).__name__
            raise PluginError(
                f"generator {name!r} (column {gen.column!r}) returned {got} values for {len(rows)} rows; "
                "generate() must return a list with one value per row"
            )
        return values
