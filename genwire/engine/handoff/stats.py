"""Per-column statistics of an output, streamed (SPEC §24): null %, unique %, mean
length. Memory is bounded whatever the number of rows: distinct values are counted
exactly up to ``EXACT_DISTINCT`` per column, then by a HyperLogLog sketch of 2^12
one-byte registers (about 1.6 % standard error) fed with 64-bit BLAKE2b hashes — never a
set of every value."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genwire.engine.handoff.rows import Row

EXACT_DISTINCT = 4096
SHORT_TEXT = 32  # longer texts are kept in the exact set as their 8-byte hash
_P = 12  # HyperLogLog: 2^12 registers
_M = 1 << _P
_ALPHA = 0.7213 / (1 + 1.079 / _M)


def cell_text(value: Any) -> str:
    """A cell as the text its length and distinctness are measured on."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _hash64(text: str) -> bytes:
    """A deterministic 64-bit hash (Python's ``hash`` changes per process: the card would too)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


class DistinctCounter:
    """Distinct values seen: exact while few (short texts kept as they are, long ones as
    their hash), a HyperLogLog estimate past ``EXACT_DISTINCT``. Deterministic: the same
    output gives the same count in every process."""

    def __init__(self) -> None:
        self._exact: set[str | bytes] | None = set()
        self._registers = np.zeros(_M, dtype=np.uint8)

    @property
    def exact(self) -> bool:
        return self._exact is not None

    def add(self, texts: list[str]) -> None:
        if self._exact is not None:
            self._exact.update(t if len(t) <= SHORT_TEXT else _hash64(t) for t in texts)
            if len(self._exact) <= EXACT_DISTINCT:
                return
            seen, self._exact = self._exact, None  # past the cap: the sketch takes over
            self._sketch([k if isinstance(k, bytes) else _hash64(k) for k in seen])
            return
        self._sketch([_hash64(t) for t in texts])

    def _sketch(self, digests: list[bytes]) -> None:
        hashes = np.frombuffer(b"".join(digests), dtype="<u8")
        index = (hashes & np.uint64(_M - 1)).astype(np.intp)
        rest = hashes >> np.uint64(_P)
        lowest = rest & (~rest + np.uint64(1))  # the lowest set bit: a power of two, exact as a float
        rank = np.where(rest == 0, 64 - _P + 1, np.log2(lowest.astype(np.float64)) + 1).astype(np.uint8)
        np.maximum.at(self._registers, index, rank)

    def count(self) -> int:
        if self._exact is not None:
            return len(self._exact)
        estimate = _ALPHA * _M * _M / float(np.sum(np.power(2.0, -self._registers.astype(np.float64))))
        zeros = int(np.count_nonzero(self._registers == 0))
        if estimate <= 2.5 * _M and zeros:
            estimate = _M * np.log(_M / zeros)  # linear counting: better for small counts
        return round(estimate)


@dataclass
class ColumnStats:
    rows: int = 0
    nulls: int = 0
    length_sum: int = 0
    distinct: DistinctCounter = field(default_factory=DistinctCounter)

    @property
    def null_pct(self) -> float:
        return 100.0 * self.nulls / self.rows if self.rows else 0.0

    @property
    def unique_pct(self) -> float:
        """Distinct non-null values per non-null cell, at most 100 (the sketch can overshoot)."""
        present = self.rows - self.nulls
        return min(100.0, 100.0 * self.distinct.count() / present) if present else 0.0

    @property
    def mean_length(self) -> float | None:
        present = self.rows - self.nulls
        return self.length_sum / present if present else None


class OutputStats:
    """Fed chunk by chunk; ``columns`` in the output's order (a key seen later is added)."""

    def __init__(self, columns: Iterable[str] = ()) -> None:
        self.columns: dict[str, ColumnStats] = {c: ColumnStats() for c in columns}
        self.rows = 0

    def add(self, chunk: list[Row]) -> None:
        for row in chunk:
            for name in row.keys() - self.columns.keys():
                self.columns[name] = ColumnStats(rows=self.rows, nulls=self.rows)  # absent before: null
        self.rows += len(chunk)
        for name, stats in self.columns.items():
            texts = [cell_text(v) for row in chunk if (v := row.get(name)) is not None]
            stats.rows += len(chunk)
            stats.nulls += len(chunk) - len(texts)
            stats.length_sum += sum(map(len, texts))
            stats.distinct.add(texts)
