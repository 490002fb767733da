"""``embedding``: embeds a text column (or ``column.field``) of every row, one call per batch.

Also home of the ``column`` / ``column.field`` reference helpers the other built-ins use.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from genwire.generators.base import Generator
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure

# Column names follow the config's column-name rule; fields after the first dot are dataset
# keys, which may be anything except empty or containing a dot.
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[^.]+)*$")


def _check_ref(value: str) -> str:
    if not _REF.match(value):
        raise ValueError(f"expected a column name or 'column.field', got {value!r}")
    return value


ColumnRef = Annotated[str, AfterValidator(_check_ref)]
"""A validated ``column`` or ``column.field`` (``column.a.b`` for nested mappings)."""


def ref_root(ref: str) -> str:
    """The column a reference reads (``passage.text`` → ``passage``)."""
    return ref.split(".", 1)[0]


def resolve_ref(row: Mapping[str, Any], ref: str) -> Any:
    """The value ``ref`` points at in ``row``; ValueError naming the missing part."""
    value: Any = row
    walked: list[str] = []
    for part in ref.split("."):
        if not isinstance(value, Mapping):
            raise ValueError(
                f"{'.'.join(walked)!r} is a {type(value).__name__}, not a mapping, so {ref!r} cannot be read"
            )
        if part not in value:
            where = f"{'.'.join(walked)!r}" if walked else "the row"
            raise ValueError(f"{where} has no {part!r} (reading {ref!r})")
        value = value[part]
        walked.append(part)
    return value


def text_at(row: Mapping[str, Any], ref: str) -> str:
    """The non-blank string at ``ref``; ValueError otherwise (blank text cannot be embedded)."""
    value = resolve_ref(row, ref)
    if not isinstance(value, str):
        raise ValueError(f"{ref!r} is a {type(value).__name__}, not a string")
    if not value.strip():
        raise ValueError(f"{ref!r} is empty")
    return value


def checked_vectors(vectors: Any, expected: int) -> list[list[float]]:
    """Plain float lists, after checking the model returned one vector per text."""
    if not isinstance(vectors, list) or len(vectors) != expected:
        got = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
        raise ValueError(f"embedding model returned {got} vectors for {expected} texts")
    return [[float(x) for x in vector] for vector in vectors]


class EmbeddingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
        out: list[Any] = [None] * len(rows)
        positions: list[int] = []
        texts: list[str] = []
        for i, row in enumerate(rows):
            try:
                texts.append(text_at(row, self.params.column))
            except ValueError as exc:
                out[i] = RowFailure(exc)
            else:
                positions.append(i)
        if not texts:
            return out
        try:
            vectors = checked_vectors(await self.resources.model.embed(texts), len(texts))
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
