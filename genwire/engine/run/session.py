"""One session of a run over its checkpoint: the parts ``run_pipeline`` drives, stage by
stage — the engine that makes the batches (local or Ray), batch mode, the output sink,
and the run's accounting (``engine.money.accounts``), each opened here and closed here."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from genwire.container.core import WiredPipeline
from genwire.engine.gates.plan import CandidatePlan, GatedRun
from genwire.engine.money.accounts import RunAccounts
from genwire.engine.records.batch_result import BatchResult
from genwire.engine.records.checkpoint import Checkpoint
from genwire.engine.records.result import RunResult
from genwire.engine.report.about import run_about
from genwire.engine.rows.failure_stop import FailureStop
from genwire.engine.rows.local import LocalBatches
from genwire.engine.run.batch_mode import BatchMode
from genwire.engine.run.options import RunOptions
from genwire.engine.run.sink import OutputSink, Progress
from genwire.errors import RunStopped
from genwire.preflight.report import PreflightError, PreflightReport
from genwire.preflight.runner import run_preflight
from genwire.providers.response_cache.store import ResponseCache, cache_dir
from genwire.providers.usage import Concurrency

__all__ = ["RunPlan", "RunSession", "in_flight_text", "response_cache_dir"]

STATUS_TICK_S = 1.0  # batch mode: how often the progress line shows the batches' state


@dataclass(frozen=True)
class RunPlan:
    """What a run makes and where: checked before anything is opened (``run.plan_run``)."""

    num_records: int
    engine: str
    batching: list[str]  # the providers in batch mode (empty: online)
    target: Path  # the output
    directory: Path  # its checkpoint
    gated: GatedRun | None = None  # a pipeline with gates (SPEC §21): num_records counts kept rows


class BatchSource(Protocol):
    """An engine: batches of the given rows, yielded in row order."""

    def batches(
        self, indices: Iterator[int], batch_size: int, *, feed: Iterator[list[int]] | None = None
    ) -> AsyncGenerator[BatchResult, None]: ...

    ready_at: float | None  # when (time.perf_counter) its workers were ready; None: none to start

    def live_rows(self) -> int: ...

    def start(self, rows: int, batch_size: int) -> None: ...

    async def aclose(self) -> None: ...


def response_cache_dir(container: WiredPipeline, enabled: bool = True) -> Path | None:
    """The run's response cache directory; None when it is off (``cache.enabled: false``,
    ``--no-response-cache``, or a dict config without ``cache.dir``)."""
    if not enabled or not container.config.cache.enabled:
        return None
    return cache_dir(container.loaded)


def in_flight_text(concurrency: dict[str, Concurrency]) -> str:
    """``in flight 6/16`` (one provider) or ``in flight srv 6/16, nim 2/4``."""
    if not concurrency:
        return ""
    if len(concurrency) == 1:
        return f"in flight {next(iter(concurrency.values()))}"
    return "in flight " + ", ".join(f"{name} {c}" for name, c in concurrency.items())


class RunSession:
    """The engine, batch mode, the sink and the accounting of one session."""

    def __init__(
        self,
        container: WiredPipeline,
        options: RunOptions,
        plan: RunPlan,
        checkpoint: Checkpoint,
        accounts: RunAccounts,
        progress: Progress | None,
    ) -> None:
        self.container, self.options, self.plan = container, options, plan
        self.checkpoint, self.accounts, self.progress = checkpoint, accounts, progress
        self.started = time.perf_counter()
        responses_at = response_cache_dir(container, options.response_cache)
        self.responses = ResponseCache(responses_at) if responses_at is not None else None
        self.sink: OutputSink | None = None
        self.report: PreflightReport | None = None
        self.candidates: CandidatePlan | None = None  # a gated run's schedule
        # Judged as rows settle, gated or not, local or on Ray (requests stop at once; in batch
        # mode, no call joins a round once the rate passed); an estimate judges written batches.
        self.failure_stop = FailureStop(container.config.pipeline.max_failure_rate, checkpoint.failed_before())
        self.live_stop = options.sample_rows is None
        self.source = self._source()
        self.batch_mode = (
            BatchMode(container, plan.batching, plan.directory, self.source.live_rows) if plan.batching else None
        )
        accounts.start(
            plan.directory,
            metrics=options.metrics,
            rows=self._rows,
            resumed=checkpoint.resumed,
            num_records=plan.num_records,
            engine=plan.engine,
            columns=[c.name for c in container.columns],
            models={alias: model.model for alias, model in container.config.models.items()},
            **run_about(container),  # what the dataset card says of the run (SPEC §24)
        )

    def _source(self) -> BatchSource:
        if self.plan.engine == "ray":
            from genwire.engine.cluster.driver import RayBatches
            from genwire.engine.cluster.keeper import RayGates, in_order_gates
            from genwire.engine.cluster.shared import ClusterBudget

            options, gated = self.options, self.plan.gated
            self.accounts.budget = cluster = ClusterBudget(self.accounts.costs)  # held cluster-wide
            in_order = in_order_gates(self.container.columns) if gated is not None else []
            return RayBatches(
                self.container,
                options.ray_address,
                options.ray_workers,
                self.responses,
                feed=self.accounts.feed,
                prices=self.accounts.costs.prices,
                budget=cluster,
                output_limits=self.accounts.costs.output_limits,
                # Stateful gates judged by one keeper for the cluster, in index order (SPEC §21).
                gates=RayGates(in_order, gated.earlier(self.checkpoint)) if gated is not None and in_order else None,
                failure_stop=self.failure_stop if self.live_stop else None,
            )
        budget, failure_stop = self.accounts.budget, self.failure_stop
        batch_rows = self.container.config.pipeline.batch_size
        return LocalBatches(
            self.container,
            self.responses,
            batch_mode=bool(self.plan.batching),
            stop=lambda: budget.exhausted() or failure_stop.stopping,
            admission=failure_stop if self.live_stop else None,
            hold=lambda live: budget.hold_rows(self.sink.written if self.sink is not None else 0, live, batch_rows),
            earlier=self.plan.gated.earlier(self.checkpoint) if self.plan.gated is not None else None,
        )

    def _rows_left(self) -> int:
        """About how many rows this session makes (what the engine sizes its workers for)."""
        left = max(0, self.plan.num_records - self.checkpoint.kept)
        return left if self.options.sample_rows is None else min(left, self.options.sample_rows)

    def _rows(self) -> tuple[int, int]:
        return (self.sink.written, self.sink.failed) if self.sink is not None else (0, 0)

    async def preflight(self, on_preflight: Callable[[PreflightReport], None] | None) -> None:
        """The one gate (SPEC §7): nothing is generated unless every check passed. The
        engine starts meanwhile (Ray's workers boot: seconds) and generates nothing yet."""
        fleet = self.container.servers
        if fleet is not None:  # SPEC §23: its logs beside the output
            fleet.log_dir = self.plan.target.with_name(self.plan.target.name + ".servers")
        self.source.start(self._rows_left(), self.container.config.pipeline.batch_size)
        if self.options.skip_preflight:
            await self._start_servers()
            return
        options = self.options
        self.report = report = await run_preflight(
            self.container,
            use_cache=options.probe_cache,
            cache_dir=options.probe_cache_dir,
            batch_providers=self.plan.batching,
        )
        if on_preflight is not None:
            on_preflight(report)
        self.accounts.note("preflight", report=report.model_dump(mode="json"))
        if not report.ok:
            raise PreflightError(report)

    async def _start_servers(self) -> None:
        """Without the pre-flight, the managed servers still start (and a failure stops it)."""
        from genwire.preflight.servers import start_servers

        checks, _ = await start_servers(self.container)
        if any(c.status == "failed" for c in checks):
            raise PreflightError(PreflightReport(ok=False, duration_s=0.0, checks=checks))

    def _raise_if_server_died(self, sink: OutputSink) -> None:
        """A managed server that died for good (``restarts`` spent) stops the run, its rows kept."""
        fleet = self.container.servers
        if fleet is None or fleet.failure is None:
            return
        sink.suspend()
        raise RunStopped(
            f"{fleet.failure}. {sink.kept:,} rows are kept in {self.checkpoint.directory}; "
            "rerun the same command to make the rest",
            checkpoint=self.checkpoint.directory,
            kept=sink.kept,
        )

    async def generate(self) -> None:
        """Every pending row, batch by batch, into the checkpoint; the budget's stop last."""
        batch_mode, container = self.batch_mode, self.container
        if batch_mode is not None:
            await batch_mode.start()  # after the probes: they stay online
        gated = self.plan.gated
        self.sink = sink = OutputSink(
            self.plan.target,
            [c.name for c in container.columns if gated is None or c.name not in gated.gates],
            self.checkpoint,
            max_failure_rate=container.config.pipeline.max_failure_rate,
            progress=self.progress,
            status=lambda: batch_mode.status() if batch_mode is not None else in_flight_text(container.concurrency()),
            wanted=gated.wanted if gated is not None else None,
            failure_stop=self.failure_stop,
        )
        pending = self.checkpoint.pending()
        batch_size = container.config.pipeline.batch_size
        feed = None
        if gated is not None:
            self.candidates = gated.plan(self.checkpoint, pending)
            # The estimate takes its K candidates as they come; a run, as the schedule says.
            feed = self.candidates.feed(batch_size) if self.options.sample_rows is None else None
        if self.options.sample_rows is not None:
            pending = itertools.islice(pending, self.options.sample_rows)
        candidates = self.candidates
        ticker = asyncio.create_task(_tick(sink)) if batch_mode is not None else None
        try:
            await self._take(self.source.batches(pending, batch_size, feed=feed), sink)
            while self.failure_stop.stopping and not self.accounts.budget.exhausted():
                # Stopped sending as the rate passed; every batch is written now: judged on them.
                sink.stop_at_rate()
                self.failure_stop.reopen()  # not above after all: the dropped rows are made
                await self._take(await self._dropped(sink, batch_size), sink)
            # At the cap with candidates that failed in this session (a transient error at a
            # later column): generated again, as a resume would, before the run stops. An
            # in-order gate is asked afresh, remembering what the checkpoint holds (Ray's
            # keeper judges each candidate once: there a rerun does it).
            retry = feed is not None and self.plan.engine != "ray" and not self.accounts.budget.exhausted()
            if retry and candidates is not None and candidates.retry(self.checkpoint.pending()):
                sink.retrying(candidates.retried)
                await self.checkpoint.next_segment()
                await self._take(self.source.batches(iter(()), batch_size, feed=candidates.feed(batch_size)), sink)
            await self.checkpoint.synced()  # the last batch on the disk, as every earlier one
        finally:
            if ticker is not None:
                ticker.cancel()
        if batch_mode is not None:
            batch_mode.raise_if_broken()
            # The journal is the truth about what was paid: it stays while a batch it names
            # is still open at the provider (a --fresh run that no longer asks for them).
            self.checkpoint.keep_journal = bool(await batch_mode.still_open())
        if self.accounts.budget.exhausted():
            sink.suspend()  # a budget stop shows its summary and cost as a finished run does
            stopped = self._result(finished=False)
            stop = self.accounts.budget.stopped(self.plan.directory, sink.kept, self.plan.num_records, stopped)
            raise candidates.at_budget(stop) if candidates is not None else stop
        if candidates is not None and candidates.capped:
            sink.suspend()
            raise candidates.stopped(self.plan.directory)
        if candidates is None and self.options.sample_rows is None:
            self._check_every_row_tried(sink)

    async def _dropped(self, sink: OutputSink, batch_size: int) -> AsyncGenerator[BatchResult, None]:
        """The batches of the rows the failure-rate stop dropped unsent (a gated run: its
        dropped candidates first, then as its plan schedules), into a checkpoint segment of
        their own: they are below rows already written, and each file holds its rows in order."""
        await self.checkpoint.next_segment()
        candidates = self.candidates
        if candidates is not None:
            candidates.requeue()
            return self.source.batches(iter(()), batch_size, feed=candidates.feed(batch_size))
        dropped = (i for i in self.checkpoint.pending() if i not in sink.failed_here)
        return self.source.batches(dropped, batch_size)

    async def _take(self, batches: AsyncGenerator[BatchResult, None], sink: OutputSink) -> None:
        """Every batch the engine gives back, into the sink and the candidates' plan."""
        batch_mode, candidates = self.batch_mode, self.candidates
        try:
            async for result in batches:
                if batch_mode is not None:
                    batch_mode.raise_if_broken()
                try:
                    await sink.add(result)
                except RunStopped:
                    self._raise_if_server_died(sink)  # the cause, rather than the failures it made
                    raise
                self._raise_if_server_died(sink)
                if candidates is not None:
                    candidates.record(result)
        finally:
            await batches.aclose()

    def _check_every_row_tried(self, sink: OutputSink) -> None:
        """A run is complete only when each of its rows was kept or failed: an engine that
        gave back fewer (a batch lost on the way, a worker's rows never returned) stops the
        run with its rows kept, never writes an output short of rows with exit 0."""
        missing = sink.total - sink.kept - sink.failed
        if missing <= 0:
            return
        sink.suspend()
        raise RunStopped(
            f"the engine gave back {sink.total - missing:,} of {sink.total:,} rows ({missing:,} neither "
            f"written nor failed, with no budget, cap or error to say why): a genwire bug, please report it. "
            f"{sink.kept:,} rows are kept in {self.checkpoint.directory}; rerun the same command to make the rest",
            checkpoint=self.checkpoint.directory,
            kept=sink.kept,
        )

    def complete(self) -> RunResult:
        """The output in place (an estimate's sample stays in the checkpoint for the run)."""
        assert self.sink is not None
        if self.options.sample_rows is None:
            return self.sink.finish(before_removal=self._completed)
        self.sink.suspend()
        return self._completed()

    def _completed(self) -> RunResult:
        """The output is in place, the checkpoint not yet gone: the result, the report."""
        result = self._result(finished=self.options.sample_rows is None)
        self.accounts.end(
            None,
            self.plan.target,
            done=self.checkpoint.is_done,
            counts=result.counts(),
            summary=result.summary(),
            estimate=self.options.sample_rows is not None,
        )
        return result

    def _result(self, *, finished: bool) -> RunResult:
        """What the session did so far (``finished``: the output is written)."""
        sink, accounts = self.sink, self.accounts
        assert sink is not None
        usage = accounts.usage()
        return RunResult(
            output=self.plan.target,
            rows_requested=self.plan.num_records,
            rows_written=sink.in_output,
            rows_failed=sink.failed,
            errors_file=sink.errors_target if sink.failed else None,
            duration_s=time.perf_counter() - self.started,
            rows_resumed=sink.resumed,
            usage=usage,
            concurrency=accounts.concurrency(),
            preflight=self.report,
            batches=self.batch_mode.infos() if self.batch_mode is not None else None,
            cost=accounts.cost(usage),
            meter=accounts.meter,
            finished=finished,
            endpoints=accounts.endpoints(),
            funnel=self.candidates.funnel if self.candidates is not None else None,
            surplus=sink.surplus,
            servers=self._server_restarts(),
            workers_start_s=None if self.source.ready_at is None else max(0.0, self.source.ready_at - self.started),
        )

    def _server_restarts(self) -> dict[str, int]:
        fleet = self.container.servers
        if fleet is None:
            return {}
        return {name: fleet.restarts.get(name, 0) for name in self.container.reachable_servers()}

    async def abandon(self, error: BaseException) -> None:
        """The session ends unfinished: the checkpoint stays for a resume (unless nothing
        was made nor paid for), and the report says why."""
        checkpoint, batch_mode = self.checkpoint, self.batch_mode
        await self.source.aclose()  # workers started for a pre-flight that failed: gone, with what they paid
        if batch_mode is not None:
            await batch_mode.stop()
        if self.sink is not None:
            self.sink.suspend()
        counts = {"rows_written": checkpoint.kept, "rows_resumed": checkpoint.resumed}
        counts["rows_requested"] = self.plan.num_records
        estimate = self.options.sample_rows is not None
        self.accounts.end(error, self.plan.target, done=checkpoint.is_done, counts=counts, estimate=estimate)
        if checkpoint.kept == 0 and not self.accounts.paid and (batch_mode is None or not batch_mode.holds_batches):
            checkpoint.remove()  # nothing was paid for: leave no empty checkpoint behind
        else:
            checkpoint.close()

    async def close(self) -> None:
        """Whatever happened: meters off, batch mode stopped, the response cache closed."""
        self.accounts.detach()
        await self.source.aclose()  # idempotent
        if self.batch_mode is not None:
            await self.batch_mode.stop()  # idempotent
        if self.responses is not None:
            self.responses.close()


async def _tick(sink: OutputSink) -> None:
    while True:
        await asyncio.sleep(STATUS_TICK_S)
        sink.refresh()
