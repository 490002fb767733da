"""The Ray engine's driver: the same pipeline, its rows split into blocks run by Ray actors.

This module holds ``RayBatches``, what the driver does (workers made, blocks dispatched, results
yielded in row order); the worker is ``engine.cluster.worker``, what crosses between them
``engine.cluster.wire``, the driver's helpers ``engine.cluster.fleet``.

How the engine works as a whole: the package's docstring (``engine.cluster``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from types import ModuleType
from typing import Any, Protocol

from genwire.container.core import WiredPipeline
from genwire.engine.cluster.block_rows import BlockRows
from genwire.engine.cluster.drain import Drains
from genwire.engine.cluster.fleet import (
    BLOCKS_PER_WORKER,
    MAX_RESTARTS,
    MAX_TASK_RETRIES,
    batch_keys,
    close_workers,
    driver_error,
    import_ray,
    per_block,
    requested_workers,
    split_config,
    store_worker_answers,
)
from genwire.engine.cluster.instance import ensure_ray
from genwire.engine.cluster.shared import ClusterBudget, Coordinator
from genwire.engine.cluster.wire import RemoteError, Roster, WorkerSpec
from genwire.engine.cluster.worker import BlockWorker, provider_caps
from genwire.engine.money.costs import priced_models
from genwire.engine.records.batch_result import BatchResult
from genwire.engine.records.receipt import Receipt
from genwire.engine.rows.failure_stop import FailureStop
from genwire.errors import RunError, exception_text
from genwire.providers.pricing import Price
from genwire.providers.response_cache import ResponseCache

log = logging.getLogger("genwire.ray")


class GateKeeping(Protocol):
    """A gated run's in-order gates on the cluster (``engine.cluster.keeper.RayGates``)."""

    def start(self, ray: ModuleType, spec: WorkerSpec) -> Any:
        """The keeper, booted from ``spec``: what a worker's spec carries (``.actor``: its handle)."""

    def enter(self, keys: list[int]) -> None: ...  # a block's batch keys, as it is submitted

    async def settled(self, keys: list[int]) -> Receipt: ...  # a block's rows are back: what the keeper paid

    async def close(self, ray: ModuleType, feed: Callable[[Receipt], None]) -> None: ...


@dataclasses.dataclass
class Block:
    """Rows sent to one worker; ``result`` resolves when the whole block is done."""

    rows: list[int]
    worker: int
    ref: Any  # the Ray ObjectRef of ``BlockWorker.run_block``
    result: asyncio.Future[Any]
    running: bool = True  # counted in its worker's load until it finishes


