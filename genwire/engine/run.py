"""The run: its one gate (the pre-flight), then the local engine (or Ray), every batch
checkpointed, and the output written atomically once all rows were tried.

Resume is the default: a run over an existing checkpoint of the same configuration
generates only the rows it does not hold (see ``engine.checkpoint``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from genwire.config.limits import too_many_rows
from genwire.container.core import WiredPipeline
from genwire.engine.batch_journal import open_batch_ids
from genwire.engine.batch_mode import BatchMode, batch_providers
from genwire.engine.batches import BatchResult, BatchRunner, batched
from genwire.engine.checkpoint import Checkpoint, checkpoint_dir
from genwire.engine.costs import RunCosts
from genwire.engine.fingerprint import fingerprint
from genwire.engine.metrics import RunMetrics
from genwire.engine.options import Engine, RunOptions
from genwire.engine.report import end_session
from genwire.engine.sink import OutputSink, Progress
from genwire.engine.writers import check_output, errors_path
from genwire.errors import RunError
from genwire.preflight.report import PreflightError, PreflightReport
from genwire.preflight.runner import run_preflight
from genwire.providers.batch.format import BatchInfo
from genwire.providers.budget import CostMeter
from genwire.providers.pool import EndpointStats
from genwire.providers.response_cache import ResponseCache, cache_dir
from genwire.providers.tracing import start_run_trace
from genwire.providers.usage import Concurrency, ModelUsage, merge_usage, requests_of

__all__ = ["Engine", "RunOptions", "RunResult", "run_pipeline"]

BATCHES_IN_FLIGHT = 4  # at least: keeps providers saturated across the barrier between columns
ROWS_AHEAD = 8192  # at most, in batches running or finished-but-not-yet-written: bounds memory
# Batch mode: every batch of this many rows starts at once, so a round holds them all.
BATCH_MODE_ROWS_AHEAD = 10_000
STATUS_TICK_S = 1.0  # batch mode: how often the progress line shows the batches' state
GROW_TICK_S = 0.01  # how often the engine looks for idle slots to start one more batch
FRESH_HINT = "run with --fresh (resume=False in Python)"

log = logging.getLogger("genwire.batch")


@dataclass
class RunResult:
    """What a finished run did. ``rows_written`` counts every row in the output,
    ``rows_resumed`` those of them an earlier, interrupted run had already made."""

    output: Path
    rows_requested: int
    rows_written: int
    rows_failed: int
    errors_file: Path | None
    duration_s: float
    rows_resumed: int = 0
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    # Per provider at the end of the run: the adaptive limit it settled at, its peak and
    # its 429 pauses (this process's providers: Ray workers' are not included).
    concurrency: dict[str, Concurrency] = field(default_factory=dict)
    preflight: PreflightReport | None = None
    batches: list[BatchInfo] | None = None  # batch mode: every batch it used (None: online)
    cost: dict[str, Any] | None = None  # SPEC §16's "cost" object
    meter: CostMeter | None = None  # what the answers showed (the estimate reads it)
    finished: bool = True  # False: an estimate's sample, the checkpoint kept for the run
    # Per pooled alias, per endpoint (SPEC §17): requests, failures, latency.
    endpoints: dict[str, dict[str, EndpointStats]] = field(default_factory=dict)

    @property
    def requests(self) -> dict[str, int]:
        return requests_of(self.usage)

    @property
    def rows_per_s(self) -> float:
        made = self.rows_written - self.rows_resumed
        return made / self.duration_s if self.duration_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The machine-readable summary (``genwire run --json``; SPEC §9)."""
        return {
            "ok": True,
            "rows_written": self.rows_written,
            "rows_failed": self.rows_failed,
            "rows_resumed": self.rows_resumed,
            "duration_s": round(self.duration_s, 3),
            "output": str(self.output),
            "errors_file": str(self.errors_file) if self.errors_file else None,
            "models": {alias: self._model_summary(alias, u) for alias, u in self.usage.items()},
            **({"batches": [b.as_dict() for b in self.batches]} if self.batches is not None else {}),
            **({"cost": self.cost} if self.cost is not None else {}),
        }


    def _model_summary(self, alias: str, usage: ModelUsage) -> dict[str, Any]:
        summary: dict[str, Any] = usage.as_dict()
        if alias in self.endpoints:
            summary["endpoints"] = {name: s.as_dict() for name, s in self.endpoints[alias].items()}
        return summary


