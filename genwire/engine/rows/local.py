"""The local engine: the run's batches in this process, several in flight, in row order."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable, Iterator

from genwire.container.core import WiredPipeline
from genwire.engine.records.batch_result import BatchResult, batched
from genwire.engine.rows.runner import BatchRunner, Earlier
from genwire.providers.request_context import Admission
from genwire.providers.response_cache.store import ResponseCache

__all__ = ["LocalBatches"]

BATCHES_IN_FLIGHT = 4  # at least: keeps providers saturated across the barrier between columns
ROWS_AHEAD = 8192  # at most, in batches running or finished-but-not-yet-written: bounds memory
# Batch mode: every batch of this many rows starts at once, so a round holds them all.
BATCH_MODE_ROWS_AHEAD = 10_000
GROW_TICK_S = 0.01  # how often the engine looks for idle slots to start one more batch


class LocalBatches:
    """Batches in row order, several in flight; a finished batch leaves memory as soon as
    it is next in order (flat memory however many rows).

    A batch is done only when its slowest row is: a row waiting out a stray 429 (its
    ``Retry-After``, say a second) holds up its batch, and with a fixed number of batches
    in flight the providers would idle meanwhile. So beyond ``BATCHES_IN_FLIGHT`` the
    engine starts one more batch every ``GROW_TICK_S`` while a provider is about to have
    idle slots, up to ``ROWS_AHEAD`` rows. A batch at an in-order gate (keep-novel's
    embedding request, then its turn) does not count among the ``BATCHES_IN_FLIGHT``:
    it asks little of the providers, and counted it left their slots idle (a gated run at
    50 ms answers: 85 -> 92 % of the plain run's rate at 100,000 candidates; 88 % with at
    most 4 such batches not counted). Where the gate is the slower part (5 ms answers on 2
    cores) batches wait before it up to ``ROWS_AHEAD`` rows: ~40 MB, bounded.
    """

    def __init__(
        self,
        container: WiredPipeline,
        cache: ResponseCache | None = None,
        *,
        batch_mode: bool = False,
        stop: Callable[[], bool] | None = None,
        hold: Callable[[int], bool] | None = None,
        earlier: Earlier | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._container = container
        self._admission = admission  # the failure-rate stop: no request once the run is stopping
        self._earlier = earlier  # a gated run: what in-order gates remember from earlier sessions
        # The budget or the failure rate: stop() true, no new batch at all (running ones finish); hold(live
        # rows) true, none for now (what is left would not finish them).
        self._stop = stop
        self._hold = hold
        self._cache = cache
        # Batch mode: the whole window at once (a round holds every row of it), nothing to grow.
        self._batch_mode = batch_mode
        self._runner: BatchRunner | None = None

    ready_at: float | None = None  # no workers to start

    def live_rows(self) -> int:
        """Rows in the batches running now, not yet failed (batch mode's rounds count them)."""
        return self._runner.live if self._runner is not None else 0

    def start(self, rows: int, batch_size: int) -> None:
        """Nothing to start ahead: the batches run in this process."""

    async def aclose(self) -> None:
        """Nothing to end: the batches' tasks end with ``batches``."""

    def _idle_slots(self) -> bool:
        """Some provider will soon have idle slots: less than one round of requests is
        queued for them (a braked or paced model's queue is long, so it never grows)."""
        return any(c.waiting < c.limit for c in self._container.concurrency().values())

    async def batches(
        self, indices: Iterator[int], batch_size: int, *, feed: Iterator[list[int]] | None = None
    ) -> AsyncGenerator[BatchResult, None]:
        """``feed`` (a gated run's ``CandidatePlan``) says which rows to start, batch by
        batch, in place of ``indices``: an empty batch means none for now."""
        runner = BatchRunner(self._container, self._cache, earlier=self._earlier, admission=self._admission)
        self._runner = runner
        todo = batched(indices, batch_size) if feed is None else feed
        numbers = itertools.count()
        running: dict[asyncio.Task[BatchResult], int] = {}
        finished: dict[int, asyncio.Task[BatchResult]] = {}  # an error is raised in row order too
        next_out = 0
        exhausted = False
        ahead = max(2 * BATCHES_IN_FLIGHT, (BATCH_MODE_ROWS_AHEAD if self._batch_mode else ROWS_AHEAD) // batch_size)
        in_flight = ahead if self._batch_mode else BATCHES_IN_FLIGHT

        def start(up_to: int, *, only_if_idle: bool = False) -> None:
            """Start batches until ``up_to`` run (while slots sit idle, with ``only_if_idle``)."""
            nonlocal exhausted
            if self._stop is not None and self._stop():
                exhausted = True
                return
            fresh = 0  # rows of the batches started here: not live until they first run
            while (
                not exhausted
                and len(running) - runner.at_gates < up_to
                and len(running) + len(finished) < ahead
                and (not only_if_idle or self._idle_slots())
                # The budget: when nothing runs, one more batch learns whether anything still fits.
                and not (self._hold is not None and (running or finished) and self._hold(runner.live + fresh))
            ):
                batch = next(todo, None)
                if batch is None:
                    exhausted = True
                    return
                if not batch:  # the feed: enough is running for now
                    return
                running[asyncio.create_task(runner.run(batch))] = next(numbers)
                fresh += len(batch)

        try:
            while True:
                # A new batch starts whenever any batch finishes, not only the oldest: a
                # slow batch at the head would otherwise leave the provider's slots idle.
                # Finished batches wait for their turn; the two together stay bounded.
                start(in_flight)
                if not running and not finished:
                    return
                if next_out not in finished:
                    may_grow = not exhausted and len(running) + len(finished) < ahead
                    timeout = GROW_TICK_S if may_grow else None
                    done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        finished[running.pop(task)] = task
                    if not done:  # a tick: one more batch if slots sit idle
                        start(len(running) + 1, only_if_idle=True)
                while next_out in finished:
                    yield finished.pop(next_out).result()
                    next_out += 1
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            for task in finished.values():  # finished, never yielded: their errors are moot
                if not task.cancelled():
                    task.exception()
