"""The rows of a finished output, streamed in chunks whatever its format (jsonl, csv,
parquet): flat memory at any number of rows. A line that is not a JSON object is an
error naming the file and line (the hand-off never drops a row silently)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from genwire.engine.records.batch_result import batched
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
    return batched(_jsonl_rows(path), chunk_rows)


def _jsonl_rows(path: Path) -> Iterator[Row]:
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
            yield row


def _csv(path: Path, chunk_rows: int) -> Iterator[list[Row]]:
    """CSV cells as written: text, an empty cell read as null (as the writer writes None)."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = ({k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(handle))
        yield from batched(rows, chunk_rows)


def _parquet(path: Path, chunk_rows: int) -> Iterator[list[Row]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
        yield batch.to_pylist()


ARROW_BLOCK_BYTES = 128 * 1024  # a JSON or CSV block Arrow parses at a time: small, so memory stays flat


def arrow_pool() -> Any:
    """The C allocator's pool: Arrow's default (mimalloc) keeps arenas of tens of MB
    touched for a stream of small batches; malloc gives them back."""
    import pyarrow as pa

    return pa.system_memory_pool()


def arrow_batches(path: Path) -> Iterator[Any]:
    """The output as small Arrow record batches (pyarrow's own readers: vectorised). Raises
    ``pyarrow.ArrowInvalid`` for an output Arrow cannot read as one table (a column of
    two kinds): ``row_chunks`` reads it then."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(path).iter_batches(batch_size=2048)
        return
    if suffix == ".csv":
        import pyarrow.csv as pcsv

        reader: Any = pcsv.open_csv(
            path,
            read_options=pcsv.ReadOptions(block_size=ARROW_BLOCK_BYTES, use_threads=False),
            convert_options=pcsv.ConvertOptions(strings_can_be_null=True),
            memory_pool=arrow_pool(),
        )
    else:
        import pyarrow.json as pjson

        options = pjson.ReadOptions(block_size=ARROW_BLOCK_BYTES, use_threads=False)
        reader = pjson.open_json(path, read_options=options, memory_pool=arrow_pool())
    yield from reader
