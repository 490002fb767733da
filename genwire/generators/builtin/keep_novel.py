"""``keep-novel``: a gate (SPEC §21) dropping a row whose text is as close as
``threshold`` (cosine similarity of the embedding model's vectors) to a kept row's. Kept
rows of lower index only: the engine calls it in index order (``in_order``)."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from genwire.generators.base import Generator
from genwire.generators.builtin.blas_threads import use_one_blas_thread
from genwire.generators.builtin.common import ColumnRef, checked_vectors, finite_unit_rows, text_at, texts_of
from genwire.generators.builtin.kept_index import IndexedKept
from genwire.generators.builtin.kept_vectors import ExactKept
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.generators.verdict import Verdict
from genwire.providers.request_context import cached_rows

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

REMEMBER_CHUNK = 256  # texts per embedding request when an earlier session's rows are replayed


# A cosine this close to the threshold is computed again on its own, in float64: a matrix
# product's last bits depend on the shapes multiplied (how candidates were batched).
SETTLE_WITHIN = 1e-3


def settled(
    similarity: float, vector: npt.NDArray[np.float32], closest: Callable[[], Any] | None, threshold: float
) -> float:
    """``similarity`` (a matrix product's) near the threshold, or to be reported, made the
    same however the vectors were batched: the two vectors' dot product in float64."""
    if closest is None or similarity < threshold - SETTLE_WITHIN:
        return similarity
    import numpy as np

    return float(np.dot(vector.astype(np.float64), np.asarray(closest(), dtype=np.float64)))


# Kept rows from which `index: auto` compares through the index: a matrix product over
# 20,000 rows had cost a 20,000-candidate run 5 s of CPU; the index, retrained as it grows
# (kept_index), finds 99.5 % of the exact gate's rejections at 1M rows.
INDEX_FROM = 2_048
FEWEST_TO_INDEX = 64  # kept rows the index is trained on, at least (its codebooks: 16 codes a part)


class KeepNovelParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    column: ColumnRef
    threshold: Annotated[float, Field(gt=-1, le=1)] = 0.92
    # auto: every kept row compared until `index_from` are kept, then the index (trained
    # on them; with the scale extra installed); exact: every kept row, always.
    index: Literal["auto", "exact"] = "auto"
    index_from: Annotated[int, Field(ge=FEWEST_TO_INDEX)] = INDEX_FROM


@functools.cache
def index_installed() -> bool:
    """Whether faiss can be imported (looked up, not imported: that waits for the index)."""
    return importlib.util.find_spec("faiss") is not None


class KeepNovel(Generator[KeepNovelParams]):
    metadata = GeneratorMetadata(
        name="keep-novel",
        description="Gate: drop a row whose text (column or column.field) has a cosine similarity of "
        "at least `threshold` (default 0.92) to a kept row's, by the embedding model in slot `model`.",
        required_resources={"model": ResourceKind.EMBEDDING_MODEL},
        gate=True,
    )
    params_model = KeepNovelParams
    in_order = True

    def __init__(self, *, column: str, params: KeepNovelParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._kept: ExactKept | IndexedKept = ExactKept()
        self._length: int | None = None  # of the kept vectors
        # The batches' vectors asked for ahead of their turn (or why they could not be), by
        # their indices: one entry per batch waiting at this gate (64 rows x 384 f32: 98 kB).
        self._asked: dict[tuple[int, ...], npt.NDArray[np.float32] | Exception] = {}

    @classmethod
    def reads(cls, params: KeepNovelParams) -> set[str]:
        return {params.column}

    def _check_length(self, length: int) -> None:
        """ValueError unless vectors of ``length`` compare with the kept ones (a model
        whose `dimensions` is not set may still answer with another length)."""
        if self._length is not None and length != self._length:
            raise ValueError(
                f"embedding model returned vectors of {length} dimensions; the kept rows' have {self._length}"
            )

    def _keep(self, vectors: npt.NDArray[np.float32], candidates: list[int]) -> None:
        """Keep the rows (in candidate order); from `index_from` kept rows (`index: auto`)
        in the index, trained on and built from every kept row in order."""
        if not candidates:
            return
        self._length = vectors.shape[1]
        kept = self._kept
        if isinstance(kept, ExactKept) and self._indexed_from(kept.count + len(candidates)):
            # The index is trained on exactly the first `index_from` rows, however they came
            # (a resume replays them in chunks that cross the count)
            first = max(0, self.params.index_from - kept.count)
            kept.add_many(vectors[:first], candidates[:first])
            import faiss  # noqa: F401  (loaded first, so its own BLAS is limited too)

            use_one_blas_thread()
            self._kept = IndexedKept(kept.matrix(), list(kept.candidates))  # in the order kept
            vectors, candidates = vectors[first:], candidates[first:]
        self._kept.add_many(vectors, candidates)

    def _keep_alone(self, vectors: npt.NDArray[np.float32], candidates: list[int]) -> None:
        use_one_blas_thread()
        self._keep(vectors, candidates)

    def _indexed_from(self, count: int) -> bool:
        """Whether ``count`` kept rows are compared through the index."""
        # auto without the scale extra: every row compared, as documented
        return self.params.index == "auto" and count >= self.params.index_from and index_installed()

    async def _vectors(self, texts: list[str], indices: Sequence[int]) -> npt.NDArray[np.float32]:
        """One request for the texts, cached under their rows (as the ``embedding`` column)."""
        with cached_rows(list(indices)) as asked:
            try:
                vectors = finite_unit_rows(checked_vectors(await self.resources.model.embed(texts), len(texts)))
                self._check_length(vectors.shape[1])
                return vectors.astype("float32")
            except ValueError:
                asked.discard()  # a bad answer is asked again next time
                raise

    async def remember(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> None:
        usable = []
        for row, index in zip(rows, indices, strict=True):
            try:
                usable.append((text_at(row, self.params.column), index))
            except ValueError:
                continue
        for start in range(0, len(usable), REMEMBER_CHUNK):
            chunk = usable[start : start + REMEMBER_CHUNK]
            vectors = await self._vectors([t for t, _ in chunk], [i for _, i in chunk])
            await asyncio.to_thread(self._keep_alone, vectors, [i for _, i in chunk])  # a resume rebuilds the index

    async def ahead(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> None:
        """The batch's embedding request, sent before its turn (it does not depend on the
        rows kept before): the batches behind the one being judged wait with their vectors."""
        _, positions, texts = texts_of(rows, self.params.column)
        if not texts or self._length is None:
            # Until a row is kept, the vectors' length is unknown: an answer of another length
            # is found at the turn, and must not be cached, so the turn asks (the first batches).
            return
        try:
            self._asked[tuple(indices)] = await self._vectors(texts, [indices[i] for i in positions])
        except Exception as exc:  # the rows' failure, at their turn
            self._asked[tuple(indices)] = exc

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._decide(rows, range(-len(rows), 0), cache=False)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._decide(rows, indices, cache=True)

    async def _decide(self, rows: list[dict[str, Any]], indices: Sequence[int], *, cache: bool) -> list[Any]:
        out, positions, texts = texts_of(rows, self.params.column)
        if not texts:
            return out
        asked = self._asked.pop(tuple(indices), None) if cache else None
        try:
            if asked is None:
                vectors = await self._vectors(texts, [indices[i] for i in positions] if cache else [])
            elif isinstance(asked, Exception):
                raise asked
            else:
                vectors = asked
                self._check_length(vectors.shape[1])  # rows kept since it was asked may say another length
        except Exception as exc:  # one call serves the batch: its failure is each row's
            for i in positions:
                out[i] = RowFailure(exc)
            return out
        candidates = [indices[i] for i in positions]
        threshold = self.params.threshold
        # Off the event loop (numpy and faiss release the GIL): the batches behind this
        # one keep sending their requests while it is judged.
        judged = await asyncio.to_thread(self._judge, vectors, candidates)
        for i, (similarity, candidate) in zip(positions, judged, strict=True):
            if similarity >= threshold:
                why = f"cosine {similarity:.3f} to candidate {candidate} (threshold {threshold:g})"
                out[i] = Verdict(False, f"{self.params.column}: {why}")
            else:
                out[i] = Verdict(True)
        return out

    def _judge(self, vectors: npt.NDArray[np.float32], candidates: list[int]) -> list[tuple[float, int]]:
        """(cosine, candidate) of the closest row kept before each vector (below the
        threshold: kept, and so compared with the ones after it). Each vector is judged
        against exactly the rows kept before it, in a way that depends on their count
        alone (every row, or the index and the rows waiting to join it), however the
        candidates are batched."""
        out: list[tuple[float, int]] = []
        use_one_blas_thread()
        while len(out) < len(vectors):
            out += self._judge_segment(vectors[len(out) :], candidates[len(out) :])
        return out

    def _judge_segment(self, vectors: npt.NDArray[np.float32], candidates: list[int]) -> list[tuple[float, int]]:
        """The rows kept before, in one call; the rows kept here compared in order. Stops
        after a row whose keeping changes how the kept rows are compared (the index is
        built, or rows join its graph)."""
        threshold = self.params.threshold
        kept = self._kept
        before = kept.closest_each(vectors, threshold)
        kept_here: list[int] = []  # positions in ``vectors`` of the rows kept here
        out: list[tuple[float, int]] = []
        for j, vector in enumerate(vectors):
            similarity, slot = before[j]
            closest: Callable[[], Any] | None = functools.partial(kept.vector, slot) if slot >= 0 else None
            candidate = kept.candidate(slot) if slot >= 0 else -1
            if kept_here:
                scores = vectors[kept_here] @ vector
                best = int(scores.argmax())
                if scores[best] > similarity:
                    similarity, candidate = float(scores[best]), candidates[kept_here[best]]
                    closest = functools.partial(vectors.__getitem__, kept_here[best])
            similarity = settled(similarity, vector, closest, threshold)
            out.append((similarity, candidate))
            if similarity < threshold:
                kept_here.append(j)
                if self._changes_after(len(kept_here)):
                    break
        self._keep(vectors[kept_here], [candidates[j] for j in kept_here])
        return out

    def _changes_after(self, more: int) -> bool:
        kept = self._kept
        if isinstance(kept, ExactKept):
            return self._indexed_from(kept.count + more)
        return kept.flushes_after(more)
