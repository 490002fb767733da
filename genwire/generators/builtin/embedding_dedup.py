"""``embedding-dedup``: drops near-duplicate items of a list column by cosine similarity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from genwire.generators.base import Generator
from genwire.generators.builtin.common import ColumnRef, checked_vectors, finite_unit_rows, resolve_ref
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure
from genwire.providers.request_context import cached_rows

if TYPE_CHECKING:  # numpy is imported where vectors are handled: `genwire validate` never pays for it
    import numpy as np
    import numpy.typing as npt

# Equal vectors can come out a hair under 1.0 after normalisation; without this slack a
# threshold of 1.0 would keep items the model considers identical.
_EPS = 1e-9


class EmbeddingDedupParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    column: ColumnRef
    text_field: Annotated[str, Field(min_length=1)] | None = None
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.9


class EmbeddingDedup(Generator[EmbeddingDedupParams]):
    metadata = GeneratorMetadata(
        name="embedding-dedup",
        description="Drop near-duplicate items of a list column: keep an item only if its "
        "cosine similarity to every kept item is below the threshold.",
        required_resources={"embedder": ResourceKind.EMBEDDING_MODEL},
    )
    params_model = EmbeddingDedupParams

    @classmethod
    def reads(cls, params: EmbeddingDedupParams) -> set[str]:
        return {params.column}

    def _item_texts(self, row: dict[str, Any]) -> tuple[list[Any], list[str | None]]:
        """The row's items and each item's text (None: blank, nothing to compare)."""
        items = resolve_ref(row, self.params.column)
        if not isinstance(items, list | tuple):
            raise ValueError(f"{self.params.column!r} is a {type(items).__name__}, not a list")
        field = self.params.text_field
        texts: list[str | None] = []
        for n, item in enumerate(items):
            if field is not None:
                if not isinstance(item, Mapping):
                    raise ValueError(
                        f"item {n} of {self.params.column!r} is a {type(item).__name__}, not a mapping with {field!r}"
                    )
                if field not in item:
                    raise ValueError(f"item {n} of {self.params.column!r} has no {field!r}")
                text = item[field]
            else:
                text = item
                if isinstance(item, Mapping):
                    raise ValueError(
                        f"items of {self.params.column!r} are mappings; set text_field to the key holding their text"
                    )
            if not isinstance(text, str):
                raise ValueError(f"item {n} of {self.params.column!r}: text is a {type(text).__name__}, not a string")
            texts.append(text if text.strip() else None)
        return list(items), texts

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._dedup_rows(rows, None)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._dedup_rows(rows, indices)

    async def _dedup_rows(self, rows: list[dict[str, Any]], indices: Sequence[int] | None) -> list[Any]:
        import numpy as np

        out: list[Any] = [None] * len(rows)
        parsed: dict[int, tuple[list[Any], list[str | None]]] = {}
        # Each distinct text is embedded once for the whole batch.
        unique: dict[str, int] = {}
        for i, row in enumerate(rows):
            try:
                parsed[i] = self._item_texts(row)
            except ValueError as exc:
                out[i] = RowFailure(exc)
                continue
            for text in parsed[i][1]:
                if text is not None:
                    unique.setdefault(text, len(unique))
        if not parsed:
            return out
        vectors = np.zeros((0, 0))
        if unique:
            # One request for the batch's distinct texts, cached under the rows that have any.
            cache_rows = [indices[i] for i, (_, t) in parsed.items() if any(t)] if indices is not None else []
            try:
                with cached_rows(cache_rows):
                    raw = checked_vectors(await self.resources.embedder.embed(list(unique)), len(unique))
                    vectors = finite_unit_rows(raw)
            except Exception as exc:
                # One call serves the batch: its failure fails every row that needed it.
                for i, (_, texts) in parsed.items():
                    out[i] = RowFailure(exc) if any(t is not None for t in texts) else []
                return out
        for i, (items, texts) in parsed.items():
            out[i] = self._keep(items, texts, unique, vectors)
        return out

    def _keep(
        self,
        items: list[Any],
        texts: list[str | None],
        unique: dict[str, int],
        vectors: npt.NDArray[np.float64],
    ) -> list[Any]:
        kept: list[Any] = []
        kept_ids: list[int] = []
        for item, text in zip(items, texts, strict=True):
            if text is None:
                continue  # blank items carry nothing to keep and cannot be embedded
            vid = unique[text]
            # Same text is a duplicate by definition, whatever the vector arithmetic says.
            if vid in kept_ids:
                continue
            if kept_ids:
                sims = vectors[kept_ids] @ vectors[vid]
                if float(sims.max()) >= self.params.threshold - _EPS:
                    continue
            kept.append(item)
            kept_ids.append(vid)
        return kept
