"""The in-memory dataset every format shares: lazy, idempotent, thread-safe loading and
the read API (len, columns, rows, sample, row). Formats only implement ``_read``."""

from __future__ import annotations

import asyncio
import copy
import datetime
import decimal
import random
import threading
from collections.abc import AsyncIterator, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.providers.threads import in_daemon_thread

Row = dict[str, Any]

# Values that callers cannot mutate in place: rows holding only these are copied shallowly.
_IMMUTABLE = (
    str,
    int,
    float,
    bool,
    type(None),
    bytes,
    decimal.Decimal,
    datetime.date,
    datetime.time,
    datetime.timedelta,
)

# rows() yields to the event loop this often so a large dataset never starves other tasks.
_YIELD_EVERY = 1024


@dataclass(frozen=True)
class _Loaded:
    """Published in one assignment so readers never see a half-loaded dataset."""

    rows: list[Row]
    columns: list[str]
    flat: bool


def union_columns(rows: Iterable[Row]) -> list[str]:
    """Union of the rows' keys in first-seen order (a dict is an ordered set)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key not in seen:
                seen[key] = None
    return list(seen)


class LazyDataset:
    """Base class. Construction does no I/O; ``load()`` or the first read does it once."""

    kind: str = ""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    # -- subclasses -------------------------------------------------------------------

    def _read(self) -> tuple[list[Row], list[str]]:
        """Read the source; return the rows and the columns. Raise DatasetError."""
        raise NotImplementedError

    @property
    def endpoint_key(self) -> Hashable:
        return ("dataset", self.kind, str(self.path))

    # -- loading ----------------------------------------------------------------------

    def load(self) -> None:
        """Read the data if not done yet. Safe to call from several threads at once."""
        self._state()

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def _state(self) -> _Loaded:
        state = self._loaded
        if state is not None:
            return state
        with self._lock:
            if self._loaded is None:  # another thread may have loaded while we waited
                rows, columns = self._read()
                flat = all(isinstance(v, _IMMUTABLE) for row in rows for v in row.values())
                self._loaded = _Loaded(rows=rows, columns=columns, flat=flat)
            return self._loaded

    def _copy(self, row: Row, flat: bool) -> Row:
        # Nested values (JSON lists/objects, parquet structs) need a deep copy to keep
        # callers from mutating the dataset; flat rows don't.
        return dict(row) if flat else copy.deepcopy(row)

    # -- the Dataset protocol ---------------------------------------------------------

    def __len__(self) -> int:
        return len(self._state().rows)

    def __bool__(self) -> bool:
        # An empty dataset is still a dataset; also keeps `if ds:` from loading it.
        return True

    @property
    def columns(self) -> list[str]:
        return list(self._state().columns)

    async def rows(self) -> AsyncIterator[Row]:
        """Every row in file order, each a fresh copy."""
        state = self._loaded
        if state is None:
            # Loading blocks on disk; keep it off the event loop.
            state = await in_daemon_thread(self._state)
        for i, row in enumerate(state.rows):
            if i and i % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            yield self._copy(row, state.flat)

    def sample(self, n: int, seed: int) -> list[Row]:
        """``min(n, len)`` distinct rows, chosen by ``seed``; same seed, same rows."""
        if n < 0:
            raise ValueError(f"sample size must be >= 0, got {n}")
        state = self._state()
        k = min(n, len(state.rows))
        picks = random.Random(seed).sample(range(len(state.rows)), k)
        return [self._copy(state.rows[i], state.flat) for i in picks]

    def row(self, i: int) -> Row:
        state = self._state()
        if not -len(state.rows) <= i < len(state.rows):
            raise IndexError(f"row {i} out of range: dataset {self.name!r} has {len(state.rows)} rows")
        return self._copy(state.rows[i], state.flat)

    def __repr__(self) -> str:
        # Never loads: repr must be safe to call from logs and debuggers.
        size = f"{len(self._loaded.rows)} rows" if self._loaded is not None else "not loaded"
        return f"<{type(self).__name__} {self.name!r} kind={self.kind} path={str(self.path)!r} ({size})>"
