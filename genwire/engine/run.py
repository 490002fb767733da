"""The run: pre-flight, then the local engine (or Ray), with an atomic output."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from genwire.container.core import WiredContainer
from genwire.engine.batches import BatchResult, BatchRunner
from genwire.engine.sink import OutputSink, Progress
from genwire.engine.writers import check_output
from genwire.errors import PreflightError, RunError
from genwire.preflight.report import PreflightReport

BATCHES_IN_FLIGHT = 4  # keeps providers saturated across the barrier between columns


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
    check_output(target)
    if engine not in ("local", "ray"):
        raise RunError(f"unknown engine {engine!r}; use 'local' or 'ray'")
    started = time.perf_counter()
    report = None
    if not skip_preflight:
        report = await preflight(container)
        if not report.ok:
            raise PreflightError(report)
    sink = OutputSink(
        target, [c.name for c in container.columns], total=n, max_failure_rate=cfg.max_failure_rate, progress=progress
    )
    worker_requests: dict[str, int] = {}  # requests made in other processes (Ray workers)
    if engine == "ray":
        from genwire.engine.ray_engine import ray_batches

        batches = ray_batches(container, n, worker_requests)
    else:
        batches = local_batches(container, n)
    await drain(batches, sink)
    return RunResult(
        output=target,
        rows_requested=n,
        rows_written=sink.written,
        rows_failed=sink.failed,
        errors_file=sink.errors_target if sink.failed else None,
        duration_s=time.perf_counter() - started,
        requests=_merge(container.requests_by_model(), worker_requests),
        preflight=report,
    )


def _merge(*counts: dict[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in counts:
        for alias, n in part.items():
            total[alias] = total.get(alias, 0) + n
    return total


async def drain(batches: AsyncIterator[BatchResult], sink: OutputSink) -> None:
    """Feed every batch to the sink; on any failure or cancellation, no output remains."""
    try:
        async for result in batches:
            sink.add(result)
    except BaseException as exc:
        sink.abort(exc)
        raise
    finally:
        aclose = getattr(batches, "aclose", None)
        if aclose is not None:
            await aclose()
    sink.commit()


async def local_batches(container: WiredContainer, n: int) -> AsyncIterator[BatchResult]:
    """Batches in row order, several in flight; a finished batch leaves memory as soon as
    it is next in order (flat memory however many rows)."""
    runner = BatchRunner(container)
    size = container.config.pipeline.batch_size
    starts = iter(range(0, n, size))
    pending: list[asyncio.Task[BatchResult]] = []
    try:
        for s in starts:
            pending.append(asyncio.create_task(runner.run(s, min(s + size, n))))
            if len(pending) >= BATCHES_IN_FLIGHT:
                break
        while pending:
            result = await pending.pop(0)
            nxt = next(starts, None)
            if nxt is not None:
                pending.append(asyncio.create_task(runner.run(nxt, min(nxt + size, n))))
            yield result
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
