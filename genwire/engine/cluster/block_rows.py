"""The rows a Ray run hands out in blocks: the rows its checkpoint lacks, or, in a gated
run (SPEC §21), the candidates its ``CandidatePlan`` schedules as the kept rows come in."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["BlockRows"]


class BlockRows:
    """``take(count)`` gives the next rows in order. Without a feed they are all known at
    once (``left`` counts them). With one, ``window`` is the plan's first window (what it
    wants in flight at the start: every one of them is needed, so the blocks are sized
    from it), and later rows are asked of the plan only as blocks take them, as the local
    engine asks it only as batches start: a candidate the plan gave is one the driver
    starts, and none is started once the kept rows are there."""

    def __init__(self, indices: Iterator[int], feed: Iterator[list[int]] | None = None) -> None:
        self._feed = feed
        self._todo: list[int] = list(indices) if feed is None else []  # ints: small beside rows
        self._cursor = 0
        self._pull(None)
        self.window = self.left

    @property
    def left(self) -> int:
        """Rows taken from the plan (or known) and not yet handed out."""
        return len(self._todo) - self._cursor

    def _pull(self, want: int | None) -> None:
        """Batches from the feed until ``want`` rows wait (None: until it has none for now)."""
        if self._feed is None:
            return
        del self._todo[: self._cursor]
        self._cursor = 0
        for batch in self._feed:
            if not batch:  # the plan: enough in flight for now
                return
            self._todo.extend(batch)
            if want is not None and self.left >= want:
                return

    def more(self) -> bool:
        """Whether a row waits, asking the plan for one when none does."""
        if not self.left:
            self._pull(1)
        return self.left > 0

    def take(self, count: int) -> list[int]:
        """Up to ``count`` rows (fewer when the plan has no more for now)."""
        if self.left < count:
            self._pull(count)
        rows = self._todo[self._cursor : self._cursor + count]
        self._cursor += len(rows)
        return rows
