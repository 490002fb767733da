"""The Ray engine: the same pipeline, its rows split into blocks run by Ray actors.

How it works
------------
The driver has already validated and wired the container (``run_pipeline``). While
its pre-flight runs, ``start`` joins (or starts, off the event loop) Ray, creates W worker
actors and has them boot their containers (``warm``): the seconds a worker process takes
to start overlap the probes instead of following them. Nothing is generated until the
pre-flight passed (``batches``); a run that ends before (a failed pre-flight) ends them
(``aclose``). Then it hands them blocks of rows ``[start, stop)`` and yields the blocks'
``BatchResult``s strictly in row order, so the ``OutputSink`` writes exactly what the
local engine writes.

* **Dispatch.** A worker gets its next block as soon as one of its blocks finishes,
  whatever the order (it never idles while an earlier block of another worker is still
  out); finished blocks wait for the earlier ones on the driver, at most
  ``BLOCKS_PER_WORKER + 1`` per worker. Blocks shrink towards the end (down to one batch)
  and go to the least loaded worker, so the workers finish together.
* **The roster.** What a worker learns only once the pre-flight passed (the other
  workers' handles, the pre-flight's endpoint verdicts, the budget's coordinator) is a
  ``Roster`` sent with every block, applied before the block's first request: a worker
  Ray restarts gets it again with the block it re-runs.

* **Workers boot their own container.** Each actor gets a pickled ``LoadedConfig``
  (never a client or a resource) plus the generator classes the driver wired, and builds
  its container with the same ``wire_columns``/``build_graph`` steps ``boot`` uses. The
  classes travel as references (importable modules), so a worker wires exactly what
  the driver wired — including classes given to ``genwire.boot(generators=...)`` —
  without re-scanning entry points. The container is booted lazily inside the actor's
  event loop (clients belong to a loop: ``warm``, called as soon as the actor is made)
  and closed by ``close()``, which the driver calls at the end, on failure and on
  cancellation, before killing the actor.
* **Same rows as the local engine.** A block runs ``BatchRunner.run(indices)`` on
  global row indices (a resumed run sends only the rows its checkpoint lacks), so
  every seeded generator (sampler, seed-dataset shuffle) draws the same values
  whichever worker runs a row.
* **Cluster-wide ``max_concurrency``.** Each provider's cap is *split* across workers:
  worker i gets ``cap // W`` slots plus one of the ``cap % W`` left over, and W is
  capped by the smallest cap among the providers the columns use, so every worker has
  at least one slot and the sum is exactly the configured cap. A shared limiter actor
  would adapt to uneven load but adds a round trip to the limiter per request and a
  single point of failure; splitting is exact and free, at the cost of idle slots when
  one worker has less to do than another (blocks are small and handed to the least
  loaded worker, which keeps that cost low).
* **Rate limits.** ``rate_limit`` is split the same way (each worker paces at 1/W of the
  requests and tokens per minute: the shares sum to the cluster's rate). A brake is the
  cluster's: when 429s persist on one worker, its gate tells every other worker
  (the ``Roster`` gives each the others' handles), which brakes that model of that
  endpoint too (``engine.cluster.shared``).
* **The budget** (``--max-cost``, ``pipeline.budget``) is held cluster-wide by a
  coordinator actor (``engine.cluster.shared``), made with the workers (its process boots
  beside theirs) and told what the pre-flight's probes spent (``Coordinator.begin``)
  before the first block: each worker's meter spends leases of the cap,
  the driver reads the coordinator after every block and takes no new rows once it is
  exhausted (or, as locally, while what is left would not finish them), and the run
  stops with exit 3.
* **Tools** (SPEC §18): each worker's container starts the stdio servers its columns
  use on first use, one per server per worker, under the launcher's reaper with its
  parent the worker process (declared variables only): a worker closed at the end stops
  them, a worker Ray kills (or the driver's death, which ends its actors) takes them
  with it. The pre-flight runs once, on the driver.
* **Pools** (SPEC §17): every worker routes, cools down and fails over on its own pools,
  starting from the driver's verdicts (the pre-flight's); a member a worker takes out
  (auth, not_found) is out on every worker (it tells the others, as a brake); the
  per-endpoint figures come back in the receipts and add up.
* **Quality gates** (SPEC §21): a gated run's ``CandidatePlan`` feeds the driver
  (``batches(feed=...)``): it counts the kept rows as blocks come back and stops
  scheduling at N. Stateless gates run on the workers; stateful ones (``in_order``) are
  judged for the whole cluster by one keeper actor, in index order (``engine.cluster.keeper``),
  made with the workers; it gets the roster (``BlockWorker.join``) before the first block.
* **Fault tolerance.** Actors have ``max_restarts`` and their tasks
  ``max_task_retries``: a worker process that dies mid-block is restarted (a new
  ``BlockWorker`` from the same ``WorkerSpec``, the roster from the re-run block) and the
  block re-run. A block's result is returned only when the whole block is done, so a retried
  block neither loses nor duplicates rows. Genuine errors (``PluginError``,
  ``UndeclaredResourceError``, ``RunError``...) are *returned* as a picklable record and
  re-raised on the driver as the same type, message and attributes: genwire's errors
  take other constructor arguments than they store, so Ray's own exception pickling
  would garble or fail to rebuild them, and application errors are never retried.
* **Bounded memory.** At most ``BLOCKS_PER_WORKER + 1`` blocks per worker are submitted
  and not yet yielded; a block is a few batches.
* **What workers need.** Plugins installed (their classes are imported, not copied)
  and dataset files at the same absolute paths on every node; each worker loads its own
  copy of any embedded (``local``) model. Container overrides live in the driver's
  process only, so a run with overrides is refused rather than silently using the real
  resource on the workers.
* **Accounting: the driver is its one writer.** Each worker meters its requests as the
  driver does and sends what it paid for with its rows: the last ``BatchResult`` of a
  block carries a ``Receipt`` (usage, ledger entries with their rows, per-second request
  figures, a pool's per-endpoint figures, each since its previous receipt), and closing a
  worker returns what a cancelled block paid. The driver feeds every receipt to the run's
  ``RunAccounts`` before the block's rows go to the checkpoint, so the ledger, the cost,
  the metrics, the report page and ``--json`` count the workers' requests as a local run
  counts its own.
* **Checkpoints.** Blocks come back to the driver in row order and go through the same
  ``OutputSink`` as the local engine's batches: the driver writes the checkpoint, and a
  resume sends the workers only the missing rows.
* **Response cache: the driver is its one writer.** Workers open the driver's cache
  directory (``WorkerSpec``) to read it only: on a cluster it must be a path every node
  sees (``cache.dir`` on a shared file system), where SQLite's locking is not to be
  trusted with concurrent writers. The answers a worker paid for travel back in each
  ``BatchResult`` (keys, bodies, tokens), and the driver stores them, before the rows go
  to the checkpoint, as the local engine does: when the run returns, every answer it
  paid for is in the cache, however loaded the machine (workers writing at once waited
  on each other's locks, and one that waited past ``WRITE_WAIT_S`` dropped the rest of
  its answers). Hits travel back in each ``BatchResult`` and in the workers' usage.
* **Ray's lifetime** (``engine.cluster.instance``). An existing Ray (``ray.is_initialized()``)
  is used as is and never shut down. Otherwise ``ray.init(address=...)`` (the
  ``ray_address`` given, else Ray's own ``RAY_ADDRESS``) joins that cluster or starts a
  local one (quietly, no dashboard), which is left running: starting Ray costs seconds, so
  a second run in the same process reuses it; at interpreter exit genwire shuts it down and
  a reaper process kills every process of it left (at once if genwire is killed). The
  actors of a run are always killed at the end of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import pickle
import re
import traceback
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from genwire.config.loader import LoadedConfig
from genwire.container.core import WiredPipeline
from genwire.container.graph import build_graph
from genwire.container.wiring import wire_columns
from genwire.engine.cluster.batch_slots import BatchSlot, held_slot
from genwire.engine.cluster.block_rows import BlockRows
from genwire.engine.cluster.drain import Drains
from genwire.engine.cluster.instance import ensure_ray
from genwire.engine.cluster.shared import ClusterBudget, Coordinator, worker_meter
from genwire.engine.money.costs import attach_meter, model_concurrency, priced_models
from genwire.engine.records.batch_result import BatchResult, batched
from genwire.engine.records.receipt import Receipt, ReceiptBook
from genwire.engine.rows.collector import collector_for_rows
from genwire.engine.rows.runner import BatchRunner
from genwire.errors import GenwireError, RunError, exception_text
from genwire.generators.base import Generator
from genwire.providers.budget import CostMeter
from genwire.providers.metrics import start_recording, stop_recording
from genwire.providers.pricing import Price
from genwire.providers.response_cache import ResponseCache

INSTALL_HINT = "the ray engine needs Ray: pip install 'genwire[ray]'"
BATCHES_PER_BLOCK = 4  # a retried block re-runs at most this many batches
BLOCKS_PER_WORKER = 2  # running on a worker: one, and one queued behind it
BATCHES_IN_FLIGHT = 4  # per worker, across its blocks: keeps its provider slots busy
MAX_RESTARTS = 3  # a worker process that dies is restarted this many times
MAX_TASK_RETRIES = 3  # a block whose worker died is re-run this many times
CLOSE_TIMEOUT_S = 30.0
SETTLE_S = 0.01  # a drain woken by an answer lets its row commit it first

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
log = logging.getLogger("genwire.ray")


# --- what crosses the wire -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to boot its container: plain data and class references."""

    loaded: LoadedConfig
    generators: dict[str, type[Generator[Any]]]
    response_cache: Path | None = None  # the driver's cache directory: a path every node sees
    prices: dict[str, Price | None] = dataclasses.field(default_factory=dict)  # the driver's, resolved once
    output_limits: dict[str, int] = dataclasses.field(default_factory=dict)  # the driver's: the same worst cases
    worker: int = 0  # this worker's index
    gates: Any = None  # the run's in-order gates' keeper (engine.cluster.keeper.KeeperClient), when it has any


