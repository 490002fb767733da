"""Row positions for generators whose values depend on the row, not on the batch."""

from __future__ import annotations

from typing import Any

INDEX_KEY = "_index"  # set by the engine: the row's position in the whole run


class RowIndexer:
    """The run's index of each row (``_index``); outside the engine, where rows carry
    none, a running count that continues across calls."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self, row: dict[str, Any]) -> int:
        index = row.get(INDEX_KEY)
        if not isinstance(index, int):
            index = self._next
        self._next = max(self._next, index + 1)
        return index
