"""``sampler``: draws a category, a uniform number or a UUID per row, reproducibly."""

from __future__ import annotations

import _random
import copy
import math
import random
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from genwire.generators.base import Generator
from genwire.generators.builtin.common import row_seeds
from genwire.generators.metadata import GeneratorMetadata
from genwire.generators.resources import Resources
from genwire.generators.rows import RowIndexer

KINDS = ("category", "uniform", "uuid")


class CategoryParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Literal["category"]
    values: Annotated[list[Any], Field(min_length=1)]
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = None

    @model_validator(mode="after")
    def _check_weights(self) -> CategoryParams:
        if self.weights is None:
            return self
        if len(self.weights) != len(self.values):
            raise ValueError(
                f"weights has {len(self.weights)} entries but values has {len(self.values)}; give one weight per value"
            )
        if not any(w > 0 for w in self.weights):
            raise ValueError("weights are all zero; at least one weight must be positive")
        return self


class UniformParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Literal["uniform"]
    low: Annotated[float, Field(allow_inf_nan=False)]
    high: Annotated[float, Field(allow_inf_nan=False)]
    integer: bool = False

    @model_validator(mode="after")
    def _check_bounds(self) -> UniformParams:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low:g}) must be less than high ({self.high:g})")
        if self.integer and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError(f"integer: true needs whole-number bounds, got low={self.low:g}, high={self.high:g}")
        return self


class UuidParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Literal["uuid"]


class SamplerParams(RootModel[CategoryParams | UniformParams | UuidParams]):
    """Discriminated on ``kind``; use ``.root`` for the chosen variant."""

    model_config = ConfigDict(defer_build=True)  # built when a sampler column is validated

    root: Annotated[CategoryParams | UniformParams | UuidParams, Field(discriminator="kind")]

    @model_validator(mode="before")
    @classmethod
    def _check_kind(cls, data: Any) -> Any:
        # pydantic's own messages for a missing or unknown tag are cryptic
        # ("Unable to extract tag using discriminator"); say what is expected instead.
        if isinstance(data, BaseModel):
            return data
        expected = ", ".join(KINDS)
        if not isinstance(data, dict):
            raise ValueError(f"sampler params must be a mapping with 'kind' (one of {expected})")
        if "kind" not in data:
            raise ValueError(f"sampler params need 'kind': one of {expected}")
        if data["kind"] not in KINDS:
            raise ValueError(f"unknown sampler kind {data['kind']!r}; expected one of {expected}")
        return data


class Sampler(Generator[SamplerParams]):
    metadata = GeneratorMetadata(
        name="sampler",
        description="Sample a category (optionally weighted), a uniform number, or a UUID per row.",
        required_resources={},
    )
    params_model = SamplerParams

    def __init__(self, *, column: str, params: SamplerParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._row_index = RowIndexer()
        self._rng = random.Random()

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return self._sample(self._row_index(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return self._sample(self._row_index(len(rows), indices))

    def _sample(self, indices: list[int]) -> list[Any]:
        # One RNG state per row index, so a row's value does not depend on batch size or
        # on the order in which batches run: one generator, seeded again for each row
        # (the C seeding; Random.seed adds only the handling of str and bytes seeds, and
        # nothing drawn here reads the gauss state it resets).
        rng, reseed = self._rng, _random.Random.seed
        seeds = row_seeds(self.seed, self.column, indices)
        if isinstance(self.params.root, UuidParams):
            values = []
            for seed in seeds:
                reseed(rng, seed)
                values.append(uuid4_text(rng.getrandbits(128)))
            return values
        draws = []
        for seed in seeds:
            reseed(rng, seed)
            draws.append(self._draw(rng))
        return draws

    def _draw(self, rng: random.Random) -> Any:
        spec = self.params.root
        if isinstance(spec, CategoryParams):
            if spec.weights is None:
                choice = rng.choice(spec.values)
            else:
                choice = rng.choices(spec.values, weights=spec.weights)[0]
            # Values may be lists/mappings from the config; never hand out shared objects.
            return copy.deepcopy(choice)
        if isinstance(spec, UniformParams):
            if spec.integer:
                return rng.randint(math.floor(spec.low), math.floor(spec.high))
            return rng.uniform(spec.low, spec.high)
        return uuid4_text(rng.getrandbits(128))


def uuid4_text(bits: int) -> str:
    """``str(uuid.UUID(int=bits, version=4))`` without the UUID object: the variant and
    version bits set as it sets them."""
    value = (bits & ~(0xC000 << 48) | 0x8000 << 48) & ~(0xF000 << 64) | 4 << 76
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