@dataclasses.dataclass(frozen=True)
class Roster:
    """What a worker learns once the driver's pre-flight passed, sent with every block: a
    worker Ray restarts (its process died: a new ``BlockWorker`` from the same
    ``WorkerSpec``) gets it again with the block it re-runs, before any request."""

    peers: list[Any] = dataclasses.field(default_factory=list)  # every worker's handle by index, the keeper's last
    verdicts: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # the driver's, on pools
    coordinator: Any = None  # the run's coordinator actor (engine.cluster.shared), when the budget is capped
    budget_caps: tuple[bool, bool] = (False, False)  # a cost cap, a token cap: spent in leases of the coordinator's
    learned: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the probes showed (CostMeter.learned)


@dataclasses.dataclass(frozen=True)
class Drained:
    """What a worker settled since its last drain: answers for the cache and what it paid
    (the ledger's entries...), sent as they come, not with the block's rows, so a driver
    killed mid-block has them on disk. ``through``: the worker process and how many of its
    blocks had ended when it was taken (the driver checkpoints a block's rows only once a
    drain taken after the block's end is stored)."""

    answers: list[Any]
    receipt: Receipt
    through: tuple[str, int]


@dataclasses.dataclass(frozen=True)
class RemoteError:
    """An exception raised on a worker, rebuilt on the driver as the same type.

    Rebuilt without calling ``__init__`` (genwire's errors take other arguments than
    they store in ``args``), so type, message and attributes are exactly the worker's.
    """

    cls: type[BaseException]
    args: tuple[Any, ...]
    state: dict[str, Any]
    remote_traceback: str

    @classmethod
    def capture(cls, exc: BaseException) -> RemoteError:
        remote_tb = "".join(traceback.format_exception(exc))
        record = cls(type(exc), exc.args, dict(vars(exc)), remote_tb)
        try:
            pickle.dumps(record)
        except Exception:  # an unpicklable argument or a class only the worker can import
            message = f"a Ray worker raised {exception_text(exc)}"
            return cls(RunError, (message,), {}, remote_tb)
        return record

    def rebuild(self) -> BaseException:
        exc = self.cls.__new__(self.cls)
        exc.args = self.args
        vars(exc).update(self.state)
        exc.add_note(f"raised on a Ray worker:\n{self.remote_traceback}")
        return exc


