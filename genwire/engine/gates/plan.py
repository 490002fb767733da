"""Quality gates' run (SPEC §21): which candidates to generate next, when the N kept rows
are there, what goes to the rejected file.

``CandidatePlan`` holds the one decision an engine needs, independent of how batches run
(the local engine drives it; a driver on a cluster can drive the same object): ``take``
says which candidates to start now, ``record`` is told each finished batch, in index
order. Candidates are scheduled from the acceptance rate measured so far (this session's
and the checkpoint's), so few are generated past the need; the output holds exactly the
``wanted`` kept candidates of lowest index.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genwire.container.core import WiredPipeline
from genwire.engine.records.batch_result import BatchResult
from genwire.engine.records.checkpoint import Checkpoint
from genwire.engine.records.encoding import encode_failure
from genwire.engine.records.funnel import Funnel, funnel_figures, funnel_text
from genwire.engine.records.writers import AtomicFile
from genwire.errors import BudgetStopped, CandidatesExhausted, RunError

CANDIDATES_PER_ROW = 10  # pipeline.max_candidates' default: 10 x num_records
# How far past what has been measured one step may schedule: at most this many times the
# candidates decided so far (plus a batch), so a wrong early rate costs little.
GROWTH = 4.0
MARGIN = 1.1  # scheduled a little above the expected need: a short fall costs a round trip


def gate_columns(columns: Sequence[Any]) -> list[str]:
    """The names of the gate columns among a pipeline's column wirings."""
    return [c.name for c in columns if c.generator_cls.metadata.gate]


def max_candidates(configured: int | None, wanted: int) -> int:
    return configured if configured is not None else CANDIDATES_PER_ROW * wanted


