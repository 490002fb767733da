"""The generator base class that built-ins and plugins subclass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from genwire.generators.metadata import GeneratorMetadata
from genwire.generators.resources import Resources


class NoParams(BaseModel):
    """Params model of generators that take none: any key is an error."""

    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=BaseModel)


class Generator(Generic[P]):
    """A column generator. Subclasses set ``metadata`` and ``params_model`` and implement
    ``generate``. The container constructs it with the column's validated params and the
    resources bound to its declared slots, and nothing else."""

    metadata: ClassVar[GeneratorMetadata]
    params_model: ClassVar[type[BaseModel]] = NoParams
    # Set to a dataset slot when the cell value is a row of that dataset; the pre-flight
    # then checks the dataset has every field later columns read (``{{ passage.text }}``).
    row_source_slot: ClassVar[str | None] = None
    # A stateful gate (SPEC §21: keep-unique, keep-novel) compares a candidate with the
    # candidates of lower index it kept. The engine then calls ``generate_batch`` on one
    # batch at a time, in index order (each batch's rows in index order), and before the
    # first call hands it, through ``remember``, the rows an earlier session of the run
    # let through this gate: the verdicts are the same at any concurrency and on resume.
    in_order: ClassVar[bool] = False

    def __init__(self, *, column: str, params: P, resources: Resources, seed: int = 0) -> None:
        self.column = column
        self.params = params
        self.seed = seed
        self._resources = resources

    @property
    def resources(self) -> Resources:
        return self._resources

    @classmethod
    def reads(cls, params: P) -> set[str]:
        """Columns of the row this generator reads (``column`` or ``column.field``
        references are reduced to the column). Used to check ordering before the run."""
        return set()

    @classmethod
    def dataset_columns(cls, params: P) -> dict[str, set[str]]:
        """For each dataset slot, the dataset columns this generator needs (pre-flight
        checks that the dataset has them)."""
        return {}

    @classmethod
    def request_shape(cls, params: P, *, slot: str, column: str) -> dict[str, Any] | None:
        """What this generator's calls through the chat-model ``slot`` add to the model's
        own params: ``system`` (its template text), request fields such as ``temperature``
        or ``response_format``. The pre-flight probes each distinct shape, so a model that
        rejects what the run will send fails there, not mid-run. A non-empty shape is the
        only probe this use gets; None or ``{}`` (the default, for generators that cannot
        say) gets the plain probe."""
        return None

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        """Return one value per row of the batch, in order."""
        raise NotImplementedError(f"generator {self.metadata.name!r} does not implement generate()")

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        """What the engine calls. ``indices`` are the rows' positions in the whole run,
        passed beside the rows so that no engine data shares a row with user columns.
        Override it when a value must depend on the row's position (seeded sampling);
        the default ignores them."""
        return await self.generate(rows)

    async def ahead(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> None:
        """An ``in_order`` gate: the work on a batch that does not depend on the rows kept
        before it (an embedding request, a signature), done before the batch's turn while
        lower batches are judged. The engine then calls ``generate_batch`` with the same
        rows and indices (or never, if the run stops first); the default does nothing."""

    async def remember(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> None:
        """An ``in_order`` gate: rows (with their indices, in index order) that passed this
        gate before this session; compare later candidates with them as with kept ones."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.metadata.name!r} column={self.column!r}>"