# --- the worker ------------------------------------------------------------------------


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

    async def _ready(self) -> tuple[BatchRunner, asyncio.Semaphore]:
        if self._boot_lock is None:
            self._boot_lock = asyncio.Lock()
        async with self._boot_lock:
            if self._runner is None:
                self._container = boot_worker_container(self._spec)
                if self._spec.response_cache is not None:  # read only: the driver stores the answers
                    self._cache = ResponseCache(self._spec.response_cache, writer=False)
                self._runner = BatchRunner(self._container, self._cache, store_answers=False, keeper=self._spec.gates)
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
            worker_meter(meter, roster.budget_caps, roster.coordinator, self._spec.worker)

    async def run_block(
        self, indices: list[int], batch_size: int, roster: Roster | None = None
    ) -> tuple[tuple[str, int], list[BatchResult]] | RemoteError:
        """The block's number in this process and its batches in order, or the first error
        in row order (as the local engine would raise it). Their answers and receipts go by
        ``drain``."""
        recording = start_recording(self._book.recorder)  # the block's tasks inherit it
        try:
            runner, slots = await self._ready()
            self._join(roster if roster is not None else Roster())

            async def batch(rows: list[int]) -> BatchResult:
                slot = BatchSlot(slots)
                await slot.take()  # FIFO: earlier blocks' batches go first
                held_slot.set(slot)  # in this batch's task (given up while it waits at the gates' keeper)
                try:
                    return await runner.run(rows)
                finally:
                    slot.give()

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

    async def drain(self, wait_s: float) -> Drained:
        """What settled since the last drain (answers, what was paid), once something did
        or after ``wait_s``: the driver keeps one such call waiting on every worker."""
        self._draining += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settle.wait(), wait_s)
            self._settle.clear()
            await asyncio.sleep(SETTLE_S)  # the rows whose answers just came commit them to their batch
            through = (self._process, self._blocks_ended)
            answers = self._runner.take_answers() if self._runner is not None else []
            return Drained(answers, self._receipt(), through)
        finally:
            self._draining -= 1

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
            await asyncio.sleep(SETTLE_S)
        receipt = self._receipt()
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


