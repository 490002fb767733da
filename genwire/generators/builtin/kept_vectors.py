"""The unit vectors an embedding gate (``keep-novel``) kept, and the closest of them to each
new vector: every one compared (``ExactKept``, one matrix product a batch), or an HNSW
index (``IndexedKept``, ``usearch``) whose approximate hits are verified exactly.

Both answer the same question the same way for the rows they decide: the closest kept
row at or above a floor, by the exact float32 cosine; ties go to the row kept first. The
index is grown by single-threaded adds in the order the rows were kept, so the same rows
make the same graph: a resumed run that adds the rows an earlier session kept, in order,
finds what an uninterrupted run finds."""

from __future__ import annotations

import array
import os
import tempfile
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]

NONE = (-2.0, -1)  # (cosine, slot) when no kept row is near enough to say
# The index stores vectors as int8: its cosines are off by up to ~0.013 (measured at 384
# dimensions), so every hit within this margin below the threshold is verified exactly.
VERIFY_MARGIN = 0.03
NEIGHBOURS = 16  # approximate neighbours asked per vector; the near ones are verified
CONNECTIVITY = 16  # HNSW graph edges per node (usearch's default)
# usearch's defaults: at 64 and 32 adds were 7x cheaper, but only 87-90 % of the exact
# gate's rejections were found at 200,000 rows (99.4-100 % with these).
EXPANSION_ADD = 128  # candidates explored per add
EXPANSION_SEARCH = 64  # candidates explored per search


class Kept(Protocol):
    count: int
    candidates: array.array[int]  # of the kept rows, by slot (the order they were kept in)

    def closest_each(self, vectors: Matrix, floor: float) -> list[tuple[float, int]]:
        """For each vector, (cosine, slot) of the closest kept row when that is at least
        ``floor``, else a cosine below ``floor`` (and slot -1 when none)."""

    def vector(self, slot: int) -> Matrix:
        """The exact vector kept at ``slot``."""

    def add_many(self, vectors: Matrix, candidates: list[int]) -> None:
        """Keep ``vectors`` (unit rows), of ``candidates``, in this order."""


class ExactKept:
    """Every kept vector (float32, grown by doubling), compared with each new one."""

    def __init__(self) -> None:
        self._matrix: Matrix | None = None
        self.count = 0
        self.candidates = array.array("q")

    def closest_each(self, vectors: Matrix, floor: float) -> list[tuple[float, int]]:
        if self._matrix is None or not self.count:
            return [NONE] * len(vectors)
        scores = self._matrix[: self.count] @ vectors.T
        best = scores.argmax(axis=0)  # the first of equals: the row kept first
        return [(float(scores[b, i]), int(b)) for i, b in enumerate(best)]

    def vector(self, slot: int) -> Matrix:
        assert self._matrix is not None
        row: Matrix = self._matrix[slot]
        return row

    def add_many(self, vectors: Matrix, candidates: list[int]) -> None:
        import numpy as np

        needed = self.count + len(vectors)
        if self._matrix is None or needed > len(self._matrix):
            grown = np.zeros((max(64, 2 * needed), vectors.shape[1]), dtype=np.float32)
            if self._matrix is not None:
                grown[: self.count] = self._matrix[: self.count]
            self._matrix = grown
        self._matrix[self.count : needed] = vectors
        self.count = needed
        self.candidates.extend(candidates)

    def matrix(self) -> Matrix:
        """Every kept vector, in the order kept (an index is built from them)."""
        import numpy as np

        return self._matrix[: self.count] if self._matrix is not None else np.zeros((0, 0), np.float32)


