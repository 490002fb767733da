"""``keep-unique``: a gate (SPEC §21) dropping a row whose value equals a kept row's
(exactly, or after folding case and whitespace with ``normalize``). Kept rows of lower
index only: the engine calls it in index order (``in_order``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from genwire.generators.base import Generator
from genwire.generators.builtin.common import ColumnRef, resolve_ref
from genwire.generators.metadata import GeneratorMetadata
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.generators.verdict import Verdict


class KeepUniqueParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    column: ColumnRef
    normalize: bool = False


class KeepUnique(Generator[KeepUniqueParams]):
    metadata = GeneratorMetadata(
        name="keep-unique",
        description="Gate: drop a row whose value (column or column.field) equals a kept row's; "
        "`normalize: true` ignores case and whitespace.",
        required_resources={},
        gate=True,
    )
    params_model = KeepUniqueParams
    in_order = True

    def __init__(self, *, column: str, params: KeepUniqueParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._kept: dict[str, int] = {}  # key of a kept value -> the candidate that has it

    @classmethod
    def reads(cls, params: KeepUniqueParams) -> set[str]:
        return {params.column}

    def _key(self, row: dict[str, Any]) -> str:
        value = resolve_ref(row, self.params.column)
        if isinstance(value, str):
            return " ".join(value.split()).casefold() if self.params.normalize else value
        return json.dumps(value, sort_keys=True, default=str)

    async def remember(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> None:
        for row, index in zip(rows, indices, strict=True):
            try:
                self._kept.setdefault(self._key(row), index)
            except ValueError:
                continue  # it had no value here then: it cannot match one now

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(-len(rows), 0))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        out: list[Any] = []
        for row, index in zip(rows, indices, strict=True):
            try:
                key = self._key(row)
            except ValueError as exc:
                out.append(RowFailure(exc))
                continue
            first = self._kept.get(key)
            if first is None:
                self._kept[key] = index
                out.append(Verdict(True))
            else:
                out.append(Verdict(False, f"{self.params.column} equals candidate {first}'s"))
        return out


def values_it_can_take(params: BaseModel) -> int | None:
    """How many values a ``sampler`` column can take: its categories (weighted above
    zero), or the whole numbers of its range; None where they are not few and known
    (uuid, real numbers, any other generator)."""
    from genwire.generators.builtin.sampler import CategoryParams, SamplerParams, UniformParams

    sampled = params.root if isinstance(params, SamplerParams) else None
    if isinstance(sampled, CategoryParams):
        weights = sampled.weights or [1.0] * len(sampled.values)
        drawn = [v for v, w in zip(sampled.values, weights, strict=True) if w > 0]
        return len({json.dumps(v, sort_keys=True, default=str) for v in drawn})
    if isinstance(sampled, UniformParams) and sampled.integer:
        return int(sampled.high - sampled.low) + 1
    return None
