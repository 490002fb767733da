"""A finished run's mark, kept in its report page (SPEC §9, §19): the fingerprint of the
configuration that made the output, its row count and the output file's size and mtime.
A finished run removes its checkpoint, so without the mark a rerun of the same command
could not tell a finished output from nothing and would pay for it all again (its
pre-flight at least) and rewrite the page and the rejected file. With it, the rerun of
an unchanged configuration over an untouched output says the output is complete and
touches nothing; ``--fresh`` makes it again.

The mark is one HTML comment at the top of the page (base64 JSON: no ``--`` or ``>``
can end it early). A page without one (an unfinished run's, an older genwire's, a run
with failed rows: a rerun retries them) marks nothing."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FinishedRun", "fingerprint_digest", "finished_mark", "finished_run"]

_PREFIX = "<!-- genwire-finished: "
_SUFFIX = " -->"
_HEAD_BYTES = 4096  # the mark is the page's second line: never read the whole page


@dataclass(frozen=True)
class FinishedRun:
    """An output a finished run wrote from the same configuration, untouched since."""

    output: Path
    rows: int
    report: Path


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    """One hash of a checkpoint's fingerprint (``engine.records.fingerprint``): paths and hashes, no secret."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _state(output: Path) -> list[int] | None:
    try:
        stat = output.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def finished_mark(output: Path, fingerprint: Any, num_records: int | None, rows: int) -> str:
    """The page's mark for a run that finished with every row written, else ``""``."""
    state = _state(output)
    if not isinstance(fingerprint, dict) or num_records is None or state is None:
        return ""
    record = {"fingerprint": fingerprint_digest(fingerprint), "num_records": num_records, "output": state, "rows": rows}
    encoded = base64.b64encode(json.dumps(record, separators=(",", ":")).encode()).decode()
    return f"{_PREFIX}{encoded}{_SUFFIX}\n"


def finished_run(
    output: Path, report: Path, fingerprint: Callable[[], dict[str, Any]], num_records: int
) -> FinishedRun | None:
    """The finished run of ``output`` when its page's mark matches this configuration
    (``fingerprint()``, ``num_records``) and the output is as that run left it; else None.
    The fingerprint (which hashes the datasets) is taken only when the rest matches."""
    try:
        with report.open("rb") as handle:
            head = handle.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    start = head.find(_PREFIX)
    end = head.find(_SUFFIX, start + len(_PREFIX))
    if start < 0 or end < 0:
        return None
    try:
        record = json.loads(base64.b64decode(head[start + len(_PREFIX) : end], validate=True))
    except (binascii.Error, ValueError):
        return None  # a page edited by hand: no mark, the run goes on as without one
    if not isinstance(record, dict) or type(record.get("rows")) is not int:
        return None
    same = (
        record.get("num_records") == num_records
        and record.get("output") == _state(output)
        and record.get("fingerprint") == fingerprint_digest(fingerprint())
    )
    return FinishedRun(output, record["rows"], report) if same else None
