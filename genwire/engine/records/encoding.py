"""Rows as strict JSON lines: what the checkpoint and every output format can hold.

A row is encoded once, when its batch is checkpointed. A cell that strict JSON or UTF-8
cannot carry (NaN/Infinity, a lone surrogate such as ``"\\ud83d"``) fails *that row*,
with a message naming the column, and never the run. Failing beats rewriting: the value
is reported, not silently changed, and a resumed run generates the row again.
Failure records must always be writable (they are the evidence), so they are encoded
leniently: ASCII escapes for surrogates, non-finite numbers as their names.
"""

from __future__ import annotations

import json
import math
from typing import Any


class UnwritableCell(ValueError):
    def __init__(self, column: str, why: str) -> None:
        self.column = column
        super().__init__(f"column {column!r} {why}")


def _json_default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return tolist()
    return str(value)


# Built once: json.dumps with options builds an encoder per call (twice a row: the
# checkpoint line, then the output's).
_ROW_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_json_default)
_FAILURE_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, default=_json_default)


def dumps(value: Any) -> str:
    """JSON text as the output files hold it (UTF-8, not ASCII-escaped)."""
    return _ROW_ENCODER.encode(value)


def _why(value: Any) -> str | None:
    try:
        dumps(value).encode("utf-8")
    except ValueError as exc:  # NaN/Infinity (allow_nan=False), or UnicodeEncodeError
        if isinstance(exc, UnicodeEncodeError):
            bad = exc.object[exc.start : exc.end]
            return f"holds {bad!r}, which cannot be written as UTF-8 (a lone surrogate); the row is not written"
        return "holds NaN or Infinity, which is not valid JSON; the row is not written"
    return None


def encode_row(index: int, row: dict[str, Any]) -> bytes:
    """One checkpoint line; ``UnwritableCell`` names the first column that cannot be written."""
    try:
        return (dumps({"i": index, "row": row}) + "\n").encode("utf-8")
    except ValueError:
        for column, value in row.items():
            why = _why(value)
            if why is not None:
                raise UnwritableCell(column, why) from None
        raise


def _lenient(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        value = tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf": the evidence, readable by any JSON parser
    if isinstance(value, dict):
        return {str(k): _lenient(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lenient(v) for v in value]
    return value


def encode_failure(record: dict[str, Any]) -> bytes:
    """One errors-file line; never fails."""
    try:
        text = _FAILURE_ENCODER.encode(record)
    except ValueError:
        text = _FAILURE_ENCODER.encode(_lenient(record))
    return (text + "\n").encode("ascii")