class BatchSource(Protocol):
    """An engine: batches of the given rows, yielded in row order."""

    def batches(self, indices: Iterator[int], batch_size: int) -> AsyncGenerator[BatchResult, None]: ...

    def usage(self) -> dict[str, ModelUsage]: ...


def response_cache_dir(container: WiredPipeline, enabled: bool = True) -> Path | None:
    """The run's response cache directory; None when it is off (``cache.enabled: false``,
    ``--no-response-cache``, or a dict config without ``cache.dir``)."""
    if not enabled or not container.config.cache.enabled:
        return None
    return cache_dir(container.loaded)


def output_path(container: WiredPipeline, output: str | Path | None) -> Path:
    return Path(output) if output is not None else container.loaded.resolve_path(container.config.pipeline.output)


def dataset_files(container: WiredPipeline) -> list[Path]:
    return [container.loaded.resolve_path(d.path) for d in container.config.datasets.values()]


async def run_pipeline(
    container: WiredPipeline,
    options: RunOptions,
    *,
    progress: Progress | None = None,
    on_preflight: Callable[[PreflightReport], None] | None = None,
) -> RunResult:
    num_records, engine, ray_workers = options.num_records, options.engine, options.ray_workers
    cfg = container.config.pipeline
    n = cfg.num_records if num_records is None else num_records
    if n <= 0:
        raise RunError(f"num_records must be positive, got {n}")
    if too_many_rows(n):
        raise RunError(f"num_records {n:,}: {too_many_rows(n)}")
    if engine not in ("local", "ray"):
        raise RunError(f"unknown engine {engine!r}; use 'local' or 'ray'")
    if ray_workers is not None and ray_workers < 1:
        raise RunError(f"ray_workers must be a positive number of workers, got {ray_workers}")
    batching = batch_providers(container, options.batch)
    if batching and engine != "local":
        raise RunError("batch mode runs on the local engine; drop --engine ray (or --batch)")
    if engine == "ray" and container.config.tools:
        raise RunError(
            "tool servers (tools:) run on the local engine: a stdio server is one process per run, "
            "shared by its columns, and dies with genwire; drop --engine ray for this pipeline"
        )
    target = output_path(container, options.output)
    directory = checkpoint_dir(target)
    # Before anything is paid for: the output must be writable and must not be an input.
    check_output(target, protected=dataset_files(container), extra=[errors_path(target), directory])
    costs = RunCosts(container, max_cost_usd=options.max_cost_usd, engine=engine)  # refuses a cap it cannot keep
    checkpoint = Checkpoint.open(
        directory, fingerprint(container.loaded, container.columns), n, fresh=not options.resume, fresh_hint=FRESH_HINT
    )
    try:
        costs.open(directory, probing=not options.skip_preflight)
    except BaseException:
        checkpoint.close()
        raise
    if not options.resume:
        warn_of_open_batches(directory, collected=bool(batching))
    started = time.perf_counter()
    responses_at = response_cache_dir(container, options.response_cache)
    responses = ResponseCache(responses_at) if responses_at is not None else None
    source: BatchSource
    if engine == "ray":
        from genwire.engine.ray_engine import RayBatches

        source = RayBatches(container, options.ray_address, ray_workers, responses)
    else:
        source = LocalBatches(
            container,
            responses,
            batch_mode=bool(batching),
            stop=costs.exhausted,
            hold=lambda live: costs.hold_rows(sink.written if sink is not None else 0, live, cfg.batch_size),
        )
    sink: OutputSink | None = None
    live_rows = source.live_rows if isinstance(source, LocalBatches) else (lambda: 0)
    batch_mode = BatchMode(container, batching, directory, live_rows) if batching else None
    # The session's metrics (SPEC §19): per second, into the checkpoint; the report page at its end.
    metrics = (
        RunMetrics(
            directory, container.usage_by_model, lambda: (sink.written, sink.failed) if sink is not None else (0, 0)
        ).start(
            num_records=n,
            engine=engine,
            columns=[c.name for c in container.columns],
            models={alias: model.model for alias, model in container.config.models.items()},
        )
        if options.metrics
        else None
    )
    trace = start_run_trace(
        {"genwire.rows.requested": n, "genwire.engine": engine, "genwire.resumed": checkpoint.resumed}
    )
    outcome: RunResult | None = None

    def completed() -> None:  # the output is in place; the checkpoint is about to go
        nonlocal outcome
        assert sink is not None
        usage = merge_usage([container.usage_by_model(), source.usage()])
        outcome = result = RunResult(
            output=target,
            rows_requested=n,
            rows_written=sink.kept,
            rows_failed=sink.failed,
            errors_file=sink.errors_target if sink.failed else None,
            duration_s=time.perf_counter() - started,
            rows_resumed=sink.resumed,
            usage=usage,
            concurrency=container.concurrency(),
            preflight=report,
            batches=batch_mode.infos() if batch_mode is not None else None,
            cost=costs.report(usage),
            meter=costs.meter,
            finished=options.sample_rows is None,
            endpoints=container.endpoint_stats(),
        )
        end_session(
            metrics,
            trace,
            None,
            target,
            done=checkpoint.is_done,
            counts=_counts(result),
            usage=result.usage,
            summary=result.summary(),
            estimate=options.sample_rows is not None,
        )

    report: PreflightReport | None = None
    try:
        costs.attach()  # the probes are paid for too
        if not options.skip_preflight:
            report = await run_preflight(
                container, use_cache=options.probe_cache, cache_dir=options.probe_cache_dir, batch_providers=batching
            )
            if on_preflight is not None:
                on_preflight(report)
            if metrics is not None:
                metrics.note("preflight", report=report.model_dump(mode="json"))
            if not report.ok:
                raise PreflightError(report)
        costs.meter.begin_rows()  # the estimate measures rows, not probes
        if batch_mode is not None:
            await batch_mode.start()  # after the probes: they stay online
        sink = OutputSink(
            target,
            [c.name for c in container.columns],
            checkpoint,
            max_failure_rate=cfg.max_failure_rate,
            progress=progress,
            status=lambda: batch_mode.status() if batch_mode is not None else in_flight_text(container.concurrency()),
        )
        pending = checkpoint.pending()
        if options.sample_rows is not None:
            pending = itertools.islice(pending, options.sample_rows)
        batches = source.batches(pending, cfg.batch_size)
        ticker = asyncio.create_task(_tick(sink)) if batch_mode is not None else None
        try:
            async for result in batches:
                if batch_mode is not None:
                    batch_mode.raise_if_broken()
                sink.add(result)
        finally:
            if ticker is not None:
                ticker.cancel()
            await batches.aclose()
        if batch_mode is not None:
            batch_mode.raise_if_broken()
            # The journal is the truth about what was paid: it stays while a batch it names
            # is still open at the provider (a --fresh run that no longer asks for them).
            checkpoint.keep_journal = bool(await batch_mode.still_open())
        if costs.exhausted():
            sink.suspend()
            raise costs.stopped(directory, sink.kept, n)
        if options.sample_rows is None:
            sink.finish(before_removal=completed)
        else:
            sink.suspend()  # the estimate's rows stay in the checkpoint for the run
            completed()
    except BaseException as error:
        if batch_mode is not None:
            await batch_mode.stop()
        if sink is not None:
            sink.suspend()
        end_session(
            metrics,
            trace,
            error,
            target,
            done=checkpoint.is_done,
            counts={"rows_written": checkpoint.kept, "rows_resumed": checkpoint.resumed, "rows_requested": n},
            usage=merge_usage([container.usage_by_model(), source.usage()]),
            estimate=options.sample_rows is not None,
        )
        if checkpoint.kept == 0 and not costs.paid and (batch_mode is None or not batch_mode.holds_batches):
            checkpoint.remove()  # nothing was paid for: leave no empty checkpoint behind
        else:
            checkpoint.close()
        raise
    finally:
        costs.detach()
        if batch_mode is not None:
            await batch_mode.stop()  # idempotent
        if responses is not None:
            responses.close()
    assert outcome is not None  # set by completed(), which sink.finish calls
    return outcome


