"""In-order gates on Ray (SPEC §21, §22): one keeper judges them for the whole cluster.

A stateful gate (keep-unique, keep-novel, a plugin gate with ``in_order``) compares a
candidate with every candidate of lower index it kept, so its state cannot live in each
worker: two workers would each keep "the first" of a value. The run has one more actor,
the ``GateKeeper``, booted from a ``WorkerSpec`` as a worker is (its own container, so
the gates have their wired resources, e.g. keep-novel's embedding model; its meter spends
leases of the cluster's budget; it reads the response cache, never writes it). It holds
the in-order gates' generator instances and one ``GateTurns`` over the cluster's batch
keys (a batch's first row index):

* **Order.** The driver enters each block's batch keys when it submits the block (a
  message, not awaited), numbered: Ray runs an async actor's calls in no guaranteed
  order, so the keeper applies the blocks by number. A worker's ``BatchRunner`` hands the
  batch's live rows at an in-order gate to the keeper (``KeeperClient.judge``), which
  waits for the key's entry (a worker's call may arrive before the driver's message),
  then for its turn (every lower key passed that gate or left), judges, and lets the
  next one by. The other columns of every batch still run on the workers, concurrently;
  a batch waits only at the in-order gate, as locally, and gives up its worker slot
  meanwhile (``engine.cluster.batch_slots``: a worker may start a later block before an earlier
  one, whose batches then need the slots). A batch that ends (done, failed, cancelled)
  leaves (``KeeperClient.leave``), so it never holds a gate up.
* **A worker killed mid-run.** Ray restarts it and re-runs its block. The keeper judges
  each batch key once per gate, in a task of its own (a caller gone does not cancel it),
  and remembers the verdicts (and the answers its requests kept) by batch key: a
  re-run batch gets the same verdicts and is never judged against itself. A batch the
  dead worker never brought to the gate holds the lower keys' successors until its
  re-run does (or leaves). The driver settles a block's keys when its rows arrive (no
  re-run is possible after that) and the keeper forgets them.
* **Resume.** The driver reads, from the checkpoint, the rows an earlier session let
  through each in-order gate and gives them to the keeper, whose gates ``remember``
  them before their first turn, as the local engine's do.
* **Accounting.** What the keeper's requests cost comes back as a ``Receipt``, which
  the driver takes after each block (before its rows are checkpointed) and at the end;
  the answers they kept travel back with the verdicts into the batch's own (the driver
  stores them with the block's). A keeper that dies ends the run (it is not restarted:
  its state is the run's order); the rerun resumes from the checkpoint with the same
  output.

The keeper's requests are one batch at a time per in-order gate (keep-novel: one
embedding request per batch), paced and bounded as the first worker's share of each
provider's ``max_concurrency`` and ``rate_limit``: on top of the workers' shares, at most
one request in flight per in-order gate that calls a model once per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

from genwire.engine.cluster.batch_slots import held_slot
from genwire.engine.cluster.fleet import CLOSE_TIMEOUT_S
from genwire.engine.cluster.wire import RemoteError, WorkerSpec, first_line, last_line
from genwire.engine.cluster.worker import BlockWorker
from genwire.engine.gates.turns import GateTurns
from genwire.engine.records.receipt import Receipt
from genwire.engine.rows.runner import BatchRunner, Earlier
from genwire.errors import RunError
from genwire.generators.base import Generator
from genwire.generators.outcome import RowFailure
from genwire.providers.metrics import start_recording, stop_recording
from genwire.providers.request_context import BatchScope, batch_scope, column_scope, kept_elsewhere
from genwire.providers.response_cache.layout import Entry

__all__ = ["GateKeeper", "KeeperClient", "RayGates", "in_order_gates"]

Rows = tuple[list[dict[str, Any]], list[int]]


def in_order_gates(columns: list[Any]) -> list[str]:
    """The columns (wirings) whose gate keeps state across candidates, in column order."""
    return [c.name for c in columns if c.generator_cls.metadata.gate and c.generator_cls.in_order]


@dataclasses.dataclass(frozen=True)
class Failed:
    """A row the gate failed (an error, not a verdict), as it crosses the wire."""

    error: RemoteError


@dataclasses.dataclass
class Judged:
    """One batch's judgement at one gate: each row's verdict by candidate index, and what
    the gate's requests kept in the response cache (sent to every caller of the batch)."""

    values: dict[int, Any]
    answers: list[Entry]
    hits: int


@dataclasses.dataclass(frozen=True)
class Answer:
    values: list[Any]  # in the order of the indices asked about
    answers: list[Entry]
    hits: int


def encoded(value: Any) -> Any:
    return Failed(RemoteError.capture(value.error)) if isinstance(value, RowFailure) else value


