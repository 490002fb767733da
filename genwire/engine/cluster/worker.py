"""The worker's side of the Ray engine: ``BlockWorker``, the Ray actor that boots its own
container from a ``WorkerSpec`` and runs blocks of rows, metering what it pays and handing
it to the driver by drains (``engine.cluster.drain``); brakes and endpoints out go from
worker to worker. How the engine as a whole works: the package's docstring (``engine.cluster``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import Sequence
from typing import Any

from genwire.container.core import WiredPipeline
from genwire.container.graph import build_graph
from genwire.container.wiring import wire_columns
from genwire.engine.cluster.batch_slots import BatchSlot, held_slot
from genwire.engine.cluster.holds import Holds
from genwire.engine.cluster.shared import worker_meter
from genwire.engine.cluster.wire import Drained, RemoteError, Roster, WorkerSpec
from genwire.engine.money.costs import attach_meter, model_concurrency
from genwire.engine.records.batch_result import BatchResult, batched
from genwire.engine.records.receipt import Receipt, ReceiptBook
from genwire.engine.rows.collector import collector_for_rows
from genwire.engine.rows.failure_stop import FailureStop
from genwire.engine.rows.runner import BatchRunner
from genwire.providers.budget import CostMeter
from genwire.providers.metrics import start_recording, stop_recording
from genwire.providers.request_context import holding_scope
from genwire.providers.response_cache import ResponseCache

BATCHES_IN_FLIGHT = 4  # per worker, across its blocks: keeps its provider slots busy
# A drain woken by an answer yields once, so the rows whose answers just came commit them
# first (no sleep: each answer holds its slot until its drain is stored, and a commit that
# comes later wakes the next drain: engine.cluster.holds).
SETTLE_S = 0.0
CLOSE_POLL_S = 0.01  # ``close`` waits for the drains under way to return


def boot_worker_container(spec: WorkerSpec) -> WiredPipeline:
    """The steps of ``boot`` minus plugin discovery: the driver already discovered and
    validated the generators, and these are exactly the classes it wired."""
    wirings = wire_columns(spec.loaded, spec.generators)
    return WiredPipeline(spec.loaded, wirings, build_graph(spec.loaded, wirings))


class BlockWorker:
    """A Ray actor (async methods: one event loop) running blocks of rows."""

    def __init__(self, spec: WorkerSpec) -> None:
        self._spec = spec
        self._container: WiredPipeline | None = None
        self._runner: BatchRunner | None = None
        self._cache: ResponseCache | None = None
        self._metered: list[Any] = []  # the clients this worker's meter is attached to
        self._book = ReceiptBook()  # what this worker paid for, sent with its rows
        self._verdicts: dict[str, dict[str, str]] = {}  # endpoints other workers took out
        self._peers: list[Any] = []  # the other workers' actor handles (the ``Roster``)
        self._joined = False  # the roster applied: peers, verdicts, the budget's leases
        # Created on first use: asyncio primitives belong to the actor's event loop.
        self._boot_lock: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None
        self._collector = contextlib.ExitStack()  # the rows' collector (engine.rows.collector), from boot to close
        self._process = uuid.uuid4().hex  # this process (a worker Ray restarts counts its blocks afresh)
        self._blocks_ended = 0
        self._draining = 0  # drains under way (``close`` lets them return first)
        self._settle = asyncio.Event()  # an answer paid or a block ended: a drain waiting returns
        self._book.on_paid = self._settle.set
        # The failure-rate stop, judged here on this worker's rows (engine.rows.failure_stop); a
        # peer's verdict (``halt``) stops it too. ``_retried``: rows an earlier session failed.
        self._retried: set[int] = set()
        self._failure_judge = (
            FailureStop(spec.max_failure_rate, self._retried) if spec.max_failure_rate is not None else None
        )
        if self._failure_judge is not None:
            self._failure_judge.on_stop = self._stopping
        self._holds = Holds(self._settle.set)  # paid answers keep their slot until the driver stored them

    async def _ready(self) -> tuple[BatchRunner, asyncio.Semaphore]:
        if self._boot_lock is None:
            self._boot_lock = asyncio.Lock()
        async with self._boot_lock:
            if self._runner is None:
                self._container = boot_worker_container(self._spec)
                if self._spec.response_cache is not None:  # read only: the driver stores the answers
                    self._cache = ResponseCache(self._spec.response_cache, writer=False)
                self._runner = BatchRunner(
                    self._container,
                    self._cache,
                    store_answers=False,
                    keeper=self._spec.gates,
                    admission=self._failure_judge,
                )
                # Metered as on the driver: each paid answer goes to the driver's ledger.
                meter = CostMeter(
                    self._spec.prices,
                    output_limits=self._spec.output_limits,
                    concurrency=model_concurrency(self._container),  # this worker's share
                    record=self._book.paid,
                )
                self._book.meter, self._book.worker = meter, self._spec.worker  # its measurements go with its rows
                self._metered = attach_meter(self._container, self._spec.prices, meter)
                self._container.endpoint_pools()  # built now: they start from the verdicts known so far
                self._container.mark_endpoints(self._verdicts)
                # One brake per model, one verdict per endpoint: passed on to the other workers.
                for name in provider_caps(self._container):
                    gate = getattr(self._container.client(name), "gate", None)
                    if gate is not None:
                        gate.on_brake = functools.partial(self._braked, name)
                for alias, pool in self._container.endpoint_pools().items():
                    pool.on_out = functools.partial(self._out, alias)
                self._slots = asyncio.Semaphore(BATCHES_IN_FLIGHT)
                self._collector.enter_context(collector_for_rows())  # this process makes rows from now on
        assert self._slots is not None
        return self._runner, self._slots

    async def warm(self) -> None:
        """Boot the container ahead of the first block (while the driver's pre-flight
        runs): clients and pools are made, nothing is sent (tool servers start on first use).
        A boot that fails shows with the first block, raised as the driver raises it (an
        error of this call would only be printed by Ray)."""
        with contextlib.suppress(Exception):
            await self._ready()

    async def join(self, roster: Roster) -> None:
        """The roster for an actor that runs no block (the gates' keeper: ``engine.cluster.keeper``)."""
        await self._ready()
        self._join(roster)

    def _join(self, roster: Roster) -> None:
        """The roster, once per process (before the first request: nothing awaits in between)."""
        if self._joined:
            return
        self._joined = True
        self._peers = [actor for index, actor in enumerate(roster.peers) if index != self._spec.worker]
        self._mark(roster.verdicts)
        meter = self._book.meter
        if meter is not None:
            meter.learn(roster.learned)  # a probe's over-long answer marks the model here too
        if any(roster.budget_caps) and meter is not None:  # the cap is the cluster's: spend leases of it
            worker_meter(meter, roster.budget_caps, roster.coordinator, self._spec.worker, self._process)

    async def run_block(
        self, indices: list[int], batch_size: int, roster: Roster | None = None, retried: Sequence[int] = ()
    ) -> tuple[tuple[str, int], list[BatchResult]] | RemoteError:
        """The block's number in this process and its batches in order, or the first error
        in row order (as the local engine would raise it). Their answers and receipts go by
        ``drain``. ``retried``: the block's rows an earlier session failed (not judged)."""
        recording = start_recording(self._book.recorder)  # the block's tasks inherit it
        try:
            runner, slots = await self._ready()
            self._join(roster if roster is not None else Roster())
            self._retried.update(retried)

            async def batch(rows: list[int]) -> BatchResult:
                slot = BatchSlot(slots)
                await slot.take()  # FIFO: earlier blocks' batches go first
                held_slot.set(slot)  # in this batch's task (given up while it waits at the gates' keeper)
                try:
                    return self._told_judge(await runner.run(rows))
                finally:
                    slot.give()

            with holding_scope(self._holds):  # the batches' tasks inherit it
                tasks = [asyncio.create_task(batch(rows)) for rows in batched(indices, batch_size)]
            try:
                results = [await task for task in tasks]
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            self._blocks_ended += 1
            self._settle.set()  # the drain that covers this block goes now
            return (self._process, self._blocks_ended), results
        except Exception as exc:
            return RemoteError.capture(exc)
        finally:
            stop_recording(recording)

    async def drain(self, wait_s: float, stored: tuple[str, int] | None = None) -> Drained:
        """What settled since the last drain (answers, what was paid), once something did
        or after ``wait_s``: the driver keeps one such call waiting on every worker.
        ``stored``: this process's drains up to that number are on the driver's disk (their
        answers' slots are free: ``engine.cluster.holds``)."""
        self._draining += 1
        if stored is not None and stored[0] == self._process:
            self._holds.stored(stored[1])
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settle.wait(), wait_s)
            self._settle.clear()
            await asyncio.sleep(SETTLE_S)  # the rows whose answers just came commit them to their batch
            through = (self._process, self._blocks_ended)
            answers = self._runner.take_answers() if self._runner is not None else []
            number = self._holds.take()  # with its answers, in the same step
            return Drained(answers, self._receipt(), through, number)
        finally:
            self._draining -= 1

    def _told_judge(self, result: BatchResult) -> BatchResult:
        """A batch settled: told to this worker's failure-rate judge; marked when it is stopping."""
        judge = self._failure_judge
        if judge is not None:
            judge.settled(
                result.indices, [int(f["row"]) for f in result.failures], [r["candidate"] for r in result.rejected]
            )
            result.stopping = judge.stopping
        return result

    def _stopping(self) -> None:
        """This worker's rows passed the failure rate: so the others stop sending too."""
        for peer in self._peers:  # not awaited, as a brake: a worker that is gone misses it
            peer.halt.remote()

    async def halt(self) -> None:
        """Another worker's rows passed the failure rate: this one sends nothing more either."""
        if self._failure_judge is not None:
            self._failure_judge.halt()

    def _braked(self, provider: str, model: str, wait: float) -> None:
        for peer in self._peers:  # not awaited: a worker that is gone misses it
            peer.brake.remote(provider, model, wait)

    def _out(self, alias: str, endpoint: str, error_class: str) -> None:
        for peer in self._peers:  # not awaited: a worker that is gone misses it
            peer.mark_endpoints.remote({alias: {endpoint: error_class}})

    async def mark_endpoints(self, verdicts: dict[str, dict[str, str]]) -> None:
        """Another worker took an endpoint out (``{alias: {endpoint: error class}}``): so does this one."""
        self._mark(verdicts)

    def _mark(self, verdicts: dict[str, dict[str, str]]) -> None:
        for alias, found in verdicts.items():  # kept: a worker that has not booted yet starts from them
            self._verdicts.setdefault(alias, {}).update(found)
        if self._container is not None:
            self._container.mark_endpoints(verdicts)

    async def brake(self, provider: str, model: str, wait: float) -> None:
        """Another worker's gate braked ``model`` of ``provider``: so does this one's."""
        container = self._container
        gate = getattr(container.client(provider), "gate", None) if container is not None else None
        if gate is not None:
            gate.brake(model, wait)

    def _receipt(self) -> Receipt:
        container = self._container
        if container is None:
            return self._book.take({}, {})
        return self._book.take(container.usage_by_model(), container.endpoint_stats(), container.concurrency())

    async def close(self) -> Receipt:
        """Close the container; returns what this worker paid for since its last drain
        (a block cancelled or failed midway). A drain waiting returns first."""
        self._settle.set()  # a drain waiting returns: the driver reads it before killing this actor
        while self._draining:
            await asyncio.sleep(CLOSE_POLL_S)
        receipt = self._receipt()
        self._holds.free_all()
        container, self._container, self._runner = self._container, None, None
        cache, self._cache = self._cache, None
        for client in self._metered:
            client.meter = None
        self._metered = []
        if cache is not None:
            cache.close()
        if container is not None:
            await container.aclose()
        self._collector.close()
        return receipt


def provider_caps(container: WiredPipeline) -> dict[str, int]:
    """``max_concurrency`` of every provider some column's model runs on."""
    cfg = container.config
    caps: dict[str, int] = {}
    for column in container.columns:
        for slot in column.slots.values():
            for name in slot.resources:
                model = cfg.models.get(name)
                for provider in model.providers if model is not None else ():
                    caps[provider] = cfg.providers[provider].max_concurrency
    return caps
