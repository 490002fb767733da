"""A Ray worker's batch slots (``BlockWorker``: a few batches in flight at a time), as
the batch that holds one sees it: a batch waiting for its turn at the gates' keeper gives
its slot up meanwhile (``engine.cluster.keeper``), so the batches of lower index it waits for
can run. Ray runs an async actor's calls in no guaranteed order, so a later block's
batches may hold every slot while an earlier block's wait for one."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

__all__ = ["BatchSlot", "held_slot"]


class BatchSlot:
    """One batch's slot of a worker's semaphore: given up and taken again at most once each."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = False

    async def take(self) -> None:
        await self._slots.acquire()  # cancelled while waiting: not taken
        self._held = True

    def give(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


# The slot of the batch the current task runs (set by the worker in the batch's own task).
held_slot: ContextVar[BatchSlot | None] = ContextVar("genwire_batch_slot", default=None)
