"""Generate one batch of rows: columns in order, per-row failures kept apart."""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import Callable
from typing import Any, Protocol

from genwire.container.core import WiredPipeline
from genwire.engine.gates.turns import GateTurns
from genwire.engine.records.batch_result import BatchResult, failure_record
from genwire.errors import (
    BatchModeFailed,
    GenwireError,
    ModelError,
    NotSent,
    PluginError,
    UndeclaredResourceError,
    exception_text,
)
from genwire.generators.base import Generator
from genwire.generators.outcome import RowFailure
from genwire.generators.verdict import as_verdict
from genwire.providers.request_context import Admission, BatchScope, admission_scope, batch_scope, column_scope
from genwire.providers.response_cache.layout import Entry
from genwire.providers.response_cache.store import ResponseCache
from genwire.providers.tracing import batch_span

# Values no generator can change in place: shared between a row and its copies, never copied.
_IMMUTABLE = (str, int, float, bool, type(None), bytes)


def private_rows(rows: list[dict[str, Any]], mutable: list[str]) -> list[dict[str, Any]]:
    """Copies of ``rows`` a generator may change at will without changing what an earlier
    column wrote. Only the columns in ``mutable`` (those that hold a list, a dict or any
    other value changeable in place) are deep-copied: copying every value of every row for
    every column was quadratic in the number of columns (10,000 template columns: 104 s
    for 2 rows)."""
    views = []
    for row in rows:
        view = dict(row)  # one C-level copy; immutable values are shared
        memo: dict[int, Any] = {}  # values two columns share stay shared in the copy
        for column in mutable:
            if column in view:
                view[column] = copy.deepcopy(view[column], memo)
        views.append(view)
    return views


# What an in-order gate is handed before its first batch: the rows (and their indices,
# in index order) that an earlier session of the run let through it.
Earlier = Callable[[str], tuple[list[dict[str, Any]], list[int]]]


class InOrderGates(Protocol):
    """Where a runner's in-order gates are judged when that is not in this process (a Ray
    worker: one keeper holds them for the cluster, ``engine.cluster.keeper``). ``key`` is the
    batch's (its first row index): the keeper takes the cluster's batches in key order."""

    async def judge(self, column: str, key: int, rows: list[dict[str, Any]], indices: list[int]) -> list[Any]: ...

    def leave(self, key: int) -> None:
        """The batch is done, failed or cancelled: it holds no gate up."""