def decoded(value: Any) -> Any:
    return RowFailure(value.error.rebuild()) if isinstance(value, Failed) else value


class GateKeeper(BlockWorker):
    """A Ray actor holding the run's in-order gates (a ``BlockWorker`` that runs no block:
    it boots, meters and reads the cache as one)."""

    def __init__(self, spec: WorkerSpec, gates: list[str], earlier: dict[str, Rows]) -> None:
        super().__init__(spec)
        self._gates = gates
        self._earlier = earlier
        self._turns = GateTurns(gates)
        self._entered: set[int] = set()
        self._left: set[int] = set()
        self._blocks = 0  # the next block's number: its keys are entered after every earlier block's
        self._settled = -1  # the highest key whose block's rows the driver has
        self._early: dict[int, list[int]] = {}  # blocks' keys that came before an earlier block's
        self._entry: asyncio.Event | None = None  # set (and replaced) when keys are entered
        self._judged: dict[tuple[str, int], asyncio.Task[Judged]] = {}
        self._locks = {gate: asyncio.Lock() for gate in gates}  # one call at a time per gate
        self._remembered: list[Judged] = []  # what a gate's remember() kept: sent with the next verdicts

    async def enter(self, block: int, keys: list[int]) -> None:
        """The driver submitted block number ``block``, these batches (keys in index order,
        above every earlier block's). Ray runs an async actor's calls in no guaranteed
        order: a block's keys wait here for every earlier block's."""
        self._early[block] = keys
        while self._blocks in self._early:
            for key in self._early.pop(self._blocks):
                if key not in self._left:  # a batch with no row left for the gates may leave first
                    self._turns.enter(key)
                self._entered.add(key)
            self._blocks += 1
        if self._entry is not None:
            self._entry.set()
            self._entry = None

    async def leave(self, key: int) -> None:
        if key <= self._settled:  # its block's rows are with the driver (its leave came late)
            return
        self._left.add(key)
        self._turns.leave(key)

    async def settled(self, keys: list[int]) -> Receipt:
        """The driver has these batches' rows: no re-run can ask about them again. Returns
        what the keeper paid for since its last receipt."""
        for key in keys:  # the driver settles blocks in row order
            self._settled = max(self._settled, key)
            self._left.discard(key)
            self._entered.discard(key)
            for gate in self._gates:
                self._judged.pop((gate, key), None)
        return self._receipt()

    async def judge(
        self, column: str, key: int, rows: list[dict[str, Any]], indices: list[int]
    ) -> Answer | RemoteError:
        """The verdicts on ``rows`` (candidates ``indices``, live at gate ``column`` in batch
        ``key``), in their order, once every lower batch passed the gate."""
        try:
            runner, _ = await self._ready()
            runner.earlier = self._earlier_rows
            while key not in self._entered:  # the driver's message may come after the worker's call
                if self._entry is None:
                    self._entry = asyncio.Event()
                await self._entry.wait()
            gen = next(g for g in runner.generators if g.column == column)
            task = self._judged.get((column, key))
            if task is None:  # first asked (a re-run batch gets the first run's verdicts)
                in_turn = key not in self._left
                task = asyncio.create_task(self._judge(runner, gen, key, rows, indices, in_turn=in_turn))
                self._judged[(column, key)] = task
            judged = await asyncio.shield(task)  # a caller gone does not cancel the judgement
            missing = [i for i, index in enumerate(indices) if index not in judged.values]
            if missing:  # a re-run brought rows its first run did not: judged now, against what is kept
                late = await self._call(runner, gen, [rows[i] for i in missing], [indices[i] for i in missing])
                judged.values.update(late.values)
                judged.answers += late.answers
                judged.hits += late.hits
            return Answer([judged.values[index] for index in indices], judged.answers, judged.hits)
        except Exception as exc:
            return RemoteError.capture(exc)

    def _earlier_rows(self, gate: str) -> Rows:
        return self._earlier.get(gate, ([], []))

    async def _judge(
        self,
        runner: BatchRunner,
        gen: Generator[Any],
        key: int,
        rows: list[dict[str, Any]],
        indices: list[int],
        *,
        in_turn: bool,
    ) -> Judged:
        if not in_turn:  # the batch left this gate before (a re-run): no turn to wait for
            return await self._call(runner, gen, rows, indices)
        try:
            await self._turns.turn(gen.column, key, functools.partial(self._remember, runner, gen))
            judged = await self._call(runner, gen, rows, indices)
        finally:
            self._turns.passed(gen.column, key)
        for earlier in self._remembered:
            judged.answers += earlier.answers
            judged.hits += earlier.hits
        self._remembered.clear()
        return judged

    async def _remember(self, runner: BatchRunner, gen: Generator[Any]) -> None:
        """The gate's first turn: the rows an earlier session let through it."""
        with self._scoped(runner) as scope:
            await runner.remember(gen)
            if scope is not None:
                self._remembered.append(Judged({}, scope.take_kept(), scope.hits))

    async def _call(
        self, runner: BatchRunner, gen: Generator[Any], rows: list[dict[str, Any]], indices: list[int]
    ) -> Judged:
        async with self._locks[gen.column]:
            with self._scoped(runner) as scope, column_scope(gen.column, indices):
                values = await BatchRunner.call(gen, rows, indices)
                answers, hits = (scope.take_kept(), scope.hits) if scope is not None else ([], 0)
        return Judged(dict(zip(indices, map(encoded, values), strict=True)), answers, hits)

    @contextlib.contextmanager
    def _scoped(self, runner: BatchRunner) -> Iterator[BatchScope | None]:
        """The keeper's requests: recorded for its receipt, reading the response cache."""
        recording = start_recording(self._book.recorder)
        try:
            with batch_scope(self._cache, runner.seed) as scope:
                yield scope
        finally:
            stop_recording(recording)