def _counts(result: RunResult) -> dict[str, int]:
    return {
        "rows_written": result.rows_written,
        "rows_failed": result.rows_failed,
        "rows_resumed": result.rows_resumed,
        "rows_requested": result.rows_requested,
    }


async def _tick(sink: OutputSink) -> None:
    while True:
        await asyncio.sleep(STATUS_TICK_S)
        sink.refresh()


def warn_of_open_batches(directory: Path, *, collected: bool) -> None:
    """A fresh start keeps batch mode's journal (``Checkpoint``): say what it still lists."""
    still_open = open_batch_ids(directory)
    if not still_open:
        return
    then = (
        "this run collects the requests it asks again from them instead of paying twice"
        if collected
        else "a --batch run would collect its requests from them instead of paying twice"
    )
    log.warning(
        "--fresh keeps the %d batch(es) an earlier run left open at the provider (%s): %s; "
        "`genwire batches cancel` on this config cancels them",
        len(still_open),
        ", ".join(still_open[:3]) + (", ..." if len(still_open) > 3 else ""),
        then,
    )


def in_flight_text(concurrency: dict[str, Concurrency]) -> str:
    """``in flight 6/16`` (one provider) or ``in flight srv 6/16, nim 2/4``."""
    if not concurrency:
        return ""
    if len(concurrency) == 1:
        return f"in flight {next(iter(concurrency.values()))}"
    return "in flight " + ", ".join(f"{name} {c}" for name, c in concurrency.items())


