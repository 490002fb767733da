"""A gated run's funnel (SPEC §21): candidates → each gate → kept, the figures the summary,
``--json`` and the estimate read, and where the rejected candidates are written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def rejected_path(output: Path) -> Path:
    """``<output>.rejected.jsonl``: every candidate a gate rejected, and the surplus."""
    return output.with_name(output.name + ".rejected.jsonl")


@dataclass
class Funnel:
    """Candidates → each gate → kept: the figures of a gated run (this and earlier sessions)."""

    wanted: int
    kept: int = 0
    failed: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    gates: list[str] = field(default_factory=list)  # in column order
    session: int = 0  # candidates decided in this session (the estimate's sample)

    def passed(self) -> list[tuple[str, int]]:
        """(gate, candidates that passed it), in column order: a candidate passed a gate
        when it was kept or rejected by a later one."""
        order = self.gates or sorted(self.rejected)
        out = []
        for i, gate in enumerate(order):
            out.append((gate, self.kept + sum(self.rejected.get(g, 0) for g in order[i + 1 :])))
        return out

    def text(self, surplus: int = 0) -> str:
        """``195 candidates → even 90 → good 32 → 30 kept (+2 surplus)``."""
        steps = [f"{self.decided:,} candidates", *(f"{gate} {n:,}" for gate, n in self.passed())]
        kept = f"{self.kept - surplus:,} kept" + (f" (+{surplus:,} surplus)" if surplus else "")
        return " → ".join([*steps, kept])

    @property
    def decided(self) -> int:
        return self.kept + self.failed + sum(self.rejected.values())

    @property
    def rate(self) -> float | None:
        return self.kept / self.decided if self.decided else None


def funnel_summary(funnel: Funnel, surplus: int) -> dict[str, Any]:
    """What ``genwire run --json`` adds for a gated run (SPEC §21)."""
    return {
        "candidates": funnel.decided,
        "rejected": dict(funnel.rejected),
        "surplus": surplus,
        "acceptance": funnel.rate,
    }


def funnel_figures(funnel: Funnel) -> dict[str, Any]:
    """kept, wanted, candidates, rate, rejected per gate (the exit-3 summary's)."""
    return {
        "kept": funnel.kept,
        "wanted": funnel.wanted,
        "candidates": funnel.decided,
        "rate": funnel.rate,
        "rejected": dict(funnel.rejected),
    }


def funnel_text(funnel: Funnel) -> str:
    rate = f"{funnel.rate:.1%}" if funnel.rate is not None else "unknown"
    return f"{funnel.kept:,} of {funnel.wanted:,} rows kept from {funnel.decided:,} candidates (acceptance {rate})"
