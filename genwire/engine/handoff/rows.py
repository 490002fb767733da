"""The rows of a finished output, streamed in chunks whatever its format (jsonl, csv,
parquet): flat memory at any number of rows. A line that is not a JSON object is an
error naming the file and line (the hand-off never drops a row silently)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from genwire.errors import RunSetupError

CHUNK_ROWS = 4096

Row = dict[str, Any]


def row_chunks(path: Path, chunk_rows: int = CHUNK_ROWS) -> Iterator[list[Row]]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _parquet(path, chunk_rows)
    elif suffix == ".csv":
        yield from _csv(path, chunk_rows)
    else:
        yield from jsonl_chunks(path, chunk_rows)


def jsonl_chunks(path: Path, chunk_rows: int = CHUNK_ROWS) -> Iterator[list[Row]]:
    """A JSON-lines file's objects (blank lines skipped), ``chunk_rows`` at a time."""
    chunk: list[Row] = []
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise RunSetupError(f"{path}:{number}: not a JSON line ({exc})") from None
            if not isinstance(row, dict):
                raise RunSetupError(f"{path}:{number}: not a JSON object: {line[:80]!r}")
            chunk.append(row)
            if len(chunk) >= chunk_rows:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _csv(path: Path, chunk_rows: int) -> Iterator[list[Row]]:
    """CSV cells as written: text, an empty cell read as null (as the writer writes None)."""
    chunk: list[Row] = []
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            chunk.append({k: (v if v != "" else None) for k, v in row.items()})
            if len(chunk) >= chunk_rows:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _parquet(path: Path, chunk_rows: int) -> Iterator[list[Row]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
        yield batch.to_pylist()
