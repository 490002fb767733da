"""The checkpoint's session files, read back: which files belong in ``<output>.checkpoint/``
(checkpoint.py has the layout), which rows and rejected candidates they hold, and the
repair of what a kill or a bad disk left (a torn last line cut off; a line that cannot be
used named in one warning and cut out, so its row is generated again)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

META_FILE = "meta.json"
LOCK_FILE = "lock"
log = logging.getLogger("genwire.checkpoint")

ROWS_FILE = re.compile(r"rows-(\d+)\.jsonl")
FAILED_FILE = re.compile(r"failed-(\d+)\.jsonl")
REJECTED_FILE = re.compile(r"rejected-(\d+)\.jsonl")
# What else a run keeps here (batch mode's journal, and its spool files while a batch file is
# built or read: providers.batch.collector.SPOOL_PREFIX); anything else is a stray file.
JOURNAL_FILE = "batch-journal.jsonl"  # records.batch_journal.JOURNAL_NAME (not imported: loaded on demand)
LEDGER_FILE = "ledger.jsonl"  # engine.records.ledger.LEDGER_NAME: what the run paid, per answer (SPEC §16)
METRICS_FILE = "metrics.jsonl"  # engine.records.metrics.METRICS_FILE: the run's per-second aggregates (SPEC §19)
OTHER_FILES = frozenset({META_FILE, LOCK_FILE, JOURNAL_FILE, LEDGER_FILE, METRICS_FILE})
SPOOL_FILE = re.compile(r"batch-spool-[\w.-]+\.jsonl")


def segment_number(path: Path) -> int:
    match = ROWS_FILE.fullmatch(path.name) or FAILED_FILE.fullmatch(path.name) or REJECTED_FILE.fullmatch(path.name)
    assert match is not None, path  # only ever called on paths session_files() matched
    return int(match.group(1))


def session_files(directory: Path, pattern: re.Pattern[str]) -> list[Path]:
    """The session files of one kind, oldest first (a ``rows-abc.jsonl`` is not one)."""
    paths = [p for p in directory.iterdir() if pattern.fullmatch(p.name) and p.is_file()]
    return sorted(paths, key=segment_number)


def stray_files(directory: Path) -> list[Path]:
    """Entries a run never writes here: ignored, and named once so the user can look."""
    stray = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.endswith(".tmp"):  # an atomic write a kill caught: harmless
            name = name[: -len(".tmp")]
        own = name in OTHER_FILES or any(p.fullmatch(name) for p in (ROWS_FILE, FAILED_FILE, REJECTED_FILE, SPOOL_FILE))
        if not own or not path.is_file():
            stray.append(path)
    return stray


def cut_torn_line(path: Path) -> None:
    """Cut a torn last line (the process died mid-write) so the file parses; reads from
    the end, never the whole file (a 1,000,000-row run's files are hundreds of MB)."""
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        good = whole_length(handle, size)
        if good < size:
            handle.truncate(good)


def whole_length(handle: BinaryIO, size: int) -> int:
    """The bytes of the file's whole lines: up to its last newline, found from the end."""
    end = size
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        handle.seek(start)
        newline = handle.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def whole_lines(path: Path) -> Iterator[bytes]:
    """The lines of ``path`` that end in a newline, streamed (a torn last line, a kill
    mid-write, is not one): what is read at the end of a run holds one line at a time."""
    with path.open("rb") as handle:
        for line in handle:
            if line.endswith(b"\n"):
                yield line


TAIL_CHUNK = 1 << 16


def json_lines(path: Path) -> Iterator[Any]:
    for line in whole_lines(path):
        yield json.loads(line)


class Damaged(ValueError):
    """A rows line that cannot be used; the message says why."""


def row_record(line: bytes, num_records: int) -> tuple[int, dict[str, Any]]:
    """The (index, row) of one rows line, or ``Damaged`` saying what is wrong with it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Damaged(f"bytes that are not UTF-8 text (at byte {exc.start})") from None
    if "\x00" in text:
        raise Damaged("NUL bytes (the disk lost what was written there)")
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise Damaged(f"not JSON ({exc})") from None
    if not isinstance(record, dict) or "i" not in record:
        raise Damaged("no row index")
    index = record["i"]
    if type(index) is not int:
        raise Damaged(f"a row index that is not a whole number ({readable(index)})")
    if not 0 <= index < num_records:
        raise Damaged(f"row index {index}, outside the run's rows 0-{num_records - 1}")
    row = record.get("row")
    if not isinstance(row, dict):
        raise Damaged(f"no row object for row index {index}")
    return index, row


def readable(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


class DoneRows:
    """Which row indices are done: one bit per row up to the highest done one, so memory
    grows with the rows that exist, never with ``num_records`` (a bytearray of
    ``num_records`` bytes made ``-n 100000000000`` a MemoryError before any row); a
    million candidates take 125 kB."""

    def __init__(self) -> None:
        self._bits = bytearray()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @classmethod
    def of(cls, indices: Iterable[int]) -> DoneRows:
        """The set of ``indices`` (negative ones, which no row has, left out)."""
        done = cls()
        for index in indices:
            if index >= 0:
                done.add(index)
        return done

    def __contains__(self, index: int) -> bool:
        byte = index >> 3
        return 0 <= byte < len(self._bits) and bool(self._bits[byte] >> (index & 7) & 1)

    def add(self, index: int) -> None:
        if index < 0:
            raise ValueError(f"a row index is never negative, got {index}")
        byte, bit = index >> 3, 1 << (index & 7)
        size = len(self._bits)
        if byte >= size:  # doubling: appending rows in order costs amortised O(1) each
            self._bits.extend(bytes(max(byte + 1, 2 * size) - size))
        if not self._bits[byte] & bit:
            self._bits[byte] |= bit
            self._count += 1

    def discard(self, index: int) -> None:
        if index in self:
            self._bits[index >> 3] &= ~(1 << (index & 7)) & 0xFF
            self._count -= 1

    def missing(self, n: int) -> Iterator[int]:
        """The indices below ``n`` not done, in order, read lazily."""
        bits = self._bits  # grows while the run appends: only indices below are read here
        known = min(n, 8 * len(bits))
        for byte in range((known + 7) >> 3):
            if bits[byte] != 0xFF:  # a whole byte done: 8 rows skipped at once
                # each bit read as it is reached: a row done meanwhile is not pending
                base = byte << 3
                yield from (i for i in range(base, min(base + 8, known)) if not bits[byte] >> (i - base) & 1)
        yield from range(max(known, 0), n)


def read_rows(segments: list[Path], n: int) -> DoneRows:
    """Which rows the segments hold (one byte per row). A line that cannot be used is one
    warning naming its file and line, and is cut out of its file, so its row is generated
    again, every other row is kept, and the merge at the end reads only good lines."""
    done = DoneRows()
    bad: dict[Path, set[int]] = {}  # line numbers (from 1) to cut, per file
    repeated: set[int] = set()  # row indices two lines claim: which one is right is unknown
    for segment in segments:
        cut_torn_line(segment)
        last = -1
        with segment.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    index, _ = row_record(line, n)
                    if index in done or index in repeated:
                        repeated.add(index)
                        raise Damaged(f"row index {index}, which an earlier line holds too (both lines are set aside)")
                    if index < last:
                        raise Damaged(f"row index {index} after row index {last} (rows are written in order)")
                except Damaged as exc:
                    log.warning(
                        "checkpoint %s line %d cannot be used: %s; that row is generated again", segment, number, exc
                    )
                    bad.setdefault(segment, set()).add(number)
                    continue
                done.add(index)
                last = index
    for index in repeated:
        done.discard(index)
    for segment in segments:
        if segment in bad or repeated:
            rewrite_without(segment, bad.get(segment, set()), repeated, n)
    return done


class Rejections:
    """The candidates the rejected-* files hold, and how many each gate rejected."""

    def __init__(self) -> None:
        self.done = DoneRows()
        self.by_gate: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.done)

    def add(self, index: int, gate: str) -> None:
        if index not in self.done:
            self.done.add(index)
            self.by_gate[gate] = self.by_gate.get(gate, 0) + 1


def rejection_record(line: bytes, limit: int) -> tuple[int, str]:
    """The (candidate, gate) of one rejected line, or ``Damaged``."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise Damaged(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise Damaged("not a JSON object")
    index, gate = record.get("candidate"), record.get("gate")
    if type(index) is not int or not 0 <= index < limit:
        raise Damaged(f"no usable candidate index ({readable(index)})")
    if not isinstance(gate, str) or not isinstance(record.get("row"), dict):
        raise Damaged(f"no gate or row for candidate {index}")
    return index, gate


def read_rejected(segments: list[Path], limit: int, kept: DoneRows) -> Rejections:
    """The rejected candidates; a line that cannot be used is one warning and is cut out
    (that candidate is generated again), as a damaged rows line."""
    rejections = Rejections()
    for segment in segments:
        cut_torn_line(segment)
        bad: set[int] = set()
        with segment.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    index, gate = rejection_record(line, limit)
                    if index in kept or index in rejections.done:
                        raise Damaged(f"candidate {index}, which the checkpoint holds already")
                except Damaged as exc:
                    log.warning(
                        "checkpoint %s line %d cannot be used: %s; that candidate is generated again",
                        segment,
                        number,
                        exc,
                    )
                    bad.add(number)
                    continue
                rejections.add(index, gate)
        if bad:
            rewrite_without(segment, bad, set(), limit)
    return rejections


def rewrite_without(segment: Path, numbers: set[int], indices: set[int], n: int) -> None:
    """Atomically drop the given line numbers and the lines of the given row indices."""
    tmp = segment.with_name(segment.name + ".tmp")
    changed = False
    with segment.open("rb") as source, tmp.open("wb") as target:
        for number, line in enumerate(source, 1):
            if number not in numbers and (not indices or row_record(line, n)[0] not in indices):
                target.write(line)
            else:
                changed = True
        target.flush()
        os.fsync(target.fileno())
    if changed:
        os.replace(tmp, segment)
    else:
        tmp.unlink()
