"""The driver's side of the Ray workers' drains (SPEC §9, §22): what a worker paid for
reaches the driver's disk as it settles, not when its block ends.

One ``BlockWorker.drain`` call waits on every worker; it returns as soon as an answer was
paid for there (or a block ended), with the answers the worker's rows kept and its
receipt (usage, ledger entries, request figures) since the last drain, and the driver
stores the answers in the response cache and feeds the receipt to the run's accounts
(the ledger line is written then) before asking again; the next call says that drain is
stored, and only then do its answers give their concurrency slots back
(``engine.cluster.holds``). So what the workers paid for and the driver's disk lacks never
exceeds ``max_concurrency``: a driver killed at any moment (kill -9) leaves at most that
many answers for its resume to pay again, and the workers, which cannot send beyond those
slots, go with the driver (``engine.cluster.instance``'s reaper, or Ray's owner
fate-sharing on a cluster).

The driver checkpoints a block's rows only once a drain taken after the block ended is
stored (``covered``): the ledger and the cache always hold what the checkpoint's rows
cost, as locally.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from genwire.engine.records.receipt import Receipt
from genwire.providers.response_cache.store import ResponseCache

__all__ = ["DRAIN_WAIT_S", "Drains"]

DRAIN_WAIT_S = 1.0  # a drain waits this long for something to settle on its worker
RETRY_S = 0.2  # a worker being restarted: its next drain, after this
CLOSE_WAIT_S = 30.0  # at the end: how long the last drains may take


class Drains:
    """One drain in flight per worker, its answers stored and its receipt fed as it comes."""

    def __init__(
        self, ray: ModuleType, actors: list[Any], cache: ResponseCache | None, feed: Callable[[Receipt], None]
    ) -> None:
        self._ray = ray
        self._cache = cache
        self._feed = feed
        self._writing = asyncio.Lock()  # one cache transaction at a time (drains and blocks)
        self._through: dict[int, tuple[str, int]] = {}  # per worker: its process, blocks ended at its last drain
        self._issued: dict[int, int] = {}  # per worker: drains asked for
        self._done: dict[int, int] = {}  # per worker: the number of its last drain stored
        self._changed = asyncio.Condition()
        self._closing = False
        self._failed: Exception | None = None
        self._tasks = [asyncio.create_task(self._drain(worker, actor)) for worker, actor in enumerate(actors)]

    async def _drain(self, worker: int, actor: Any) -> None:
        try:
            await self._drains(worker, actor)
        except Exception as exc:  # the run's error (a cache or ledger write): ``covered`` raises it
            async with self._changed:
                self._failed = exc
                self._changed.notify_all()

    async def _drains(self, worker: int, actor: Any) -> None:
        stored: tuple[str, int] | None = None  # the last drain stored: said with the next call
        while not self._closing:
            self._issued[worker] = issued = self._issued.get(worker, 0) + 1
            try:
                drained = await actor.drain.remote(DRAIN_WAIT_S, stored)
            except self._ray.exceptions.RayError:  # the worker is being restarted (or is gone: the run says so)
                await asyncio.sleep(RETRY_S)
                continue
            await self.store(drained.answers)
            self._feed(drained.receipt)  # after its answers: the ledger never counts one the cache lacks
            stored = (drained.through[0], drained.number)  # its answers' slots are free once the worker hears it
            async with self._changed:
                self._through[worker] = drained.through
                self._done[worker] = issued
                self._changed.notify_all()

    async def store(self, answers: list[Any]) -> None:
        """Answers into the response cache (one transaction, off the event loop)."""
        cache = self._cache
        if answers and cache is not None and cache.writable:
            async with self._writing:
                await asyncio.to_thread(cache.put_many, answers)

    async def covered(self, worker: int, through: tuple[str, int]) -> None:
        """Until a drain of ``worker`` taken once its block ``through`` had ended is stored
        (or one asked for later came from another process: the block's died, and with it
        what it had not sent)."""
        process, blocks = through
        asked = self._issued.get(worker, 0)

        def done() -> bool:
            seen = self._through.get(worker)
            if self._failed is not None or seen is None:
                return self._failed is not None
            return seen[1] >= blocks if seen[0] == process else self._done.get(worker, 0) > asked

        async with self._changed:
            await self._changed.wait_for(done)
        if self._failed is not None:
            raise self._failed

    async def last(self, actors: list[Any]) -> None:
        """One more drain of every worker, now: what its cancelled batches kept (their
        finished rows' answers) is stored before the workers close."""
        drains = await asyncio.gather(*(actor.drain.remote(0.0) for actor in actors), return_exceptions=True)
        for drained in drains:
            if not isinstance(drained, BaseException):
                await self.store(drained.answers)
                self._feed(drained.receipt)

    def closing(self) -> None:
        """No drain after the ones in flight (the workers' ``close`` ends their wait)."""
        self._closing = True

    async def close(self) -> None:
        """The drains in flight stored and fed (bounded wait), then none."""
        self._closing = True
        tasks, self._tasks = self._tasks, []
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
            for task in late:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*tasks, return_exceptions=True)