# --- the driver ------------------------------------------------------------------------


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise RunError(INSTALL_HINT) from None
    return ray


def requested_workers(ray: ModuleType, workers: int | None) -> int:
    """``workers`` when given, else one per CPU of the cluster."""
    if workers is not None:
        return max(1, workers)
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


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


def split_config(loaded: LoadedConfig, caps: dict[str, int], workers: int, index: int) -> LoadedConfig:
    """Worker ``index``'s share of every used provider's slots and ``rate_limit``; the
    shares sum to the provider's figures."""
    providers = dict(loaded.config.providers)
    for name, cap in caps.items():
        share = cap // workers + (1 if index < cap % workers else 0)
        update: dict[str, object] = {"max_concurrency": share}
        limit = getattr(providers[name], "rate_limit", None)
        if limit is not None:  # an exact share of the pacing too: the shares sum to the limit
            update["rate_limit"] = limit.model_copy(
                update={key: value / workers for key, value in limit.model_dump().items() if value is not None}
            )
        providers[name] = providers[name].model_copy(update=update)
    return dataclasses.replace(loaded, config=loaded.config.model_copy(update={"providers": providers}))


def driver_error(ray: ModuleType, exc: BaseException, start: int, stop: int) -> BaseException:
    """A Ray failure as the genwire error the user should see."""
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, GenwireError):
        return exc.cause
    if isinstance(exc, ray.exceptions.RayActorError) and getattr(exc, "actor_init_failed", False):
        return RunError(
            f"a Ray worker could not start ({last_line(exc)}); the pipeline's generator classes and their "
            "modules must be importable on every Ray node (install the plugins there too)"
        )
    if isinstance(exc, ray.exceptions.RayActorError):
        return RunError(
            f"a Ray worker process died running rows [{start}, {stop}) and the block could not be completed "
            f"within the retry budget ({MAX_RESTARTS} restarts per worker, {MAX_TASK_RETRIES} retries per "
            f"block): {first_line(exc)}"
        )
    return RunError(f"Ray failed running rows [{start}, {stop}): {type(exc).__name__}: {first_line(exc)}")


