"""What a gated run's columns and rejected candidates cost (SPEC §21), read from the
ledger (one line per paid answer, with its column and rows) and the checkpoint's
rejected files: the estimate's saving of early gates and the report's funnel use it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from genwire.engine.records.checkpoint_files import DoneRows, whole_lines
from genwire.engine.records.ledger import LEDGER_NAME


@dataclass
class PaidByColumn:
    """USD paid per column (None: some answer had no price) and for rejected candidates."""

    usd: dict[str, float | None] = field(default_factory=dict)
    rejected_usd: float | None = 0.0  # the answers paid for candidates a gate rejected
    total_usd: float | None = 0.0
    tokens: dict[str, int] = field(default_factory=dict)  # input + output tokens paid per column


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def paid_by_column(directory: Path, rejected: DoneRows | Iterable[int] = ()) -> PaidByColumn:
    """Read the ledger of the checkpoint at ``directory`` (a missing or damaged line is
    skipped: the ledger's own reader warns of it)."""
    out = PaidByColumn()
    # A bit a candidate, not a set of ints: 100,000 rejected of a million were ~10 MB as a set
    rejected_set = rejected if isinstance(rejected, DoneRows) else DoneRows.of(rejected)
    ledger = directory / LEDGER_NAME
    if not ledger.is_file():
        return out
    for line in whole_lines(ledger):  # streamed: a 1,000,000-candidate run's ledger is ~100 MB
        try:
            record = json.loads(line)
            usd = None if record.get("usd") is None else float(record["usd"])
            column = record.get("col")
            rows = [int(r) for r in record.get("rows") or []]
            tokens = int(record.get("in") or 0) + int(record.get("out") or 0)
        except (ValueError, TypeError, AttributeError):
            continue
        if not isinstance(column, str):
            continue  # a probe: no row's
        out.usd[column] = _plus(out.usd.get(column, 0.0), usd)
        out.tokens[column] = out.tokens.get(column, 0) + tokens
        out.total_usd = _plus(out.total_usd, usd)
        if rows and rejected_set:
            share = sum(r in rejected_set for r in rows) / len(rows)
            if share:
                out.rejected_usd = _plus(out.rejected_usd, None if usd is None else usd * share)
    return out


def rejected_candidates(directory: Path) -> DoneRows:
    """The candidates the checkpoint's rejected files hold (a bit each)."""
    out = DoneRows()
    for path in sorted(directory.glob("rejected-*.jsonl")):
        for line in whole_lines(path):
            try:
                candidate = int(json.loads(line)["candidate"])
            except (ValueError, KeyError, TypeError):
                continue
            if candidate >= 0:
                out.add(candidate)
    return out
