"""The estimate of a gated pipeline (SPEC §21): from the K candidates measured, the
acceptance rate per gate and overall with a 95 % Wilson interval, the candidates needed
for N kept rows (expected, and at the interval's low end), cost and duration per kept row
and for N, and what the early gates save (the columns after a gate are not paid for the
candidates it rejects)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from genwire.engine.gates.costs import paid_by_column, rejected_candidates
from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.funnel import Funnel

if TYPE_CHECKING:
    from genwire.engine.records.result import RunResult


class Projection(Protocol):
    """What this reads of ``engine.money.estimate.Estimate`` (which imports this module)."""

    @property
    def cost_usd(self) -> float | None: ...

    @property
    def duration_s(self) -> float: ...


Z95 = 1.959963984540054
WEAK_BELOW = 5  # fewer kept candidates than this: the projection is weak


def wilson(kept: int, tried: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``kept / tried`` (95 % by default)."""
    if tried <= 0:
        return 0.0, 1.0
    p = kept / tried
    denominator = 1 + z * z / tried
    center = (p + z * z / (2 * tried)) / denominator
    half = z * math.sqrt(p * (1 - p) / tried + z * z / (4 * tried * tried)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


@dataclass
class Acceptance:
    rate: float | None
    low: float
    high: float
    by_gate: dict[str, float | None]


def acceptance_of(funnel: Funnel) -> Acceptance:
    judged = funnel.kept + sum(funnel.rejected.values())  # failed candidates were not judged
    low, high = wilson(funnel.kept, judged)
    by_gate: dict[str, float | None] = {}
    reached = judged
    for gate, passed in funnel.passed():
        by_gate[gate] = passed / reached if reached else None
        reached = passed
    return Acceptance(funnel.kept / judged if judged else None, low, high, by_gate)


def needed(wanted: int, rate: float | None) -> int | None:
    """Candidates needed for ``wanted`` kept rows at ``rate`` (None: not known)."""
    if not rate:
        return None
    return math.ceil(wanted / rate)


def candidate_counts(sample: RunResult) -> tuple[int, int, int, int]:
    """What the row projection of a gated sample counts in candidates: (sample candidates
    not failed, sample failed, candidates for N at the measured rate, candidates done)."""
    funnel = sample.funnel
    assert funnel is not None
    expected = needed(funnel.wanted, acceptance_of(funnel).rate)
    total = max(expected if expected is not None else funnel.decided, funnel.decided)
    session_failed = min(funnel.failed, funnel.session)
    return funnel.session - session_failed, session_failed, total, funnel.decided


@dataclass
class GatedEstimate:
    wanted: int
    candidates: int  # measured: every session's
    kept: int
    weak: bool  # fewer than WEAK_BELOW kept
    acceptance: Acceptance
    candidates_needed: dict[str, int | None]  # expected, pessimistic (for N, from the first)
    cost_per_kept_row_usd: float | None
    cost_usd: float | None  # for N: paid so far plus the candidates left, expected
    cost_pessimistic_usd: float | None
    duration_per_kept_row_s: float | None
    duration_s: float  # the candidates left, expected
    saved_by_gates_usd: float | None  # for N, projected
    saved_by_gate_usd: dict[str, float | None]  # the sample's, per gate

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["acceptance"] = asdict(self.acceptance)
        return out


def gated_estimate(sample: RunResult, base: Projection, columns: list[str]) -> GatedEstimate:
    """``base``: the estimate projected in candidates (``candidate_counts``)."""
    funnel = sample.funnel
    assert funnel is not None
    found = acceptance_of(funnel)
    expected = needed(funnel.wanted, found.rate)
    pessimistic = needed(funnel.wanted, found.low)
    directory = checkpoint_dir(Path(sample.output))
    paid = paid_by_column(directory, rejected_candidates(directory))
    left = max(0, (expected or funnel.decided) - funnel.decided)
    cost = None if paid.total_usd is None or base.cost_usd is None else paid.total_usd + base.cost_usd
    # What one more candidate costs: the projection's, or (nothing left) what one cost so far.
    per_candidate_left = (
        base.cost_usd / left
        if base.cost_usd is not None and left
        else (paid.total_usd / funnel.decided if paid.total_usd is not None and funnel.decided else None)
    )
    pessimistic_cost = (
        paid.total_usd + per_candidate_left * max(0, pessimistic - funnel.decided)
        if paid.total_usd is not None and per_candidate_left is not None and pessimistic is not None
        else None
    )
    still = max(1, funnel.wanted - min(funnel.kept, funnel.wanted))
    per_gate = saved_by_gate(funnel, columns, paid.usd)
    saved = None if None in per_gate.values() else sum(v for v in per_gate.values() if v is not None)
    scale = (expected / funnel.decided) if expected and funnel.decided else None
    return GatedEstimate(
        wanted=funnel.wanted,
        candidates=funnel.decided,
        kept=funnel.kept,
        weak=funnel.kept < WEAK_BELOW,
        acceptance=found,
        candidates_needed={"expected": expected, "pessimistic": pessimistic},
        cost_per_kept_row_usd=cost / funnel.wanted if cost is not None else None,
        cost_usd=cost,
        cost_pessimistic_usd=pessimistic_cost,
        duration_per_kept_row_s=base.duration_s / still if left else None,
        duration_s=base.duration_s,
        saved_by_gates_usd=saved * scale if saved is not None and scale is not None else None,
        saved_by_gate_usd=per_gate,
    )


def saved_by_gate(funnel: Funnel, columns: list[str], usd: dict[str, float | None]) -> dict[str, float | None]:
    """Per gate, what the columns after it would have cost for the candidates it rejected
    (each such column's paid cost per candidate that reached it)."""
    position = {name: i for i, name in enumerate(columns)}
    gates = [g for g in funnel.gates if g in position]
    out: dict[str, float | None] = {}
    for gate in gates:
        rejected = funnel.rejected.get(gate, 0)
        total: float | None = 0.0
        for column, spent in usd.items():
            if position.get(column, -1) <= position[gate]:
                continue
            # Candidates that reached ``column``: kept, or rejected by a gate placed after it.
            reached = funnel.kept + sum(n for g, n in funnel.rejected.items() if position.get(g, -1) > position[column])
            if spent is None or total is None:
                total = None
            elif reached:
                total += spent / reached * rejected
        out[gate] = total
    return out
