"""The rows a Ray run hands out in blocks: the rows its checkpoint lacks, or, in a gated
run (SPEC §21), the candidates its ``CandidatePlan`` schedules as the kept rows come in."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["BlockRows"]


class BlockRows:
    """``take(count)`` gives the next rows in order. Without a feed they are known at
    once (``left`` counts them); with one, ``left`` is what the plan scheduled and no block
    took yet, and ``more()`` asks the plan again (after a block's rows were recorded)."""

    def __init__(self, indices: Iterator[int], feed: Iterator[list[int]] | None = None) -> None:
        self._feed = feed
        self._todo: list[int] = list(indices) if feed is None else []  # ints: small beside rows
        self._cursor = 0
        self.more()  # a plan's first window: what it wants in flight now (the blocks are sized from it)

    @property
    def left(self) -> int:
        return len(self._todo) - self._cursor

    def more(self) -> bool:
        """Whether rows are waiting, asking the feed for more when none are."""
        if self._feed is not None and not self.left:
            del self._todo[: self._cursor]
            self._cursor = 0
            for batch in self._feed:
                if not batch:  # the plan: enough in flight for now
                    break
                self._todo.extend(batch)
        return self.left > 0

    def take(self, count: int) -> list[int]:
        rows = self._todo[self._cursor : self._cursor + count]
        self._cursor += len(rows)
        return rows