class CandidatePlan:
    """Which candidates a gated run starts next, and when it has kept enough.

    ``take(batch_size)`` returns candidate indices to start now, ``[]`` when those in
    flight are expected to be enough (ask again when a batch finishes), or None when no
    more will ever be started: ``wanted`` are kept, or the cap is reached. ``record`` is
    told each finished batch, in index order."""

    def __init__(
        self,
        wanted: int,
        cap: int,
        pending: Iterator[int],
        funnel: Funnel,
        *,
        every_value: Callable[[], str] | None = None,
    ) -> None:
        """``every_value()``, asked at the cap: what to say instead of a higher cap ("" for
        nothing), when a uniqueness gate may have seen every value its column can take."""
        self.every_value = every_value
        self.wanted = wanted
        self.cap = cap
        self.funnel = funnel
        self._pending = pending  # candidate indices below the cap still to generate, in order
        self._drained = False
        self.scheduled = 0  # this session
        self.recorded = 0  # this session
        self.retried: list[int] = []  # the failed candidates generated again (retry)
        # Started and not yet decided: once every batch is back, the candidates dropped unsent
        # (the failure-rate stop refused their requests), which ``requeue`` starts again.
        self._open: set[int] = set()
        self._decided_before = funnel.decided  # by earlier sessions

    @property
    def in_flight(self) -> int:
        return self.scheduled - self.recorded

    @property
    def met(self) -> bool:
        return self.funnel.kept >= self.wanted

    @property
    def capped(self) -> bool:
        """No candidate below the cap is left, and the target is not met."""
        return self._drained and not self.met

    def target_in_flight(self, batch_size: int) -> int:
        """Candidates to have in flight for the rows still needed, at the measured rate."""
        need = self.wanted - self.funnel.kept
        decided = self.funnel.decided
        if decided == 0:
            return need  # nothing measured yet: one candidate per row wanted
        rate = (self.funnel.kept + 0.5) / (decided + 1)  # never 0: no candidate kept yet is not "none ever"
        wanted_now = math.ceil(need / rate * MARGIN)
        return min(wanted_now, int(GROWTH * decided) + batch_size)

    def take(self, batch_size: int) -> list[int] | None:
        if self.met or self._drained:
            return None
        room = self.target_in_flight(batch_size) - self.in_flight
        if room <= 0:
            return []
        batch = list(itertools.islice(self._pending, min(batch_size, room)))
        if len(batch) < min(batch_size, room):
            self._drained = True
        if not batch:
            return None
        self.scheduled += len(batch)
        self._open.update(batch)
        return batch

    def record(self, result: BatchResult, *, kept: int | None = None) -> None:
        """A finished batch (``kept``: its rows the sink could write, when not all)."""
        size = result.size or len(result.indices) + len(result.failures) + len(result.rejected)
        self.recorded += size
        self._open.difference_update(result.indices)
        self._open.difference_update(int(f["row"]) for f in result.failures)
        self._open.difference_update(int(r["candidate"]) for r in result.rejected)
        self.funnel.session += size
        self.funnel.kept += len(result.rows) if kept is None else kept
        self.funnel.failed += len(result.failures) + (len(result.rows) - kept if kept is not None else 0)
        for record in result.rejected:
            gate = record["gate"]
            self.funnel.rejected[gate] = self.funnel.rejected.get(gate, 0) + 1

    def retry(self, pending: Iterable[int]) -> bool:
        """At the cap, with ``pending`` (the checkpoint's: this session's failed candidates
        there, below the cap): they become the candidates left, once, as a resume would take
        them. False when there is nothing to retry (the target is met, or already retried).
        Read only at the cap: below it they are every candidate not tried yet (3 M ints,
        ~100 MB, at the end of a 1,000,000-row run with its default cap)."""
        if not self.capped or self.retried:
            return False
        failed = list(pending)
        if not failed:
            return False
        self.retried = failed
        self._pending = iter(failed)
        self._drained = False
        self.funnel.failed -= len(failed)  # undecided again
        self.funnel.session -= len(failed)
        return True

    def requeue(self) -> list[int]:
        """Every batch is back and the failure-rate stop was not confirmed by the rows
        written: the candidates it dropped (started, neither kept, failed nor rejected) are
        the next ones taken, before those never started. Returns them."""
        dropped = sorted(self._open)
        self._open.clear()
        if dropped:
            self.scheduled -= len(dropped)
            self.recorded -= len(dropped)
            self.funnel.session -= len(dropped)
            self._pending = itertools.chain(dropped, self._pending)
            self._drained = False
        return dropped

    def feed(self, batch_size: int) -> Iterator[list[int]]:
        """``take`` as an iterator for ``LocalBatches``: a list to start, ``[]`` for none
        now, the end for none ever."""
        while (batch := self.take(batch_size)) is not None:
            yield batch

    def stopped(self, checkpoint: Path) -> CandidatesExhausted:
        """The cap is reached before ``wanted`` rows were kept: exit 3, saying how to go on."""
        go_on = (self.every_value() if self.every_value is not None else "") or (
            f"to go on, raise pipeline.max_candidates (to about {self.suggested_cap():,}) and rerun the same command"
        )
        error = CandidatesExhausted(
            f"stopped at pipeline.max_candidates ({self.cap:,}): {funnel_text(self.funnel)}. The candidates are "
            f"kept in {checkpoint}; {go_on}",
            checkpoint=checkpoint,
            kept=self.funnel.kept,
            spent_usd=None,
            cap_usd=None,
        )
        error.funnel = {**funnel_figures(self.funnel), "max_candidates": self.cap}
        return error

    def at_budget(self, stop: BudgetStopped) -> BudgetStopped:
        """``--max-cost`` stopped a gated run: the same exit 3, with the funnel's figures."""
        stop.funnel = {**funnel_figures(self.funnel), "max_candidates": self.cap}
        unfinished = self.scheduled - (self.funnel.decided - self._decided_before)  # begun, neither kept nor rejected
        begun = f", {unfinished:,} more begun and not finished" if unfinished > 0 else ""
        stop.args = (f"{stop}; {funnel_text(self.funnel)}{begun}",)
        return stop

    def suggested_cap(self) -> int:
        """A cap that should reach the target at the measured rate, with room to spare."""
        rate = (self.funnel.kept + 0.5) / (self.funnel.decided + 1)
        return self.funnel.decided + math.ceil((self.wanted - self.funnel.kept) / rate * 1.5)


@dataclass(frozen=True)
class GatedRun:
    """A run with at least one gate: its gate columns, its wanted rows and its cap."""

    gates: list[str]
    columns: list[str]
    wanted: int
    cap: int

    # keep-unique gates over a column of few known values: gate -> (column, how many)
    unique_over: dict[str, tuple[str, int]] = field(default_factory=dict)

    def plan(self, checkpoint: Checkpoint, pending: Iterator[int]) -> CandidatePlan:
        funnel = funnel_of(checkpoint, self.wanted)
        funnel.gates = list(self.gates)
        # read at the cap only: the checkpoint then holds every value seen
        every_value = (lambda: every_value_seen(checkpoint, self.unique_over)) if self.unique_over else None
        return CandidatePlan(self.wanted, self.cap, pending, funnel, every_value=every_value)

    def earlier(self, checkpoint: Checkpoint) -> Any:
        """What in-order gates remember (``BatchRunner(earlier=...)``), read when asked:
        a session that retries its failed candidates asks its gates afresh."""

        def passed(gate: str) -> tuple[list[dict[str, Any]], list[int]]:
            if not checkpoint.kept and not len(checkpoint.rejections):
                return [], []
            return earlier_passed(checkpoint, self.columns, gate)

        return passed


