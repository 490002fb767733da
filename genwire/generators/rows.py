"""Row positions for generators whose values depend on the row, not on the batch."""

from __future__ import annotations

from collections.abc import Sequence


class RowIndexer:
    """The run's index of each row of a batch: the engine passes them beside the rows
    (``Generator.generate_batch``); outside the engine, where there are none, a running
    count that continues across calls."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self, count: int, indices: Sequence[int] | None = None) -> list[int]:
        taken = list(range(self._next, self._next + count) if indices is None else indices)
        if taken:
            self._next = max(self._next, max(taken) + 1)
        return taken
