"""``seed-dataset``: emits the bound dataset's rows, in order or seeded-shuffled, cycling."""

from __future__ import annotations

import asyncio
import copy
import random
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from genwire.generators.base import Generator
from genwire.generators.builtin.common import derive_seed
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.resources import Resources
from genwire.generators.rows import RowIndexer
from genwire.providers.threads import in_daemon_thread

# Permutations kept in memory; batches advance through cycles roughly in order, so a few
# recent cycles cover concurrent batches without holding one permutation per cycle.
_CACHED_CYCLES = 4


class SeedDatasetParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    shuffle: bool = False


class SeedDataset(Generator[SeedDatasetParams]):
    metadata = GeneratorMetadata(
        name="seed-dataset",
        description="Emit the rows of a dataset as mappings, in order or shuffled (seeded), "
        "cycling when more rows are requested than the dataset holds.",
        required_resources={"dataset": ResourceKind.DATASET},
    )
    row_source_slot = "dataset"  # cells are rows of this dataset: later columns read their fields
    params_model = SeedDatasetParams

    def __init__(self, *, column: str, params: SeedDatasetParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._lock = asyncio.Lock()
        self._size: int | None = None
        # Only used when the dataset has no random access (no ``row(i)``).
        self._rows: list[dict[str, Any]] | None = None
        self._orders: OrderedDict[int, list[int]] = OrderedDict()
        self._row_index = RowIndexer()

    async def _ensure_loaded(self) -> int:
        async with self._lock:
            if self._size is not None:
                return self._size
            dataset = self.resources.dataset
            load = getattr(dataset, "load", None)
            if callable(load):
                # Loading may read files: keep the event loop (and other columns) running.
                await in_daemon_thread(load)
            if not callable(getattr(dataset, "row", None)):
                self._rows = [row async for row in dataset.rows()]
                size = len(self._rows)
            else:
                size = len(dataset)
            if size == 0:
                raise ValueError(
                    f"seed-dataset (column {self.column!r}): the bound dataset is empty; it needs at least one row"
                )
            self._size = size
            return size

    def _order(self, cycle: int, size: int) -> list[int]:
        order = self._orders.get(cycle)
        if order is None:
            order = list(range(size))
            # A fresh seed per cycle: each pass over the data is a different shuffle.
            random.Random(derive_seed(self.seed, self.column, "cycle", cycle)).shuffle(order)
            self._orders[cycle] = order
            while len(self._orders) > _CACHED_CYCLES:
                self._orders.popitem(last=False)
        else:
            self._orders.move_to_end(cycle)
        return order

    def _dataset_row(self, position: int) -> dict[str, Any]:
        row = self._rows[position] if self._rows is not None else self.resources.dataset.row(position)
        # Cycling hands out the same dataset row several times; a later generator or the
        # writer must not be able to change one copy through another.
        return copy.deepcopy(dict(row))

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self._take(self._row_index(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return await self._take(self._row_index(len(rows), indices))

    async def _take(self, indices: list[int]) -> list[Any]:
        size = await self._ensure_loaded()
        out: list[Any] = []
        for index in indices:
            # Position from the run's row index, not a running counter: results are the
            # same whatever the batch size or the order batches run in.
            cycle, offset = divmod(index, size)
            position = self._order(cycle, size)[offset] if self.params.shuffle else offset
            out.append(self._dataset_row(position))
        return out