def gated_run(container: WiredPipeline, wanted: int, *, batch: bool) -> GatedRun | None:
    """The pipeline's gates, or None when it has none (``num_records`` counts rows then)."""
    gates = gate_columns(container.columns)
    if not gates:
        return None
    if batch:
        raise RunError(
            f"gate columns ({', '.join(gates)}) decide which candidates come next from the ones done, "
            "which batch mode's rounds do not allow yet; drop --batch for this pipeline"
        )
    cap = max_candidates(container.config.pipeline.max_candidates, wanted)
    return GatedRun(gates, [c.name for c in container.columns], wanted, cap, unique_over(container.columns))


def unique_over(columns: Sequence[Any]) -> dict[str, tuple[str, int]]:
    """keep-unique gates over a column whose values are few and known (a sampler's):
    gate -> (that column, how many values it can take)."""
    from genwire.generators.builtin.keep_unique import KeepUnique, values_it_can_take

    by_name = {c.name: c for c in columns}
    found = {}
    for gate in columns:
        source = by_name.get(getattr(gate.params, "column", "")) if gate.generator_cls is KeepUnique else None
        count = values_it_can_take(source.params) if source is not None else None
        if source is not None and count is not None:
            found[gate.name] = (source.name, count)
    return found


def every_value_seen(checkpoint: Checkpoint, gates: dict[str, tuple[str, int]]) -> str:
    """What to say when a keep-unique gate has seen every value its column can take (a
    higher cap cannot help), or "": the values of the candidates kept, rejected or
    failed in this session."""
    import json

    for gate, (column, count) in gates.items():
        rows = itertools.chain(
            (row for _, row in checkpoint.rows()),
            (r["row"] for r in checkpoint.rejected()),
            (f["data"] for f in checkpoint.failures()),
        )
        seen = {json.dumps(row[column], sort_keys=True, default=str) for row in rows if column in row}
        if len(seen) >= count:
            failed = " (candidates that failed hold some of them: fix the cause and rerun the same command)"
            return (
                f"gate {gate!r} (keep-unique) has seen every value column {column!r} can take ({count:,}), "
                f"so a higher cap cannot help; give {column!r} more values or ask for fewer rows"
                + (failed if checkpoint.failed_before() or any(True for _ in checkpoint.failures()) else "")
            )
    return ""


def funnel_of(checkpoint: Checkpoint, wanted: int) -> Funnel:
    """What the checkpoint already holds (a resumed run measures from there)."""
    return Funnel(wanted, kept=checkpoint.kept, rejected=dict(checkpoint.rejections.by_gate))


def earlier_passed(checkpoint: Checkpoint, columns: Sequence[str], gate: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows an earlier session let through ``gate``, in index order: the kept ones and
    those a later gate rejected (their cells up to that gate)."""
    position = {name: i for i, name in enumerate(columns)}
    after = position[gate]
    kept = ((index, row) for index, row in checkpoint.rows())
    later = ((int(r["candidate"]), r["row"]) for r in checkpoint.rejected() if position.get(r["gate"], -1) > after)
    rows: list[dict[str, Any]] = []
    indices: list[int] = []
    for index, row in sorted(itertools.chain(kept, later), key=lambda item: item[0]):
        rows.append(row)
        indices.append(index)
    return rows, indices


def write_rejected(checkpoint: Checkpoint, wanted: int, target: Path) -> int:
    """``<output>.rejected.jsonl``: the rejected candidates and the surplus (kept candidates
    past the ``wanted`` of lowest index: gate null, reason surplus), in candidate order,
    written atomically. Returns the number of surplus candidates."""
    surplus = (
        {"candidate": index, "gate": None, "reason": "surplus", "row": row}
        for index, row in itertools.islice(checkpoint.rows(), wanted, None)
    )
    count = 0
    out = AtomicFile(target, binary=True)
    try:
        for record in _merge(checkpoint.rejected(), surplus):
            if record["gate"] is None:
                count += 1
            out.handle.write(encode_failure(record))
    except BaseException:
        out.abort()
        raise
    out.commit()
    return count


def _merge(*streams: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    import heapq

    return heapq.merge(*streams, key=lambda record: int(record["candidate"]))
