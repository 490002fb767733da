"""``embedding``: embeds a text column (or ``column.field``) of every row, one call per batch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from genwire.generators.base import Generator
from genwire.generators.builtin.common import ColumnRef, checked_vectors, texts_of
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure
from genwire.providers.request_context import cached_rows


class EmbeddingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    column: ColumnRef


class Embedding(Generator[EmbeddingParams]):
    metadata = GeneratorMetadata(
        name="embedding",
        description="Embed a text column (or column.field) of each row as a list of floats.",
        required_resources={"model": ResourceKind.EMBEDDING_MODEL},
    )
    params_model = EmbeddingParams

    @classmethod
    def reads(cls, params: EmbeddingParams) -> set[str]:
        return {params.column}

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._embed_rows(rows, None)

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._embed_rows(rows, indices)

    async def _embed_rows(self, rows: list[dict[str, Any]], indices: Sequence[int] | None) -> list[Any]:
        out, positions, texts = texts_of(rows, self.params.column)
        if not texts:
            return out
        # One request for the batch's texts, cached under all their rows' indices.
        cache_rows = [indices[i] for i in positions] if indices is not None else []
        try:
            with cached_rows(cache_rows) as asked:
                vectors = checked_vectors(await self.resources.model.embed(texts), len(texts))
                if not all(v and all(math.isfinite(x) for x in v) for v in vectors):
                    asked.discard()  # a batch with a bad vector is asked again next time
        except Exception as exc:
            # One call serves the whole batch, so its failure is every embedded row's failure;
            # the engine's failure-rate threshold decides whether the run goes on.
            for i in positions:
                out[i] = RowFailure(exc)
            return out
        for i, vector in zip(positions, vectors, strict=True):
            if not vector:
                out[i] = RowFailure(ValueError("embedding model returned an empty vector"))
            elif not all(math.isfinite(x) for x in vector):
                out[i] = RowFailure(ValueError("embedding contains non-finite values (NaN/inf)"))
            else:
                out[i] = vector
        return out
