"""The unit vectors an embedding gate (``keep-novel``) kept, and the closest of them to each
new vector: every one compared (``ExactKept``, one matrix product a batch), or an
inverted-file index (``IndexedKept`` in ``kept_index``, faiss) whose proposals are verified
exactly.

Both answer the same question the same way for the rows they decide: the closest kept
row at or above a floor, by the exact float32 cosine; ties go to the row kept first."""

from __future__ import annotations

import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]

NONE = (-2.0, -1)  # (cosine, slot) when no kept row is near enough to say


class ExactKept:
    """Every kept vector (float32, grown by doubling), compared with each new one.
    ``kept_index.IndexedKept`` answers the same calls the same way for the rows it finds."""

    def __init__(self) -> None:
        self._matrix: Matrix | None = None
        self.count = 0
        self.candidates = array.array("q")

    def closest_each(self, vectors: Matrix, floor: float) -> list[tuple[float, int]]:
        """For each vector, (cosine, slot) of the closest kept row when that is at least
        ``floor``, else a cosine below ``floor`` (and slot -1 when none)."""
        if self._matrix is None or not self.count:
            return [NONE] * len(vectors)
        scores = self._matrix[: self.count] @ vectors.T
        best = scores.argmax(axis=0)  # the first of equals: the row kept first
        return [(float(scores[b, i]), int(b)) for i, b in enumerate(best)]

    def candidate(self, slot: int) -> int:
        """The candidate number of the row kept at ``slot``."""
        return self.candidates[slot]

    def vector(self, slot: int) -> Matrix:
        """The exact vector kept at ``slot``."""
        assert self._matrix is not None
        row: Matrix = self._matrix[slot]
        return row

    def add_many(self, vectors: Matrix, candidates: list[int]) -> None:
        """Keep ``vectors`` (unit rows), of ``candidates``, in this order."""
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
