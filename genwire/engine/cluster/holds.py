"""A Ray worker's paid answers hold their concurrency slot until the driver stored them
(SPEC §9, §22): so what a worker has paid for and the driver's disk lacks — in flight, or
settled and on its way — never exceeds the worker's share of ``max_concurrency``, and the
cluster's never exceeds the cap. A driver killed at any moment (kill -9) leaves at most
``max_concurrency`` answers to pay again, by construction, not by timing.

The slot passes from a request to its answer as the answer comes (``ProviderGate.release``
with ``held``, in the same step: no other request can take it in between), stays with the
row block until it ends (``providers.request_context.hold_answer``), then with the answers
the block kept until a drain takes them (``committed``), then with that drain until the
driver says it stored it (``stored``, carried by the next drain call: no extra round trip).
A block that fails or drops its answers frees their slots at once; a row block that sends
another request first frees its own (a tool loop keeps its answers only when it ends: it
must not wait on them).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Holds"]

Release = Callable[[], None]


class Holds:
    """The held answers' slots of one worker process, by the drain that carries them."""

    def __init__(self, on_committed: Callable[[], None]) -> None:
        self._on_committed = on_committed  # a drain waiting returns: these answers go now
        self._committed: list[Release] = []  # kept by their rows, not yet taken by a drain
        self._sent: dict[int, list[Release]] = {}  # by drain number: taken, not yet stored
        self._drains = 0

    def committed(self, releases: list[Release]) -> None:
        self._committed.extend(releases)
        self._on_committed()

    def take(self) -> int:
        """The number of the drain that now carries the answers committed so far."""
        self._drains += 1
        if self._committed:
            self._sent[self._drains], self._committed = self._committed, []
        return self._drains

    def stored(self, through: int) -> None:
        """The driver stored every drain up to ``through``: their slots are free."""
        for number in [n for n in self._sent if n <= through]:
            for release in self._sent.pop(number):
                release()

    def free_all(self) -> None:
        """The worker closes: nothing waits on these slots any more."""
        self.stored(self._drains)
        releases, self._committed = self._committed, []
        for release in releases:
            release()

    @property
    def held(self) -> int:
        """Answers holding a slot here (committed or sent, not yet stored)."""
        return len(self._committed) + sum(len(releases) for releases in self._sent.values())
