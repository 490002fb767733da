"""The run's ledger (SPEC §16): ``<output>.checkpoint/ledger.jsonl``, one line per paid
answer, written as the answer arrives, with the rows and column it belongs to::

    {"m": alias, "in": 812, "out": 95, "usd": 0.0001788, "rows": [17], "col": "question", "b": false}

Each line is one ``write`` on a file opened for appending, so a kill -9 loses at most the
answer being written (the OS keeps what was written; a torn last line is cut on open). A
resumed run reads the totals back and adds its own: a request is counted once, when it
was paid — a row generated again after a kill is a second request, and paid twice.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from genwire.engine.records.checkpoint_files import cut_torn_line, whole_lines
from genwire.providers.budget.figures import Paid
from genwire.providers.request_context import current_column, current_rows

__all__ = ["LEDGER_NAME", "LedgerTotal", "RunLedger", "read_totals"]

LEDGER_NAME = "ledger.jsonl"
# One encoder for every line (one per paid answer): json.dumps with options builds a new one per call.
_LINE_ENCODER = json.JSONEncoder(separators=(",", ":"))
log = logging.getLogger("genwire.ledger")


@dataclass
class LedgerTotal:
    """One alias's paid answers over every session of the run."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    unpriced: int = 0  # answers paid without a known price: their cost is unknown

    def add(self, paid: Paid) -> None:
        self.requests += 1
        self.input_tokens += paid.input_tokens
        self.output_tokens += paid.output_tokens
        if paid.usd is None:
            self.unpriced += 1
        else:
            self.usd += paid.usd


class RunLedger:
    """Open over a checkpoint directory: reads what earlier sessions paid, then appends."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEDGER_NAME
        self.totals: dict[str, LedgerTotal] = {}
        self._read()
        self.earlier_usd = sum(t.usd for t in self.totals.values())
        self.earlier_tokens = sum(t.input_tokens + t.output_tokens for t in self.totals.values())
        self._fd: int | None = None

    @property
    def entries(self) -> int:
        return sum(t.requests for t in self.totals.values())

    def _read(self) -> None:
        if not self.path.exists():
            return
        cut_torn_line(self.path)  # killed mid-line: that answer is not counted (nor was it used)
        self.totals = read_totals(self.path)

    def record(self, paid: Paid, rows: Sequence[int] | None = None, column: str | None = None) -> None:
        """One paid answer: into the totals and, in one write, onto the disk. ``rows`` and
        ``column``: those it was paid for, when not the running request's (a Ray worker's)."""
        self.totals.setdefault(paid.alias, LedgerTotal()).add(paid)
        line = _line(
            paid,
            current_rows() if rows is None else rows,
            current_column() if rows is None else column,
        )
        data = line.encode()
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            os.write(self._fd, data)
        except OSError as exc:  # the totals stay right in this session; say the file is behind
            log.warning(
                "cannot write the ledger %s (%s); a resumed run will not know this answer's cost", self.path, exc
            )

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _line(paid: Paid, rows: Sequence[int], column: str | None) -> str:
    """The ledger line of ``paid``: what ``_LINE_ENCODER`` makes of its record, built from
    strings escaped once per alias and column (one line per paid answer, on the hot path)."""
    usd = paid.usd
    plain = (usd is None or (type(usd) is float and math.isfinite(usd))) and (
        type(paid.input_tokens) is int and type(paid.output_tokens) is int and type(paid.alias) is str
    )
    if not plain or any(type(r) is not int for r in rows):
        record = {
            "m": paid.alias,
            "in": paid.input_tokens,
            "out": paid.output_tokens,
            "usd": usd,
            "rows": list(rows),
            "col": column,
            "b": paid.batched,
        }
        return _LINE_ENCODER.encode(record) + "\n"
    cost = "null" if usd is None else repr(usd)
    rows_text = ",".join(map(str, rows))
    batched = "true" if paid.batched else "false"
    return (
        f'{{"m":{_escaped(paid.alias)},"in":{paid.input_tokens},"out":{paid.output_tokens},"usd":{cost},'
        f'"rows":[{rows_text}],"col":{_escaped(column)},"b":{batched}}}\n'
    )


@functools.lru_cache(maxsize=256)
def _escaped(text: str | None) -> str:
    return _LINE_ENCODER.encode(text)


def read_totals(path: Path) -> dict[str, LedgerTotal]:
    """Each alias's paid answers in the ledger at ``path`` (its whole lines: a torn last
    line is not counted), streamed; a line that cannot be read is a warning and is skipped.
    Read only: the report page reads an unfinished run's ledger this way."""
    if not path.exists():
        return {}
    totals: dict[str, LedgerTotal] = {}
    for number, line in enumerate(whole_lines(path), 1):
        try:
            record = json.loads(line)
            paid = Paid(
                str(record["m"]),
                _count(record["in"]),
                _count(record["out"]),
                None if record.get("usd") is None else float(record["usd"]),
                bool(record.get("b", False)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ledger %s line %d cannot be read (%s); that answer's cost is not counted", path, number, exc)
            continue
        totals.setdefault(paid.alias, LedgerTotal()).add(paid)
    return totals


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"a token count that is not a whole number: {value!r}")
    return value