class IndexedKept:
    """An HNSW index (usearch, int8 vectors) over the kept vectors; the exact float32
    vectors sit in an unlinked temporary file (read back only for a near hit), so memory
    holds the index alone (about 0.9 KB a kept row at 384 dimensions).

    Rows join the graph ``FLUSH`` at a time, in the order kept; the last ones (fewer than
    ``FLUSH``) wait in memory and are compared exactly. So what a vector is compared with
    depends on the count of kept rows alone, never on how candidates were batched, and a
    batch is searched in one call (usearch's per-call cost is most of a lone search's)."""

    FLUSH = 256

    def __init__(self, ndim: int) -> None:
        import numpy as np
        from usearch.index import Index

        self._index = Index(
            ndim=ndim,
            metric="cos",
            dtype="i8",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )
        self._ndim = ndim
        self._exact = tempfile.TemporaryFile(prefix="genwire-kept-")  # noqa: SIM115 (closed with the gate)
        self._graphed = 0  # rows in the graph: slots 0 .. _graphed - 1
        self._pending: Matrix = np.zeros((self.FLUSH, ndim), dtype=np.float32)  # slots from _graphed on
        self.count = 0
        self.candidates = array.array("q")

    def __del__(self) -> None:
        exact = getattr(self, "_exact", None)
        if exact is not None:
            exact.close()

    def flushes_after(self, more: int) -> bool:
        """Whether keeping ``more`` rows puts the waiting ones in the graph."""
        return self.count - self._graphed + more >= self.FLUSH

    def closest_each(self, vectors: Matrix, floor: float) -> list[tuple[float, int]]:
        import numpy as np

        out = [NONE] * len(vectors)
        if self._graphed:
            found = self._index.search(vectors, min(NEIGHBOURS, self._graphed), threads=1)
            keys = np.atleast_2d(found.keys)  # one vector: usearch gives its matches unbatched
            approximate = 1.0 - np.atleast_2d(found.distances)
            counts = np.atleast_1d(getattr(found, "counts", len(keys[0])))
            for i, vector in enumerate(vectors):
                n = int(counts[i])
                near = np.sort(keys[i][:n][approximate[i][:n] >= floor - VERIFY_MARGIN])  # slots: order kept
                if len(near):
                    scores = self._rows(near) @ vector
                    best = int(scores.argmax())  # the first of equals: the row kept first
                    out[i] = (float(scores[best]), int(near[best]))
                elif n:  # nothing near: the approximate best says only that
                    out[i] = (float(approximate[i][:n].max()), -1)
        waiting = self.count - self._graphed
        if waiting:
            scores = self._pending[:waiting] @ vectors.T
            best = scores.argmax(axis=0)
            for i, b in enumerate(best):
                if scores[b, i] > out[i][0]:  # strictly: an equal graph row was kept first
                    out[i] = (float(scores[b, i]), self._graphed + int(b))
        return out

    def vector(self, slot: int) -> Matrix:
        row: Matrix = self._rows([slot])[0] if slot < self._graphed else self._pending[slot - self._graphed]
        return row

    def add_many(self, vectors: Matrix, candidates: list[int]) -> None:
        for start in range(0, len(vectors), self.FLUSH):
            part = vectors[start : start + self.FLUSH]
            waiting = self.count - self._graphed
            room = min(len(part), self.FLUSH - waiting)
            self._pending[waiting : waiting + room] = part[:room]
            self.count += room
            if self.count - self._graphed == self.FLUSH:
                self._flush()
            if room < len(part):
                self._pending[: len(part) - room] = part[room:]
                self.count += len(part) - room
        self.candidates.extend(candidates)

    def _flush(self) -> None:
        import numpy as np

        rows = self._pending[: self.count - self._graphed]
        os.pwrite(self._exact.fileno(), rows.tobytes(), self._graphed * self._row)
        # One thread: the graph depends on the order of the adds, and only on it.
        self._index.add(np.arange(self._graphed, self.count, dtype=np.uint64), rows, threads=1)
        self._graphed = self.count

    @property
    def memory_bytes(self) -> int:
        """What the index holds in memory (the exact vectors are on disk)."""
        return int(self._index.memory_usage) + self.candidates.itemsize * len(self.candidates) + self._pending.nbytes

    @property
    def _row(self) -> int:
        return self._ndim * 4

    def _rows(self, slots: object) -> Matrix:
        """The exact vectors of graphed rows ``slots`` (one read per row)."""
        import numpy as np

        fd, row = self._exact.fileno(), self._row
        data = b"".join(os.pread(fd, row, int(s) * row) for s in slots)  # type: ignore[attr-defined]
        return np.frombuffer(data, dtype=np.float32).reshape(-1, self._ndim)