class LocalBatches:
    """Batches in row order, several in flight; a finished batch leaves memory as soon as
    it is next in order (flat memory however many rows).

    A batch is done only when its slowest row is: a row waiting out a stray 429 (its
    ``Retry-After``, say a second) holds up its batch, and with a fixed number of batches
    in flight the providers would idle meanwhile. So beyond ``BATCHES_IN_FLIGHT`` the
    engine starts one more batch every ``GROW_TICK_S`` while a provider is about to have
    idle slots, up to ``ROWS_AHEAD`` rows.
    """

    def __init__(
        self,
        container: WiredPipeline,
        cache: ResponseCache | None = None,
        *,
        batch_mode: bool = False,
        stop: Callable[[], bool] | None = None,
        hold: Callable[[int], bool] | None = None,
    ) -> None:
        self._container = container
        # The budget: stop() true, no new batch at all (running ones finish); hold(live
        # rows) true, none for now (what is left would not finish them).
        self._stop = stop
        self._hold = hold
        self._cache = cache
        # Batch mode: the whole window at once (a round holds every row of it), nothing to grow.
        self._batch_mode = batch_mode
        self._runner: BatchRunner | None = None

    def live_rows(self) -> int:
        """Rows in the batches running now, not yet failed (batch mode's rounds count them)."""
        return self._runner.live if self._runner is not None else 0

    def usage(self) -> dict[str, ModelUsage]:
        return {}  # the container's own clients made every request: counted by the caller

    def _idle_slots(self) -> bool:
        """Some provider will soon have idle slots: less than one round of requests is
        queued for them (a braked or paced model's queue is long, so it never grows)."""
        return any(c.waiting < c.limit for c in self._container.concurrency().values())

    async def batches(self, indices: Iterator[int], batch_size: int) -> AsyncGenerator[BatchResult, None]:
        runner = self._runner = BatchRunner(self._container, self._cache)
        todo = enumerate(batched(indices, batch_size))
        running: dict[asyncio.Task[BatchResult], int] = {}
        finished: dict[int, asyncio.Task[BatchResult]] = {}  # an error is raised in row order too
        next_out = 0
        exhausted = False
        ahead = max(2 * BATCHES_IN_FLIGHT, (BATCH_MODE_ROWS_AHEAD if self._batch_mode else ROWS_AHEAD) // batch_size)
        in_flight = ahead if self._batch_mode else BATCHES_IN_FLIGHT

        def start(up_to: int, *, only_if_idle: bool = False) -> None:
            """Start batches until ``up_to`` run (while slots sit idle, with ``only_if_idle``)."""
            nonlocal exhausted
            if self._stop is not None and self._stop():
                exhausted = True
                return
            fresh = 0  # rows of the batches started here: not live until they first run
            while (
                not exhausted
                and len(running) < up_to
                and len(running) + len(finished) < ahead
                and (not only_if_idle or self._idle_slots())
                # The budget: when nothing runs, one more batch learns whether anything still fits.
                and not (self._hold is not None and (running or finished) and self._hold(runner.live + fresh))
            ):
                item = next(todo, None)
                if item is None:
                    exhausted = True
                    return
                running[asyncio.create_task(runner.run(item[1]))] = item[0]
                fresh += len(item[1])

        try:
            while True:
                # A new batch starts whenever any batch finishes, not only the oldest: a
                # slow batch at the head would otherwise leave the provider's slots idle.
                # Finished batches wait for their turn; the two together stay bounded.
                start(in_flight)
                if not running and not finished:
                    return
                if next_out not in finished:
                    may_grow = not exhausted and len(running) + len(finished) < ahead
                    timeout = GROW_TICK_S if may_grow else None
                    done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        finished[running.pop(task)] = task
                    if not done:  # a tick: one more batch if slots sit idle
                        start(len(running) + 1, only_if_idle=True)
                while next_out in finished:
                    yield finished.pop(next_out).result()
                    next_out += 1
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            for task in finished.values():  # finished, never yielded: their errors are moot
                if not task.cancelled():
                    task.exception()