def _lines(exc: BaseException) -> list[str]:
    text = _ANSI.sub("", str(exc))  # Ray colours its messages
    return [line.strip() for line in text.splitlines() if line.strip()] or [type(exc).__name__]


def first_line(exc: BaseException) -> str:
    return _lines(exc)[0]


def last_line(exc: BaseException) -> str:
    """The root cause, for Ray errors that end with the remote traceback's last line."""
    return _lines(exc)[-1]


async def close_workers(
    ray: ModuleType, actors: list[Any], feed: Callable[[Receipt], None], drains: Drains | None = None
) -> None:
    """Close every worker's container (bounded wait) and free the actors' CPUs; ``feed``
    gets what the workers paid for since their last drain, ``drains`` their last drains
    (before the actors are killed)."""
    try:
        if drains is not None:
            drains.closing()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(drains.last(actors), CLOSE_TIMEOUT_S)
        if actors:
            closing = asyncio.gather(*(actor.close.remote() for actor in actors), return_exceptions=True)
            with contextlib.suppress(asyncio.TimeoutError):
                for receipt in await asyncio.wait_for(closing, CLOSE_TIMEOUT_S):
                    if isinstance(receipt, Receipt):
                        feed(receipt)
    finally:
        if drains is not None:
            await drains.close()
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)


def batch_keys(rows: list[int], batch_size: int) -> list[int]:
    """The keys of a block's batches (each one's first row), as its worker batches it."""
    return [batch[0] for batch in batched(rows, batch_size)]


async def store_worker_answers(cache: ResponseCache, results: list[BatchResult]) -> None:
    """Store the answers a block's workers paid for (one transaction, off the event loop)
    and count its hits as this process's: the workers only read the cache."""
    answers = [entry for result in results for entry in result.answers]
    for result in results:
        result.answers = []  # stored: the rows go on without them
        cache.hits += result.cached
    if answers and cache.writable:
        await asyncio.to_thread(cache.put_many, answers)


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


def per_block(n: int, batch_size: int, workers: int) -> int:
    """Batches per block: small enough that every worker gets blocks, large enough to
    amortise a round trip."""
    return max(1, min(BATCHES_PER_BLOCK, math.ceil(math.ceil(n / batch_size) / (workers * BLOCKS_PER_WORKER))))


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
    ) -> None:
        """``response_cache``: the driver's cache, the one that stores the workers' answers;
        ``feed``: the run's accounting, which every worker's receipt goes to; ``prices``:
        the models' prices the workers' meters price their answers with; ``budget``: the
        run's, held cluster-wide by a coordinator when capped; ``gates``: a gated run's
        in-order gates, judged by one keeper for the cluster."""
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
        self._keeper: Any = None  # the gates' keeper's client (engine.cluster.keeper), made with the workers
        self._drains: Drains | None = None  # what the workers settle, stored as it comes (engine.cluster.drain)

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
        for i in range(workers):
            spec = WorkerSpec(
                split_config(loaded, caps, workers, i),
                generators,
                None if cache is None else cache.directory,
                prices,
                output_limits=self._output_limits,
                worker=i,
            )
            try:
                if self._gates is not None and self._keeper is None:  # booted as a worker, on the first one's share
                    self._keeper = self._gates.start(ray, dataclasses.replace(spec, worker=workers))
                actor = actor_cls.remote(dataclasses.replace(spec, gates=self._keeper))
            except Exception as exc:  # the spec must pickle: config data and importable classes
                raise RunError(f"cannot send the pipeline to the Ray workers: {exception_text(exc)}") from exc
            self._actors.append(actor)
            actor.warm.remote()  # its container boots now; a failure shows with its first block

    async def aclose(self) -> None:
        """End the workers (again: a no-op): after the rows, or a run that ends before them
        (a failed pre-flight). Waits for a start under way, so no actor is left behind."""
        starting, self._starting = self._starting, None
        if starting is not None:
            starting.cancel()  # a no-op once started; else no (more) actors are made
            await asyncio.gather(starting, return_exceptions=True)
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

        def held() -> bool:
            """The budget takes no new rows: exhausted, or near the cap while blocks run."""
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
                ref = actors[worker].run_block.remote(rows, batch_size, roster)
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
