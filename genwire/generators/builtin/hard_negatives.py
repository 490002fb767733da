"""``hard-negatives``: the corpus passages most similar to a query that are not its positive."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from genwire.errors import DatasetError, exception_text
from genwire.generators.base import Generator
from genwire.generators.builtin.common import ColumnRef, checked_vectors, finite_unit_rows, resolve_ref, text_at
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.providers.request_context import cached_rows
from genwire.providers.threads import in_daemon_thread

if TYPE_CHECKING:  # numpy is imported where vectors are handled: `genwire validate` never pays for it
    import numpy as np
    import numpy.typing as npt

# Texts per embed call while indexing the corpus (a common provider request limit).
CORPUS_BATCH = 64


class HardNegativesParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    column: ColumnRef
    positive: ColumnRef
    k: Annotated[int, Field(ge=1)] = 3
    text_field: Annotated[str, Field(min_length=1)] = "text"
    id_field: Annotated[str, Field(min_length=1)] = "id"


@dataclass
class _CorpusIndex:
    ids: list[Any]
    texts: list[str]
    matrix: npt.NDArray[np.float32]  # one unit-length row per passage
    by_id: dict[str, list[int]]
    by_text: dict[str, list[int]]


def _id_key(value: Any) -> str:
    # Ids from a JSONL corpus may be ints while a column holds them as strings.
    return str(value)


class HardNegatives(Generator[HardNegativesParams]):
    metadata = GeneratorMetadata(
        name="hard-negatives",
        description="For each query, the k corpus passages most similar to it (cosine), "
        "excluding its positive passage.",
        required_resources={
            "embedder": ResourceKind.EMBEDDING_MODEL,
            "corpus": ResourceKind.DATASET,
        },
    )
    params_model = HardNegativesParams

    def __init__(self, *, column: str, params: HardNegativesParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._lock = asyncio.Lock()
        self._index: _CorpusIndex | None = None
        self._corpus: tuple[list[Any], list[str]] | None = None
        self._corpus_error: DatasetError | None = None

    @classmethod
    def reads(cls, params: HardNegativesParams) -> set[str]:
        return {params.column, params.positive}

    @classmethod
    def dataset_columns(cls, params: HardNegativesParams) -> dict[str, set[str]]:
        return {"corpus": {params.id_field, params.text_field}}

    async def _corpus_rows(self) -> tuple[list[Any], list[str]]:
        """Ids and texts of every corpus passage with non-blank text."""
        dataset = self.resources.corpus
        load = getattr(dataset, "load", None)
        if callable(load):
            await in_daemon_thread(load)  # may read files; keep the loop responsive
        ids: list[Any] = []
        texts: list[str] = []
        id_field, text_field = self.params.id_field, self.params.text_field
        n = 0
        async for row in dataset.rows():
            for field in (id_field, text_field):
                if field not in row:
                    raise DatasetError(
                        f"hard-negatives (column {self.column!r}): corpus row {n} has no "
                        f"{field!r} field (set id_field/text_field to the corpus's columns)"
                    )
            text = row[text_field]
            if not isinstance(text, str):
                raise DatasetError(
                    f"hard-negatives (column {self.column!r}): corpus row {n}: "
                    f"{text_field!r} is a {type(text).__name__}, not a string"
                )
            n += 1
            if not text.strip():
                continue  # nothing to embed, and never a useful negative
            ids.append(row[id_field])
            texts.append(text)
        if not texts:
            raise DatasetError(f"hard-negatives (column {self.column!r}): the corpus has no passages with text")
        return ids, texts

    async def _read_corpus(self) -> tuple[list[Any], list[str]]:
        """The corpus, read once. A corpus that cannot be read is a configuration problem,
        not a row problem: the error is kept and raised for every batch, stopping the run."""
        if self._corpus_error is not None:
            raise self._corpus_error
        try:
            return await self._corpus_rows()
        except DatasetError as exc:
            self._corpus_error = exc
        except Exception as exc:
            self._corpus_error = DatasetError(
                f"hard-negatives (column {self.column!r}): could not read the corpus: {exception_text(exc)}"
            )
            self._corpus_error.__cause__ = exc
        raise self._corpus_error

    async def _ensure_index(self) -> _CorpusIndex:
        import numpy as np

        # Concurrent batches wait here; the corpus is embedded once. A failed embedding
        # leaves no index, so the next batch tries again.
        async with self._lock:
            if self._index is not None:
                return self._index
            if self._corpus is None:
                self._corpus = await self._read_corpus()
            ids, texts = self._corpus
            chunks = [texts[i : i + CORPUS_BATCH] for i in range(0, len(texts), CORPUS_BATCH)]
            embedder = self.resources.embedder
            try:
                async with asyncio.TaskGroup() as group:  # cancels the rest if one call fails
                    tasks = [group.create_task(embedder.embed(chunk)) for chunk in chunks]
            except ExceptionGroup as group_error:
                # The row's error should read "rate_limited: ...", not "unhandled errors in
                # a TaskGroup".
                raise group_error.exceptions[0] from None
            vectors: list[list[float]] = []
            for chunk, task in zip(chunks, tasks, strict=True):
                vectors.extend(checked_vectors(task.result(), len(chunk)))
            matrix = finite_unit_rows(vectors)
            by_id: dict[str, list[int]] = {}
            by_text: dict[str, list[int]] = {}
            for pos, (pid, text) in enumerate(zip(ids, texts, strict=True)):
                by_id.setdefault(_id_key(pid), []).append(pos)
                by_text.setdefault(text, []).append(pos)
            self._index = _CorpusIndex(ids, texts, matrix.astype(np.float32), by_id, by_text)
            return self._index

    def _excluded(self, index: _CorpusIndex, positive: Any) -> set[int]:
        """Corpus positions that are the positive: same id, or same text as it."""
        if isinstance(positive, Mapping):
            pid = positive.get(self.params.id_field)
            ptext = positive.get(self.params.text_field)
        else:
            # A scalar is the positive's id; a string may also be the passage text itself.
            pid, ptext = positive, positive
        out: set[int] = set()
        if pid is not None:
            out.update(index.by_id.get(_id_key(pid), []))
        texts = {index.texts[p] for p in out}
        if isinstance(ptext, str):
            texts.add(ptext)
        for text in texts:
            out.update(index.by_text.get(text, []))
        return out

    def _top_k(self, index: _CorpusIndex, query: npt.NDArray[np.float32], excluded: set[int]) -> list[dict[str, Any]]:
        import numpy as np

        scores = index.matrix @ query
        if excluded:
            scores[list(excluded)] = -np.inf
        available = len(scores) - len(excluded)
        k = min(self.params.k, available)
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        # Score descending, then corpus order, so ties come out the same every run.
        ordered = sorted(top.tolist(), key=lambda p: (-float(scores[p]), p))
        return [
            {"id": index.ids[p], "text": index.texts[p], "score": round(float(scores[p]), 4)}
            for p in ordered
            if p not in excluded
        ][:k]

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._negatives(rows, None)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._negatives(rows, indices)

    async def _negatives(self, rows: list[dict[str, Any]], indices: Sequence[int] | None) -> list[Any]:
        import numpy as np

        out: list[Any] = [None] * len(rows)
        queries: list[str] = []
        positions: list[int] = []
        positives: list[Any] = []
        for i, row in enumerate(rows):
            try:
                query = text_at(row, self.params.column)
                positive = resolve_ref(row, self.params.positive)
                if positive is None:
                    raise ValueError(f"{self.params.positive!r} is empty (no positive)")
            except ValueError as exc:
                out[i] = RowFailure(exc)
                continue
            queries.append(query)
            positives.append(positive)
            positions.append(i)
        if not queries:
            return out
        try:
            index = await self._ensure_index()
        except DatasetError:
            raise
        except Exception as exc:
            # The corpus embedding failed (model error): these rows fail, the next batch
            # tries again.
            for i in positions:
                out[i] = RowFailure(exc)
            return out
        # The corpus index has no row: it is embedded per run, not cached. The batch's
        # queries are one request, cached under their rows' indices.
        cache_rows = [indices[i] for i in positions] if indices is not None else []
        try:
            with cached_rows(cache_rows):
                raw = checked_vectors(await self.resources.embedder.embed(queries), len(queries))
                vectors = finite_unit_rows(raw).astype(np.float32)
                if vectors.shape[1] != index.matrix.shape[1]:
                    raise ValueError(
                        f"query vectors have {vectors.shape[1]} dimensions, corpus vectors {index.matrix.shape[1]}"
                    )
        except Exception as exc:
            for i in positions:
                out[i] = RowFailure(exc)
            return out
        for i, vector, positive in zip(positions, vectors, positives, strict=True):
            out[i] = self._top_k(index, vector, self._excluded(index, positive))
        return out
