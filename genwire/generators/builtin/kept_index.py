"""``keep-novel``'s index over the rows it kept, for runs past ``index_from`` of them: an
inverted file (faiss ``IndexIVFPQFastScan``) proposes each new vector's nearest kept rows,
and each proposal is checked against its exact float32 vector, kept in a temporary file.

Why an inverted file (issue 53, measured by ``benchmarks/gates.py --parts scale``): near
duplicates sit in the same cluster of the kept rows, so probing the few clusters nearest a
vector finds them; adding a row costs one comparison with the cluster centres (an HNSW
graph's add explored 128 neighbours: 0.56 ms a row at 100,000 rows against 0.04), and the
rows are held as 4-bit product-quantised codes (24 bytes at 384 dimensions, scanned with
SIMD), so a million rows take about 41 MB. The codes' scores are coarse, so the gate never
trusts them: the ``PROPOSALS`` best-scored rows are read back and compared exactly.

The clusters and codebooks are learnt from the first ``index_from`` kept rows (at most
``TRAINING_ROWS``), and learnt again, with more clusters, from the first ``TRAINING_ROWS``
once the kept rows are ``GROWTH`` times as many (2,048 rows: 64 clusters; 20,480: 512): an
index trained early keeps the exact comparisons cheap, one retrained keeps its clusters
small as the run grows.

Deterministic by construction: every training is by one thread with a fixed seed, at a
count of kept rows; rows join the index ``FLUSH`` at a
time in the order kept (the last ones wait in memory and are compared exactly); a vector's
proposals depend on that vector and on the rows in the index alone, not on the others
searched with it. So what a vector is compared with depends on the count of kept rows alone,
and a resumed run that re-adds the rows an earlier session kept, in order, finds what an
uninterrupted run finds."""

from __future__ import annotations

import array
import os
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from genwire.generators.builtin.kept_vectors import NONE

if TYPE_CHECKING:
    from genwire.generators.builtin.kept_vectors import Matrix

PROBES = 3  # clusters searched per vector (2: 99.3-99.5 % of the exact gate's rejections at 1M rows)
PROPOSALS = 4  # best-scored rows per vector checked exactly (8 found no more at 1M rows)
MOST_LISTS = 512  # clusters, at most (1M rows: 49.5 us a candidate, recall 99.5 %)
ROWS_PER_LIST = 32  # training rows per cluster, at least (k-means wants a few per centre)
# the first kept rows the clusters are learnt from, at most: 40 a cluster (3 s in its thread).
# At 400,000 rows, 16,384 (32 a cluster) found 97.9 % of the exact gate's rejections, 20,480 100 %.
TRAINING_ROWS = 20_480
GROWTH = 10  # retrained (more clusters) when the kept rows are this many times its training rows
SWITCH_AFTER = 4  # the next index, trained from N kept rows, takes over at N + N / this (or a flush later)
TRAINING_ROUNDS = 10  # k-means iterations (faiss's default for an inverted file)


