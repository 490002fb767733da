"""A gated run's funnel for the report page (SPEC §21): candidates → each gate → kept,
the rejects of each gate with example reasons, and what the rejected candidates cost.
Read from the checkpoint folder (its rejected files and ledger); bounded whatever the
number of candidates (a few examples per gate, long cells cut)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genwire.engine.gates.costs import paid_by_column
from genwire.engine.records.checkpoint_files import DoneRows, whole_lines

EXAMPLES_PER_GATE = 3
REASON_CHARS = 300
ROW_CHARS = 300


@dataclass
class GateRejects:
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)  # candidate, reason, row (text)


@dataclass
class FunnelData:
    candidates: int
    kept: int  # in the output, or kept so far
    surplus: int
    steps: list[tuple[str, int]]  # (gate, candidates that passed it), in column order
    rejects: dict[str, GateRejects]
    rejected_usd: float | None  # what the rejected candidates' answers cost (None: unknown price)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_funnel(
    directory: Path, columns: list[str], kept: int, failed: int, summary: dict[str, Any] | None
) -> FunnelData | None:
    """None when the run has no rejected candidate and its summary no funnel (no gate)."""
    rejects: dict[str, GateRejects] = {}
    indices = DoneRows()  # a bit a candidate: a list of 100,000 rejected ones held ~4 MB
    for path in sorted(directory.glob("rejected-*.jsonl")):
        for line in whole_lines(path):  # streamed: one line in memory at a time
            try:
                record = json.loads(line)
                gate, index = str(record["gate"]), int(record["candidate"])
            except (ValueError, KeyError, TypeError):
                continue
            if index < 0:
                continue
            group = rejects.setdefault(gate, GateRejects())
            group.count += 1
            indices.add(index)
            if len(group.examples) < EXAMPLES_PER_GATE:
                row = record.get("row") if isinstance(record.get("row"), dict) else {}
                group.examples.append(
                    {
                        "candidate": index,
                        "reason": _cut(str(record.get("reason", "")), REASON_CHARS),
                        "row": _cut(json.dumps(row, ensure_ascii=False, default=str), ROW_CHARS),
                    }
                )
    gated = summary is not None and "candidates" in summary
    if not rejects and not gated:
        return None
    surplus = int(summary.get("surplus", 0)) if gated and summary is not None else 0
    order = [c for c in columns if c in rejects] + sorted(g for g in rejects if g not in columns)
    all_kept = kept + surplus
    steps = [(gate, all_kept + sum(rejects[g].count for g in order[i + 1 :])) for i, gate in enumerate(order)]
    rejected = sum(g.count for g in rejects.values())
    return FunnelData(
        candidates=all_kept + rejected + failed,
        kept=kept,
        surplus=surplus,
        steps=steps,
        rejects={gate: rejects[gate] for gate in order},
        rejected_usd=paid_by_column(directory, indices).rejected_usd,
    )