@dataclasses.dataclass(frozen=True)
class KeeperClient:
    """A worker's side (``BatchRunner(keeper=...)``): its batches' in-order gates are
    judged by the run's keeper."""

    actor: Any  # the keeper's Ray actor handle

    async def judge(self, column: str, key: int, rows: list[dict[str, Any]], indices: list[int]) -> list[Any]:
        slot = held_slot.get()
        if slot is not None:  # waiting for its turn, the batch holds none of the worker's slots
            slot.give()
        try:
            answer = await self.actor.judge.remote(column, key, rows, indices)
        except Exception as exc:  # a Ray error: the keeper is gone (a gate's own errors come back as values)
            raise keeper_gone(exc) from exc
        finally:
            if slot is not None:
                await slot.take()
        if isinstance(answer, RemoteError):
            raise answer.rebuild()
        kept_elsewhere(answer.answers, answer.hits)  # the driver stores them with the batch's own
        return [decoded(value) for value in answer.values]

    def leave(self, key: int) -> None:
        with contextlib.suppress(Exception):  # not awaited: a keeper that is gone has nothing to hold up
            self.actor.leave.remote(key)


def keeper_gone(exc: BaseException) -> RunError:
    if getattr(exc, "actor_init_failed", False):
        return RunError(
            f"the Ray actor judging the in-order gates could not start ({last_line(exc)}); the pipeline's "
            "generator classes and their modules must be importable on every Ray node (install the plugins there too)"
        )
    return RunError(
        f"the Ray actor judging the in-order gates died ({first_line(exc)}); the rows made so far are in the "
        "checkpoint: rerun the same command to go on"
    )


class RayGates:
    """The driver's side: the keeper's life, the batch keys entered in order, its receipts."""

    def __init__(self, gates: list[str], earlier: Earlier | None) -> None:
        self.gates = gates
        self._earlier = earlier
        self._actor: Any = None
        self._blocks = 0  # blocks submitted

    def start(self, ray: Any, spec: WorkerSpec) -> KeeperClient:
        """The keeper, booted from ``spec`` (not restarted if it dies: its state is the run's order)."""
        earlier = {gate: self._earlier(gate) for gate in self.gates} if self._earlier is not None else {}
        actor_cls = ray.remote(GateKeeper).options(num_cpus=0, max_restarts=0, max_task_retries=0)
        self._actor = actor_cls.remote(spec, self.gates, earlier)
        return KeeperClient(self._actor)

    def enter(self, keys: list[int]) -> None:
        """A block's batch keys, before the block is submitted (numbered: in index order)."""
        self._actor.enter.remote(self._blocks, keys)
        self._blocks += 1

    async def settled(self, keys: list[int]) -> Receipt:
        try:
            receipt: Receipt = await self._actor.settled.remote(keys)
        except Exception as exc:
            raise keeper_gone(exc) from exc
        return receipt

    async def close(self, ray: Any, feed: Callable[[Receipt], None]) -> None:
        """Close the keeper's container (bounded wait), feed what it paid for since its
        last receipt, and kill it."""
        actor, self._actor = self._actor, None
        if actor is None:
            return
        try:
            with contextlib.suppress(Exception):
                receipt = await asyncio.wait_for(actor.close.remote(), CLOSE_TIMEOUT_S)
                if isinstance(receipt, Receipt):
                    feed(receipt)
        finally:
            with contextlib.suppress(Exception):
                ray.kill(actor)