def lists_for(rows: int) -> int:
    """The clusters of an index trained on ``rows``: a power of two, 1 to ``MOST_LISTS``."""
    lists = 1
    while lists * 2 <= min(MOST_LISTS, rows // ROWS_PER_LIST):
        lists *= 2
    return lists


def subvectors_for(ndim: int) -> int:
    """Product-quantiser parts: about 8 dimensions each (48 at 384), dividing ``ndim``."""
    wanted = max(1, ndim // 8)
    return max(m for m in range(1, wanted + 1) if ndim % m == 0)


class IndexedKept:
    """The kept rows in an inverted file, built from the rows kept so far (``first``, in
    order: the training set), then grown ``FLUSH`` rows at a time."""

    FLUSH = 256

    def __init__(self, first: Matrix, candidates: list[int]) -> None:
        import faiss
        import numpy as np

        faiss.omp_set_num_threads(1)  # training and adds in one thread: the same rows, the same index
        self._ndim = int(first.shape[1])
        self._exact = tempfile.TemporaryFile(prefix="genwire-kept-")  # noqa: SIM115 (closed with the gate)
        # The indexed rows' candidate numbers, on disk too: read only to name the row a
        # rejected one is close to (8 bytes a row in memory were 8 MB at 1M rows).
        self._numbers = tempfile.TemporaryFile(prefix="genwire-kept-")  # noqa: SIM115 (closed with the gate)
        self._indexed = 0  # rows in the index: slots 0 .. _indexed - 1
        self._pending: Matrix = np.zeros((self.FLUSH, self._ndim), dtype=np.float32)  # slots from _indexed on
        self._pending_candidates = array.array("q")  # of the rows waiting, in order
        self.count = 0
        self._trained_on = min(len(first), TRAINING_ROWS)
        self._owner, self._index = self._trained(first[: self._trained_on])
        self._training: _Training | None = None  # the next index, learning in a thread
        self.add_many(first, candidates)

    def _trained(self, rows: Matrix) -> tuple[Any, Any]:
        """An empty inverted file whose clusters and codebooks are learnt from ``rows``:
        (the factory's index, which owns the memory; the same index as its own class)."""
        import faiss
        import numpy as np

        lists = lists_for(len(rows))
        factory = f"IVF{lists},PQ{subvectors_for(self._ndim)}x4fs"
        owner = faiss.index_factory(self._ndim, factory, faiss.METRIC_INNER_PRODUCT)
        index: Any = faiss.downcast_index(owner)  # a view: the factory's index owns the memory
        for clustering in (index.cp, index.pq.cp):
            clustering.niter = TRAINING_ROUNDS
            clustering.min_points_per_centroid = 1  # few rows make a coarse index, not a warning on stderr
        index.nprobe = min(PROBES, lists)
        index.train(np.ascontiguousarray(rows, dtype=np.float32))
        return owner, index

    def __del__(self) -> None:
        for name in ("_exact", "_numbers"):
            held = getattr(self, name, None)
            if held is not None:
                held.close()

    def flushes_after(self, more: int) -> bool:
        """Whether keeping ``more`` rows puts the waiting ones in the index."""
        return self.count - self._indexed + more >= self.FLUSH

    def closest_each(self, vectors: Matrix, floor: float) -> list[tuple[float, int]]:
        import numpy as np

        out = [NONE] * len(vectors)
        if self._indexed:
            _, proposed = self._index.search(vectors, min(PROPOSALS, self._indexed))
            # Each vector's proposals in the order kept (ties go to the first), checked exactly
            # in one pass for the batch: per-vector numpy calls cost more than the search.
            absent = np.iinfo(np.int64).max
            slots = np.where(proposed >= 0, proposed, absent)
            slots.sort(axis=1)
            present = slots != absent
            rows = self._rows(slots[present])
            scores = np.full(slots.shape, -np.inf, dtype=np.float32)
            scores[present] = np.einsum("ij,ij->i", rows, np.repeat(vectors, present.sum(axis=1), axis=0))
            best = scores.argmax(axis=1)
            for i in np.flatnonzero(present.any(axis=1)).tolist():
                out[i] = (float(scores[i, best[i]]), int(slots[i, best[i]]))
        waiting = self.count - self._indexed
        if waiting:
            near = self._pending[:waiting] @ vectors.T
            closest = near.argmax(axis=0)
            for j, b in enumerate(closest):
                if near[b, j] > out[j][0]:  # strictly: an equal indexed row was kept first
                    out[j] = (float(near[b, j]), self._indexed + int(b))
        return out

    def candidate(self, slot: int) -> int:
        """The candidate number of the row kept at ``slot``."""
        if slot >= self._indexed:
            return self._pending_candidates[slot - self._indexed]
        number = array.array("q", os.pread(self._numbers.fileno(), 8, slot * 8))
        return number[0]

    def vector(self, slot: int) -> Matrix:
        row: Matrix = self._rows([slot])[0] if slot < self._indexed else self._pending[slot - self._indexed]
        return row

    def add_many(self, vectors: Matrix, candidates: list[int]) -> None:
        for start in range(0, len(vectors), self.FLUSH):
            part = vectors[start : start + self.FLUSH]
            numbers = candidates[start : start + self.FLUSH]
            waiting = self.count - self._indexed
            room = min(len(part), self.FLUSH - waiting)
            self._pending[waiting : waiting + room] = part[:room]
            self._pending_candidates.extend(numbers[:room])
            self.count += room
            if self.count - self._indexed == self.FLUSH:
                self._flush()
            if room < len(part):
                self._pending[: len(part) - room] = part[room:]
                self._pending_candidates.extend(numbers[room:])
                self.count += len(part) - room

    def _flush(self) -> None:
        rows = self._pending[: self.count - self._indexed]
        os.pwrite(self._exact.fileno(), rows.tobytes(), self._indexed * self._row)
        os.pwrite(self._numbers.fileno(), self._pending_candidates.tobytes(), self._indexed * 8)
        del self._pending_candidates[:]
        self._index.add(rows)  # ids are the order of the adds: slots
        self._indexed = self.count
        training = self._training
        if training is not None:
            if self._indexed >= training.switch_at:
                self._switch(training)
        elif self._indexed >= GROWTH * self._trained_on and lists_for(min(self._indexed, TRAINING_ROWS)) > int(
            self._index.nlist
        ):
            self._training = _Training(self, self._indexed)

    def _switch(self, training: _Training) -> None:
        """The index trained in the background takes over (waiting for it if need be), with
        the rows kept since it started added: at a count of kept rows alone."""
        self._owner, self._index = training.result()
        for start in range(training.added, self._indexed, TRAINING_ROWS):  # a part at a time: bounded memory
            self._index.add(self._rows_between(start, min(start + TRAINING_ROWS, self._indexed)))
        self._trained_on = training.trained_on
        self._training = None

    def _rows_between(self, start: int, stop: int) -> Matrix:
        """The exact vectors of indexed slots ``start`` .. ``stop - 1`` (one read)."""
        import numpy as np

        data = os.pread(self._exact.fileno(), (stop - start) * self._row, start * self._row)
        return np.frombuffer(data, dtype=np.float32).reshape(-1, self._ndim)

    @property
    def clusters(self) -> int:
        """The clusters the index was trained with last."""
        return int(self._index.nlist)

    @property
    def memory_bytes(self) -> int:
        """What the index holds in memory (the exact vectors and the candidates' numbers
        are on disk): each row's code and id, the cluster centres, the rows waiting."""
        index = self._index
        codes = self._indexed * (int(index.code_size) + 8) + int(index.nlist) * self._ndim * 4
        return codes + self._pending.nbytes

    @property
    def _row(self) -> int:
        return self._ndim * 4

    def _rows(self, slots: object) -> Matrix:
        """The exact vectors of indexed rows ``slots`` (one read per row)."""
        import numpy as np

        fd, row = self._exact.fileno(), self._row
        data = b"".join(os.pread(fd, row, int(s) * row) for s in slots)  # type: ignore[attr-defined]
        return np.frombuffer(data, dtype=np.float32).reshape(-1, self._ndim)


class _Training:
    """The next index of ``kept``, trained on its first rows and given the rows indexed
    when it started, in a thread (faiss releases the GIL), while ``kept`` goes on with
    the index it has: it takes over a quarter as many kept rows later (20,480: 5,120). On a run waiting
    on its gate, training in line had stalled every batch behind it (2.5 s for 512
    clusters: a tenth of a 20,000-row run at 50 ms answers)."""

    def __init__(self, kept: IndexedKept, indexed: int) -> None:
        self.trained_on = min(indexed, TRAINING_ROWS)
        self.added = indexed
        self.switch_at = indexed + max(IndexedKept.FLUSH, indexed // SWITCH_AFTER)
        # Read now, on the gate's thread: the file is only appended to, these rows stay as read.
        rest = [kept._rows_between(s, min(s + TRAINING_ROWS, indexed)) for s in range(0, indexed, TRAINING_ROWS)]
        first = rest[0][: self.trained_on]
        self._made: tuple[Any, Any] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._train, args=(kept, first, rest), name="genwire-kept-index", daemon=True
        )
        self._thread.start()

    def _train(self, kept: IndexedKept, first: Matrix, rest: list[Matrix]) -> None:
        try:
            owner, index = kept._trained(first)
            for rows in rest:
                index.add(rows)
            self._made = owner, index
        except BaseException as exc:  # handed to the gate's thread at the switch
            self._error = exc

    def result(self) -> tuple[Any, Any]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._made is not None
        return self._made
