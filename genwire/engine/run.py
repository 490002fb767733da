"""The local engine: columns in order, rows in batches, failures kept, output atomic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from genwire.container.core import WiredContainer
from genwire.engine.writers import JsonlWriter, RowWriter, errors_path, open_writer
from genwire.errors import (
    GenwireError,
    ModelError,
    PluginError,
    PreflightError,
    RunError,
    UndeclaredResourceError,
)
from genwire.generators.base import Generator
from genwire.generators.outcome import RowFailure
from genwire.preflight.report import PreflightReport

INDEX = "_index"  # reserved row key: the row's position in the run
BATCHES_IN_FLIGHT = 4  # keeps providers saturated across the barrier between columns
MIN_ROWS_FOR_RATE = 20  # don't stop on the failure rate of a handful of rows


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def advance(self, done: int, failed: int) -> None: ...

    def stop(self) -> None: ...


@dataclass
class RunResult:
    output: Path
    rows_requested: int
    rows_written: int
    rows_failed: int
    errors_file: Path | None
    duration_s: float
    requests: dict[str, int] = field(default_factory=dict)
    preflight: PreflightReport | None = None

    @property
    def rows_per_s(self) -> float:
        return self.rows_written / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class _BatchResult:
    start: int
    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]


def _failure_record(row: dict[str, Any], column: str, error: BaseException) -> dict[str, Any]:
    data = {k: v for k, v in row.items() if k != INDEX}
    error_class = error.error_class.value if isinstance(error, ModelError) else type(error).__name__
    message = error.message if isinstance(error, ModelError) else str(error)
    return {"row": row[INDEX], "column": column, "error_class": error_class, "error": message, "data": data}


class _Engine:
    def __init__(self, container: WiredContainer, n: int) -> None:
        self.container = container
        self.n = n
        cfg = container.config.pipeline
        self.batch_size = cfg.batch_size
        self.max_failure_rate = cfg.max_failure_rate
        self.generators: list[Generator[Any]] = []

    async def generate_batch(self, start: int) -> _BatchResult:
        live = [{INDEX: i} for i in range(start, min(start + self.batch_size, self.n))]
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
                    failures.append(_failure_record(row, gen.column, value.error))
                else:
                    row[gen.column] = value
                    kept.append(row)
            live = kept
        for row in live:
            del row[INDEX]
        return _BatchResult(start, live, failures)

    async def call(self, gen: Generator[Any], rows: list[dict[str, Any]]) -> list[Any]:
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


async def run_pipeline(
    container: WiredContainer,
    *,
    num_records: int | None,
    output: str | Path | None,
    skip_preflight: bool,
    progress: Progress | None,
    engine: str,
    preflight: Callable[[WiredContainer], Awaitable[PreflightReport]],
) -> RunResult:
    cfg = container.config.pipeline
    n = cfg.num_records if num_records is None else num_records
    if n <= 0:
        raise RunError(f"num_records must be positive, got {n}")
    target = Path(output) if output is not None else container.loaded.resolve_path(cfg.output)
    if engine not in ("local", "ray"):
        raise RunError(f"unknown engine {engine!r}; use 'local' or 'ray'")
    started = time.perf_counter()
    report = None
    if not skip_preflight:
        report = await preflight(container)
        if not report.ok:
            raise PreflightError(report)
    if engine == "ray":
        from genwire.engine.ray_engine import run_on_ray

        return await run_on_ray(container, n=n, target=target, report=report, progress=progress, started=started)
    return await run_local(container, n=n, target=target, report=report, progress=progress, started=started)


async def run_local(
    container: WiredContainer,
    *,
    n: int,
    target: Path,
    report: PreflightReport | None,
    progress: Progress | None,
    started: float,
) -> RunResult:
    engine = _Engine(container, n)
    container.reset_generators()
    engine.generators = [container.generator(c.name) for c in container.columns]
    columns = [c.name for c in container.columns]
    writer: RowWriter = open_writer(target, columns)
    err_target = errors_path(target)
    err_writer = JsonlWriter(err_target, [])
    written = failed = 0
    if progress is not None:
        progress.start(n)
    try:
        starts = iter(range(0, n, engine.batch_size))
        pending: dict[int, asyncio.Task[_BatchResult]] = {}
        order = list(range(0, n, engine.batch_size))
        next_out = 0
        try:
            for s in starts:
                pending[s] = asyncio.create_task(engine.generate_batch(s))
                if len(pending) >= BATCHES_IN_FLIGHT:
                    break
            while next_out < len(order):
                result = await pending.pop(order[next_out])
                next_out += 1
                nxt = next(starts, None)
                if nxt is not None:
                    pending[nxt] = asyncio.create_task(engine.generate_batch(nxt))
                # Rows leave memory as soon as their batch is next in order: flat memory.
                writer.write(result.rows)
                err_writer.write(result.failures)
                written += len(result.rows)
                failed += len(result.failures)
                if progress is not None:
                    progress.advance(len(result.rows), len(result.failures))
                processed = written + failed
                if processed >= MIN_ROWS_FOR_RATE and failed / processed > engine.max_failure_rate:
                    raise RunError(
                        f"stopped after {processed} rows: {failed} failed ({failed / processed:.0%}), above "
                        f"max_failure_rate {engine.max_failure_rate:.0%}; failed rows are in {err_target}"
                    )
        finally:
            for task in pending.values():
                task.cancel()
            if pending:
                await asyncio.gather(*pending.values(), return_exceptions=True)
    except BaseException as exc:
        writer.abort()
        if isinstance(exc, RunError) and failed:
            err_writer.commit()  # keep the evidence of why the run stopped
        else:
            err_writer.abort()
        raise
    finally:
        if progress is not None:
            progress.stop()
    writer.commit()
    if failed:
        err_writer.commit()
    else:
        err_writer.abort()
        err_target.unlink(missing_ok=True)  # a stale errors file from an earlier run would mislead
    return RunResult(
        output=target,
        rows_requested=n,
        rows_written=written,
        rows_failed=failed,
        errors_file=err_target if failed else None,
        duration_s=time.perf_counter() - started,
        requests=container.requests_by_model(),
        preflight=report,
    )
