"""How many rows a run can have (standard library only: the command line checks ``-n``
with it before anything else is loaded)."""

from __future__ import annotations

# Row indices are stored and exchanged as 64-bit integers (checkpoint lines, Parquet,
# Ray blocks, Python's own len()/range() sizes): a run has at most this many rows.
MAX_NUM_RECORDS = 2**63 - 1


def too_many_rows(value: int | float) -> str | None:
    """Why ``value`` rows cannot be run (the caller shows the value), or None."""
    if value <= MAX_NUM_RECORDS:
        return None
    return f"more rows than a row index can number: at most {MAX_NUM_RECORDS:,} (a 64-bit integer)"
