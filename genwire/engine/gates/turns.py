"""In-order gates (SPEC §21: keep-unique, keep-novel) take the batches of a session one
at a time, in index order: a candidate is compared with every candidate of lower index
that this gate kept, whatever the concurrency. A batch waits at such a gate only for the
lower batches to pass the same gate (not for their later columns), so the columns before
and after it still run concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class GateTurns:
    """The batches waiting to pass each in-order gate, by their first row index."""

    def __init__(self, gates: list[str]) -> None:
        self._waiting: dict[str, set[int]] = {gate: set() for gate in gates}
        # The batch a pass makes first is woken alone: waking every waiter at each pass
        # cost O(waiting^2) wake-ups on the event loop when many batches queue at a gate.
        self._wakers: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._prepared: set[str] = set()
        self.parked = 0  # batches waiting for their turn now (their requests before the gate done)

    def enter(self, key: int) -> None:
        """A batch starts (before its first await: batches enter in index order)."""
        for waiting in self._waiting.values():
            waiting.add(key)

    async def turn(self, gate: str, key: int, prepare: Callable[[], Awaitable[None]]) -> None:
        """Wait until every lower batch passed ``gate``; the first batch to get there
        runs ``prepare`` (the gate remembers an earlier session's candidates) first."""
        waiting = self._waiting[gate]
        while min(waiting) != key:  # again after a wake-up: a retried lower batch may have entered
            woken = asyncio.get_running_loop().create_future()
            self._wakers[(gate, key)] = woken
            self.parked += 1
            try:
                await woken
            finally:
                self.parked -= 1
                self._wakers.pop((gate, key), None)
        if gate not in self._prepared:
            await prepare()
            self._prepared.add(gate)

    def passed(self, gate: str, key: int) -> None:
        waiting = self._waiting[gate]
        if key in waiting:
            waiting.discard(key)
            if waiting:
                woken = self._wakers.get((gate, min(waiting)))
                if woken is not None and not woken.done():
                    woken.set_result(None)  # its turn; the others wait on

    def leave(self, key: int) -> None:
        """The batch is done (or failed, or was cancelled): it holds no gate up."""
        for gate in self._waiting:
            self.passed(gate, key)