class RayBatches:
    """The run's batches, in row order, computed by Ray actors."""

    def __init__(
        self,
        container: WiredPipeline,
        address: str | None,
        workers: int | None,
        response_cache: ResponseCache | None = None,
        *,
        feed: Callable[[Receipt], None] = lambda receipt: None,
        prices: dict[str, Price | None] | None = None,
        budget: ClusterBudget | None = None,
        output_limits: dict[str, int] | None = None,
        gates: GateKeeping | None = None,
        failure_stop: FailureStop | None = None,
    ) -> None:
        """``response_cache``: the driver's cache, the one that stores the workers' answers;
        ``feed``: the run's accounting, which every worker's receipt goes to; ``prices``:
        the models' prices the workers' meters price their answers with; ``budget``: the
        run's, held cluster-wide by a coordinator when capped; ``gates``: a gated run's
        in-order gates, judged by one keeper for the cluster; ``failure_stop``: the session's
        judge of the failure rate, judged live on each worker too (``engine.rows.failure_stop``)."""
        self._container = container
        self._cache = response_cache
        self._address = address
        self._workers = workers
        self._feed = feed
        self._prices = prices  # the run's, resolved once (None: resolved here)
        self._budget = budget
        self._output_limits = output_limits or {}  # the models' output limits (a worst case without max_tokens)
        self._starting: asyncio.Task[None] | None = None
        self._actors: list[Any] = []
        self._coordinator: Any = None  # a capped run's (engine.cluster.shared), made with the workers
        self._gates = gates
        self._failure_stop = failure_stop
        self._keeper: Any = None  # the gates' keeper's client (engine.cluster.keeper), made with the workers
        self._drains: Drains | None = None  # what the workers settle, stored as it comes (engine.cluster.drain)
        # When (time.perf_counter) every worker had booted its container: an estimate counts the start-up.
        self.ready_at: float | None = None
        self._warming: asyncio.Task[None] | None = None

    def live_rows(self) -> int:
        return 0  # batch mode, which counts them, runs on the local engine only

    def start(self, rows: int, batch_size: int) -> None:
        """Start the workers in the background for about ``rows`` rows: Ray joined (or
        started: seconds), the actors made and their containers booted, while the driver's
        pre-flight runs. They generate nothing until ``batches``, which comes only once
        the pre-flight passed; ``aclose`` ends them if it did not."""
        if self._starting is None and rows > 0:
            self._starting = asyncio.create_task(self._start(rows, batch_size))

    async def _start(self, rows: int, batch_size: int) -> None:
        container = self._container
        ray = import_ray()
        # An override is a live object in the driver's process; workers boot from the config.
        overridden = container.overridden_names()
        if overridden:
            raise RunError(
                f"the ray engine cannot carry container overrides to its workers (overridden: "
                f"{', '.join(overridden)}); run with engine='local', or point the config at the resource"
            )
        # Starting Ray takes seconds: off the loop, beside the pre-flight. Joined, it tells
        # the reaper of an instance this process started about the workers it has now.
        await asyncio.to_thread(ensure_ray, ray, self._address)
        caps = provider_caps(container)
        # At most the smallest cap: every worker needs one slot of each provider it calls.
        workers = min([requested_workers(ray, self._workers), *caps.values()])
        workers = min(workers, math.ceil(rows / (per_block(rows, batch_size, workers) * batch_size)))
        generators = {c.generator_name: c.generator_cls for c in container.columns}
        prices = priced_models(container) if self._prices is None else self._prices  # read here, not on every node
        cache = self._cache
        if cache is not None:
            # Made before the workers start, so that they find it and only ever read it.
            await asyncio.to_thread(cache.prepare)
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        actor_cls = ray.remote(BlockWorker).options(
            max_restarts=MAX_RESTARTS,
            max_task_retries=MAX_TASK_RETRIES,
            num_cpus=min(1.0, cpus / workers),  # one CPU each, shared when asked for more workers than CPUs
        )
        budget = self._budget
        if budget is not None and budget.capped:  # its process boots beside the workers'
            self._coordinator = ray.remote(Coordinator).options(num_cpus=0).remote(**budget.coordinator_args(workers))
        loaded = container.loaded
        if container.servers is not None:  # SPEC §23: the driver runs the servers; workers only call them
            loaded = dataclasses.replace(loaded, config=container.servers.resolved(loaded.config))
        warming = []
        for i in range(workers):
            spec = WorkerSpec(
                split_config(loaded, caps, workers, i),
                generators,
                None if cache is None else cache.directory,
                prices,
                output_limits=self._output_limits,
                worker=i,
                max_failure_rate=self._failure_stop.max_failure_rate if self._failure_stop is not None else None,
            )
            try:
                if self._gates is not None and self._keeper is None:  # booted as a worker, on the first one's share
                    self._keeper = self._gates.start(ray, dataclasses.replace(spec, worker=workers))
                actor = actor_cls.remote(dataclasses.replace(spec, gates=self._keeper))
            except Exception as exc:  # the spec must pickle: config data and importable classes
                raise RunError(f"cannot send the pipeline to the Ray workers: {exception_text(exc)}") from exc
            self._actors.append(actor)
            warming.append(actor.warm.remote())  # its container boots now; a failure shows with its first block
        self._warming = asyncio.create_task(self._stamp_ready(warming))

    async def _stamp_ready(self, warming: list[Any]) -> None:
        """``ready_at``, once every worker's container booted (or failed to: its block says so)."""
        await asyncio.gather(*warming, return_exceptions=True)
        self.ready_at = time.perf_counter()

    async def aclose(self) -> None:
        """End the workers (again: a no-op): after the rows, or a run that ends before them
        (a failed pre-flight). Waits for a start under way, so no actor is left behind."""
        starting, self._starting = self._starting, None
        if starting is not None:
            starting.cancel()  # a no-op once started; else no (more) actors are made
            await asyncio.gather(starting, return_exceptions=True)
        warming, self._warming = self._warming, None
        if warming is not None:
            warming.cancel()  # a no-op once the workers are ready
        actors, self._actors = self._actors, []
        drains, self._drains = self._drains, None
        if actors:
            await close_workers(import_ray(), actors, self._feed, drains)
        keeper, self._keeper = self._keeper, None
        if keeper is not None and self._gates is not None:
            await self._gates.close(import_ray(), self._feed)
        coordinator, self._coordinator = self._coordinator, None
        if coordinator is not None:
            with contextlib.suppress(Exception):
                import_ray().kill(coordinator)

    async def batches(
        self, indices: Iterator[int], batch_size: int, *, feed: Iterator[list[int]] | None = None
    ) -> AsyncGenerator[BatchResult, None]:
        """``feed`` (a gated run's ``CandidatePlan``) says which rows to start, in place of
        ``indices``, as the kept rows come in (the blocks are sized from its first window)."""
        container = self._container
        todo = BlockRows(indices, feed)  # the rows a resumed run still needs, or the plan's candidates
        n = todo.window
        if n == 0:
            return
        self.start(n, batch_size)  # the session started them before its pre-flight; a direct caller, now
        pending: deque[Block] = deque()  # sent, not yet yielded, in row order
        try:
            assert self._starting is not None
            await self._starting  # its error (Ray, overrides) is the run's
            ray, actors, coordinator = import_ray(), self._actors, self._coordinator
            workers = len(actors)
            block_rows = per_block(n, batch_size, workers) * batch_size
            budget = self._budget if coordinator is not None else None
            if budget is not None:  # the cap is the cluster's (engine.cluster.shared): less what the probes paid
                before = budget.coordinator_args(workers)
                await coordinator.begin.remote(spent_usd=before["spent_usd"], spent_tokens=before["spent_tokens"])
            keeper = self._keeper
            roster = Roster(
                actors + ([keeper.actor] if keeper is not None else []),  # the gates' keeper brakes as a worker
                container.endpoint_verdicts(),  # the pre-flight's
                coordinator,
                budget.caps if budget is not None else (False, False),
                learned=self._budget.costs.meter.learned() if self._budget is not None else {},
            )
            if keeper is not None:  # it runs no block: its roster now, before any worker's batch asks it
                await keeper.actor.join.remote(roster)
            self._drains = Drains(ray, actors, self._cache, self._feed)
            dispatch = self._dispatch(ray, roster, todo, feed is not None, batch_size, block_rows, budget, pending)
            async with contextlib.aclosing(dispatch):
                async for result in dispatch:
                    yield result
        finally:
            for block in pending:
                block.result.cancel()
                with contextlib.suppress(Exception):
                    import_ray().cancel(block.ref)
            await asyncio.gather(*(block.result for block in pending), return_exceptions=True)
            await self._close_run()

    async def _close_run(self) -> None:
        """The workers closed (what they paid since their last block fed), then the
        coordinator's last word noted, then everything killed."""
        coordinator, self._coordinator = self._coordinator, None
        await self.aclose()
        if coordinator is not None:
            with contextlib.suppress(Exception):
                status = await coordinator.status.remote()
                if self._budget is not None:
                    self._budget.note(status)
                log.debug("the coordinator answered %d lease call(s)", status.leases)
        if coordinator is not None:
            with contextlib.suppress(Exception):
                import_ray().kill(coordinator)

    async def _dispatch(
        self,
        ray: ModuleType,
        roster: Roster,
        todo: BlockRows,
        planned: bool,
        batch_size: int,
        block_rows: int,
        budget: ClusterBudget | None,
        pending: deque[Block],
    ) -> AsyncGenerator[BatchResult, None]:
        """Blocks to the workers, results in row order. A worker gets its next block as
        soon as one of its blocks finishes, whatever the order (it never idles waiting for
        an earlier block of another worker), up to ``BLOCKS_PER_WORKER`` running and
        ``ahead`` blocks not yet yielded (bounded memory)."""
        actors, coordinator, gates = self._actors, roster.coordinator, self._gates
        workers, n, cache = len(actors), todo.window, self._cache
        running = [0] * workers
        ahead = workers * (BLOCKS_PER_WORKER + 1)
        rows_done = 0  # rows returned in this session (what a row costs, for the budget's hold)
        judge = self._failure_stop
        retried = judge.retried if judge is not None else ()

        def held() -> bool:
            """No new rows: the failure rate passed; the budget exhausted, or near the cap while blocks run."""
            if judge is not None and judge.stopping:
                return True
            if budget is None:
                return False
            if budget.exhausted():
                return True
            live = sum(len(block.rows) for block in pending)
            return bool(pending) and budget.hold_rows(rows_done, live, block_rows)

        def submit() -> None:
            while len(pending) < ahead and not held():
                worker = min(range(workers), key=running.__getitem__)
                if running[worker] >= BLOCKS_PER_WORKER or not todo.more():
                    return
                # Blocks shrink towards the end (never below a batch): the last ones end
                # together instead of one worker finishing a long block while the others' slots idle.
                # (A plan's end is unknown: its blocks keep the size of its first window's.)
                left = n if planned else todo.left
                share = math.ceil(left / (workers * BLOCKS_PER_WORKER) / batch_size) * batch_size
                if budget is not None and rows_done == 0:  # under a cap the first block, alone, shows what a row costs
                    share = batch_size
                rows = todo.take(max(batch_size, min(block_rows, share)))
                if gates is not None:  # before the block: the keeper takes the batches in index order
                    gates.enter(batch_keys(rows, batch_size))
                running[worker] += 1
                again = [row for row in rows if row in retried] if retried else []
                ref = actors[worker].run_block.remote(rows, batch_size, roster, again)
                pending.append(Block(rows, worker, ref, asyncio.ensure_future(ref)))

        submit()
        while pending:
            if not pending[0].result.done():
                await asyncio.wait([b.result for b in pending if b.running], return_when=asyncio.FIRST_COMPLETED)
            for block in pending:
                if block.running and block.result.done():
                    block.running = False
                    running[block.worker] -= 1
            submit()  # the worker that finished gets its next block now
            if not pending[0].result.done():
                continue
            block = pending.popleft()
            try:
                out = block.result.result()
            except ray.exceptions.RayError as exc:
                raise driver_error(ray, exc, block.rows[0], block.rows[-1] + 1) from exc
            if isinstance(out, RemoteError):
                raise out.rebuild()
            through, out = out
            assert self._drains is not None
            await self._drains.covered(block.worker, through)  # its answers and receipts stored and fed
            rows_done += sum(len(result.indices) for result in out)
            if judge is not None and any(result.stopping for result in out):
                judge.halt()  # a worker passed the rate: no new block; the session judges the rows written
            if budget is not None and coordinator is not None:
                budget.note(await coordinator.status.remote())
            submit()  # before yielding: the next block runs while the sink writes this one
            if gates is not None:  # what the keeper paid for these rows: before they are checkpointed
                self._feed(await gates.settled(batch_keys(block.rows, batch_size)))
            if cache is not None:
                await store_worker_answers(cache, out)
            for result in out:
                yield result
            submit()  # a gated run's plan has recorded these rows: it may take more now