class BatchRunner:
    """Runs the container's column generators over batches of row indices."""

    def __init__(
        self,
        container: WiredPipeline,
        cache: ResponseCache | None = None,
        *,
        store_answers: bool = True,
        earlier: Earlier | None = None,
        keeper: InOrderGates | None = None,
        admission: Admission | None = None,
    ) -> None:
        """``store_answers=False``: the answers kept go back in ``BatchResult.answers``
        for the caller to store, and ``cache`` is only read. ``earlier(gate)``: the rows
        an earlier session let through in-order gate ``gate`` (none without it).
        ``keeper``: the in-order gates are judged there, not here (a Ray worker's).
        ``admission``: admits each request and hears each row that fails (the run's
        failure-rate stop, ``engine.rows.failure_stop``)."""
        container.reset_generators()  # generators may keep per-run state (cursors, caches)
        self.generators: list[Generator[Any]] = [container.generator(c.name) for c in container.columns]
        self.columns = [c.name for c in container.columns]
        self.cache = cache
        self.store_answers = store_answers
        # Batches past their order-free columns, at an in-order gate (its request made ahead,
        # or waiting for their turn): the engine starts others in their place.
        self.at_gates = 0
        self.live = 0  # rows of the running batches that have not failed nor finished
        self.seed = container.config.pipeline.seed  # in every cache key: a new seed asks again
        self.earlier = earlier
        self.keeper = keeper
        self.admission = admission
        self.turns = GateTurns([g.column for g in self.generators if g.metadata.gate and g.in_order])
        # store_answers=False (a Ray worker, which sends answers as they come): the running
        # batches' scopes, and the answers of the batches that ended, not yet taken.
        self.open_scopes: dict[int, BatchScope] = {}  # by id: scopes with the same fields are equal
        self.unsent: list[Entry] = []

    def take_answers(self) -> list[Entry]:
        """store_answers=False: the answers kept since the last call (the caller stores them)."""
        taken: list[Entry] = self.unsent
        self.unsent = []
        for scope in self.open_scopes.values():
            taken.extend(scope.take_kept())
        return taken

    async def run(self, indices: list[int]) -> BatchResult:
        """Rows ``indices`` (global positions; any set, e.g. the rows a resumed run still
        needs). Indices travel beside the rows: the row dicts hold user columns only.
        Model requests inside see the response cache, the column and (said by the
        generator) the row: ``providers.request_context``."""
        indices = list(indices)
        with (
            admission_scope(self.admission),
            batch_scope(self.cache, self.seed) as scope,
            batch_span(indices) as traced,
        ):
            if scope is not None:
                self.open_scopes[id(scope)] = scope
            try:
                result = await self._run(indices, scope)
            finally:
                if scope is not None:
                    del self.open_scopes[id(scope)]
                    if self.store_answers:  # a cancelled batch's answers: still stored
                        scope.cache.put_many(scope.take_kept())
                    else:
                        self.unsent.extend(scope.take_kept())
            result.size = len(indices)
            if scope is not None:
                result.cached = scope.hits
                result.answers = scope.take_kept()  # what the caller stores (empty once stored here)
            if traced is not None:
                traced.set({"genwire.rows.failed": len(result.failures), "genwire.cache.hits": result.cached})
            return result

    async def _run(self, indices: list[int], scope: BatchScope | None) -> BatchResult:
        live: list[dict[str, Any]] = [{} for _ in indices]
        self.live += len(live)
        key = indices[0] if indices else -1
        self.turns.enter(key)
        try:
            return await self._columns(indices, live, scope, key)
        finally:
            self.live -= len(live)
            self.turns.leave(key)
            if self.keeper is not None:
                self.keeper.leave(key)

    async def _columns(
        self, indices: list[int], live: list[dict[str, Any]], scope: BatchScope | None, key: int
    ) -> BatchResult:
        """Each column over the rows still live; ``live`` shrinks in place as rows fail or
        a gate rejects them (a rejected row stops there: no later column is generated)."""
        failures: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        mutable: list[str] = []  # columns of this batch holding a value changeable in place
        for gen in self.generators:
            if not live:
                break
            in_order = gen.metadata.gate and gen.in_order
            if in_order and self.keeper is not None:  # judged where the cluster's order is kept
                values = await self.keeper.judge(gen.column, key, private_rows(live, mutable), list(indices))
            else:
                rows = private_rows(live, mutable)
                if in_order:
                    # The order-free part first (its requests overlap the lower batches' turns),
                    # then wait for this batch's turn.
                    self.at_gates += 1
                    try:
                        with column_scope(gen.column, indices):
                            await self.call(gen, rows, indices, ahead=True)
                        await self.turns.turn(gen.column, key, functools.partial(self.remember, gen))
                    finally:
                        self.at_gates -= 1
                with column_scope(gen.column, indices):  # the column's hits, looked up in one query
                    values = await self.call(gen, rows, indices)
                if in_order:
                    self.turns.passed(gen.column, key)
            if scope is not None and scope.kept and self.store_answers:
                kept_answers = scope.take_kept()
                if scope.cache.writable:  # one transaction per column and batch, off the event loop
                    await asyncio.to_thread(scope.cache.put_many, kept_answers)
            kept, kept_indices = [], []
            seen_mutable = False
            for index, row, value in zip(indices, live, values, strict=True):
                if isinstance(value, RowFailure):
                    if isinstance(value.error, UndeclaredResourceError | PluginError | BatchModeFailed):
                        raise value.error  # a plugin bug or batch mode broken, not a row problem: stop the run
                    if isinstance(value.error, NotSent):
                        continue  # not sent (the budget, a stopping run): neither kept nor failed, a rerun makes it
                    failures.append(failure_record(index, row, gen.column, value.error))
                elif gen.metadata.gate:  # a verdict: the row goes on (the gate's cell is not kept) or stops here
                    verdict = as_verdict(value)
                    if verdict is None:
                        raise PluginError(
                            f"gate {gen.metadata.name!r} (column {gen.column!r}) returned {type(value).__name__} "
                            f"for row {index}; a gate returns True, False or Verdict(keep, reason)"
                        )
                    if verdict.keep:
                        kept.append(row)
                        kept_indices.append(index)
                    else:
                        reason = verdict.reason or "rejected"
                        rejected.append({"candidate": index, "gate": gen.column, "reason": reason, "row": dict(row)})
                else:
                    row[gen.column] = value
                    if not seen_mutable and not isinstance(value, _IMMUTABLE):
                        seen_mutable = True
                        mutable.append(gen.column)
                    kept.append(row)
                    kept_indices.append(index)
            self.live -= len(live) - len(kept)
            live[:], indices = kept, kept_indices
        failures.sort(key=lambda f: int(f["row"]))
        rejected.sort(key=lambda r: int(r["candidate"]))
        return BatchResult(indices, live, failures, rejected=rejected)

    async def remember(self, gen: Generator[Any]) -> None:
        """An in-order gate's first turn: the rows an earlier session let through it."""
        if self.earlier is None:
            return
        rows, indices = self.earlier(gen.column)
        if not rows:
            return
        with column_scope(gen.column, indices):
            try:
                await gen.remember(rows, indices)
            except GenwireError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"gate {gen.metadata.name!r} (column {gen.column!r}) raised in remember(): {exception_text(exc)}"
                ) from exc

    @staticmethod
    async def call(
        gen: Generator[Any], rows: list[dict[str, Any]], indices: list[int], *, ahead: bool = False
    ) -> list[Any]:
        """``gen`` over ``rows``, which it may change (give it ``private_rows``). ``ahead``:
        an in-order gate's order-free part (``Generator.ahead``), nothing returned."""
        name = gen.metadata.name
        try:
            if ahead:
                await gen.ahead(rows, list(indices))
                return []
            values = await gen.generate_batch(rows, list(indices))
        except ModelError as exc:
            # The model stayed unhealthy through its retries: every row of the batch fails.
            return [RowFailure(exc) for _ in rows]
        except GenwireError:
            raise
        except Exception as exc:
            raise PluginError(
                f"generator {name!r} (column {gen.column!r}) raised in {'ahead' if ahead else 'generate'}(): "
                f"{exception_text(exc)}"
            ) from exc
        if not isinstance(values, list) or len(values) != len(rows):
            got = len(values) if isinstance(values, list) else type(values).__name__
            raise PluginError(
                f"generator {name!r} (column {gen.column!r}) returned {got} values for {len(rows)} rows; "
                "generate() must return a list with one value per row"
            )
        return values
