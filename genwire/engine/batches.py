"""Generate one batch of rows: columns in order, per-row failures kept apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genwire.container.core import WiredContainer
from genwire.errors import GenwireError, ModelError, PluginError, UndeclaredResourceError
from genwire.generators.base import Generator
from genwire.generators.outcome import RowFailure
from genwire.generators.rows import INDEX_KEY as INDEX


@dataclass
class BatchResult:
    start: int
    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]


def failure_record(row: dict[str, Any], column: str, error: BaseException) -> dict[str, Any]:
    data = {k: v for k, v in row.items() if k != INDEX}
    error_class = error.error_class.value if isinstance(error, ModelError) else type(error).__name__
    message = error.message if isinstance(error, ModelError) else str(error)
    return {"row": row[INDEX], "column": column, "error_class": error_class, "error": message, "data": data}


class BatchRunner:
    """Runs the container's column generators over batches of row indices."""

    def __init__(self, container: WiredContainer) -> None:
        container.reset_generators()  # generators may keep per-run state (cursors, caches)
        self.generators: list[Generator[Any]] = [container.generator(c.name) for c in container.columns]
        self.columns = [c.name for c in container.columns]

    async def run(self, start: int, stop: int) -> BatchResult:
        live = [{INDEX: i} for i in range(start, stop)]
        failures: list[dict[str, Any]] = []
        for gen in self.generators:
            if not live:
                break
            values = await self.call(gen, live)
            kept = []
            for row, value in zip(live, values, strict=True):
                if isinstance(value, RowFailure):
                    if isinstance(value.error, UndeclaredResourceError | PluginError):
                        raise value.error  # a plugin bug, not a row problem: stop the run
                    failures.append(failure_record(row, gen.column, value.error))
                else:
                    row[gen.column] = value
                    kept.append(row)
            live = kept
        for row in live:
            del row[INDEX]
        return BatchResult(start, live, failures)

    @staticmethod
    async def call(gen: Generator[Any], rows: list[dict[str, Any]]) -> list[Any]:
        name = gen.metadata.name
        # Generators get copies: a plugin mutating its input cannot corrupt other columns.
        view = [dict(r) for r in rows]
        try:
            values = await gen.generate(view)
        except ModelError as exc:
            # The model stayed unhealthy through its retries: every row of the batch fails.
            return [RowFailure(exc) for _ in rows]
        except GenwireError:
            raise
        except Exception as exc:
            raise PluginError(
                f"generator {name!r} (column {gen.column!r}) raised in generate(): {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(values, list) or len(values) != len(rows):
            got = len(values) if isinstance(values, list) else type(values).__name__
            raise PluginError(
                f"generator {name!r} (column {gen.column!r}) returned {got} values for {len(rows)} rows; "
                "generate() must return a list with one value per row"
            )
        return values
