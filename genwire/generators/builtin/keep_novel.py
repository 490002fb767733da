"""``keep-novel``: a gate (SPEC §21) dropping a row whose text is as close as
``threshold`` (cosine similarity of the embedding model's vectors) to a kept row's. Kept
rows of lower index only: the engine calls it in index order (``in_order``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from genwire.generators.base import Generator
from genwire.generators.builtin.common import ColumnRef, checked_vectors, finite_unit_rows, text_at, texts_of
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.generators.verdict import Verdict
from genwire.providers.request_context import cached_rows

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

REMEMBER_CHUNK = 256  # texts per embedding request when an earlier session's rows are replayed


class KeepNovelParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    column: ColumnRef
    threshold: Annotated[float, Field(gt=-1, le=1)] = 0.92


class KeptVectors:
    """The kept rows' unit vectors (float32, grown by doubling) and their candidates."""

    def __init__(self) -> None:
        self._matrix: npt.NDArray[np.float32] | None = None
        self.count = 0
        self.candidates: list[int] = []

    def check_length(self, length: int) -> None:
        """ValueError unless vectors of ``length`` compare with the kept ones (a model
        whose `dimensions` is not set may still answer with a wrong length)."""
        if self._matrix is not None and self.count and length != self._matrix.shape[1]:
            raise ValueError(
                f"embedding model returned vectors of {length} dimensions; the kept rows' have {self._matrix.shape[1]}"
            )

    def closest_each(self, vectors: npt.NDArray[np.float64]) -> list[tuple[float, int]]:
        """For each vector, (similarity, candidate) of the closest row kept so far; (-2, -1)
        if none. One matrix product for the batch (the rows it will keep are compared by
        the caller, in order)."""
        if self._matrix is None or not self.count:
            return [(-2.0, -1)] * len(vectors)
        scores = self._matrix[: self.count] @ vectors.astype(self._matrix.dtype).T
        best = scores.argmax(axis=0)
        return [(float(scores[b, i]), self.candidates[int(b)]) for i, b in enumerate(best)]

    def add(self, vector: npt.NDArray[np.float64], candidate: int) -> None:
        import numpy as np

        if self._matrix is None or self.count == len(self._matrix):
            grown = np.zeros((max(64, 2 * self.count), len(vector)), dtype=np.float32)
            if self._matrix is not None:
                grown[: self.count] = self._matrix[: self.count]
            self._matrix = grown
        self._matrix[self.count] = vector
        self.count += 1
        self.candidates.append(candidate)


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
        self._kept = KeptVectors()

    @classmethod
    def reads(cls, params: KeepNovelParams) -> set[str]:
        return {params.column}

    async def _vectors(self, texts: list[str], indices: Sequence[int]) -> npt.NDArray[np.float64]:
        """One request for the texts, cached under their rows (as the ``embedding`` column)."""
        with cached_rows(list(indices)) as asked:
            try:
                vectors = finite_unit_rows(checked_vectors(await self.resources.model.embed(texts), len(texts)))
                self._kept.check_length(vectors.shape[1])
                return vectors
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
            for vector, (_, index) in zip(vectors, chunk, strict=True):
                self._kept.add(vector, index)

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._decide(rows, range(-len(rows), 0), cache=False)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._decide(rows, indices, cache=True)

    async def _decide(self, rows: list[dict[str, Any]], indices: Sequence[int], *, cache: bool) -> list[Any]:
        out, positions, texts = texts_of(rows, self.params.column)
        if not texts:
            return out
        try:
            vectors = await self._vectors(texts, [indices[i] for i in positions] if cache else [])
        except Exception as exc:  # one call serves the batch: its failure is each row's
            for i in positions:
                out[i] = RowFailure(exc)
            return out
        threshold = self.params.threshold
        before = self._kept.closest_each(vectors)  # the rows kept before this batch
        kept_here: list[int] = []  # positions in ``vectors`` of the rows this batch keeps
        for j, (i, vector) in enumerate(zip(positions, vectors, strict=True)):
            similarity, candidate = before[j]
            if kept_here:  # and the rows of lower index this batch kept
                scores = vectors[kept_here] @ vector
                best = int(scores.argmax())
                if scores[best] > similarity:
                    similarity, candidate = float(scores[best]), indices[positions[kept_here[best]]]
            if similarity >= threshold:
                out[i] = Verdict(
                    False,
                    f"{self.params.column}: cosine {similarity:.3f} to candidate {candidate} (threshold {threshold:g})",
                )
            else:
                kept_here.append(j)
                out[i] = Verdict(True)
        for j in kept_here:
            self._kept.add(vectors[j], indices[positions[j]])
        return out
