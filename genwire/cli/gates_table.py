"""The estimate's table of a gated pipeline (SPEC §21): acceptance per gate, candidates
needed, cost and duration per kept row and for N, the saving of early gates."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.table import Table

    from genwire.engine.gates.estimate import GatedEstimate


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _count(value: int | None) -> str:
    return "unknown (nothing kept yet)" if value is None else f"{value:,}"


def weak_warning(found: GatedEstimate) -> str:
    return (
        f"warning: only {found.kept} of {found.candidates} candidates were kept: the acceptance rate, and what "
        f"{found.wanted:,} rows will take, are a weak projection; estimate with a larger -k for a firmer one"
    )


def gates_table(
    found: GatedEstimate, *, usd: Callable[[float | None], str], duration: Callable[[float], str]
) -> tuple[Table, str]:
    """The acceptance per gate, and the lines of what it projects (the overall rate first);
    ``usd`` and ``duration`` format as the estimate's own table does."""
    from rich.markup import escape
    from rich.table import Table

    a = found.acceptance
    table = Table(title="Gates", title_justify="left")
    for name in ("gate", "passed", "saved in the sample"):
        table.add_column(name, justify="left" if name == "gate" else "right")
    for gate, rate in a.by_gate.items():
        table.add_row(escape(gate), _pct(rate), usd(found.saved_by_gate_usd.get(gate)))
    need = found.candidates_needed
    per_row = usd(found.cost_per_kept_row_usd)
    lines = [
        f"acceptance: {found.kept:,} of {found.candidates:,} candidates kept ({_pct(a.rate)}, "
        f"95 % interval {_pct(a.low)} – {_pct(a.high)})",
        f"candidates for {found.wanted:,} kept rows: {_count(need['expected'])} expected, "
        f"{_count(need['pessimistic'])} at the interval's low end",
        f"cost: {per_row} per kept row; {usd(found.cost_usd)} for {found.wanted:,} rows "
        f"({usd(found.cost_pessimistic_usd)} at the low end)",
        "duration: "
        + (f"{duration(found.duration_per_kept_row_s)} per kept row; " if found.duration_per_kept_row_s else "")
        + f"≈ {duration(found.duration_s)} for the candidates still to do",
        f"early gates save ≈ {usd(found.saved_by_gates_usd)} over the run "
        "(the columns after a gate are not generated for the candidates it rejects)",
    ]
    return table, "\n".join(lines)
