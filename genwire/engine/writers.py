"""Streaming, atomic dataset writers: rows go to a temporary file beside the target, which
is renamed into place only when the run completes. A failed or interrupted run leaves no
partial output."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Protocol

from genwire.config.schema import OUTPUT_SUFFIXES, output_suffix_problem
from genwire.errors import RunError


class RowWriter(Protocol):
    def write(self, rows: list[dict[str, Any]]) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


def _json_default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return tolist()
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_json_default)


class _AtomicFile:
    def __init__(self, target: Path, binary: bool = False) -> None:
        self.target = target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except OSError as exc:
            raise RunError(f"cannot write {target}: {exc.strerror or exc}") from None
        self.tmp = Path(tmp)
        self.handle: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")

    def commit(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.tmp, self.target)

    def abort(self) -> None:
        if not self.handle.closed:
            self.handle.close()
        self.tmp.unlink(missing_ok=True)


class _TextWriter:
    def __init__(self, target: Path, columns: list[str]) -> None:
        self._file = _AtomicFile(target)
        self._columns = columns

    def commit(self) -> None:
        self._file.commit()

    def abort(self) -> None:
        self._file.abort()


class JsonlWriter(_TextWriter):
    def write(self, rows: list[dict[str, Any]]) -> None:
        self._file.handle.write("".join(dumps(r) + "\n" for r in rows))


class CsvWriter(_TextWriter):
    """Nested values (mappings, lists) are JSON-encoded in their cell."""

    def __init__(self, target: Path, columns: list[str]) -> None:
        super().__init__(target, columns)
        self._csv = csv.writer(self._file.handle)
        self._csv.writerow(columns)

    def write(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            cells = []
            for c in self._columns:
                v = row.get(c)
                cells.append(v if isinstance(v, str | int | float | bool) or v is None else dumps(v))
            self._csv.writerow(cells)


class ParquetWriter:
    def __init__(self, target: Path, columns: list[str]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise RunError(f"writing {target.name} needs pyarrow: pip install 'genwire[parquet]'") from None
        self._pa, self._pq = pa, pq
        self._file = _AtomicFile(target, binary=True)
        self._writer: Any = None
        self._columns = columns

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        pa = self._pa
        table = pa.Table.from_pylist([{c: r.get(c) for c in self._columns} for r in rows])
        if self._writer is None:
            self._writer = self._pq.ParquetWriter(self._file.handle, table.schema)
        elif table.schema != self._writer.schema:
            try:
                table = table.cast(self._writer.schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
                raise RunError(f"{self._file.target}: a later batch does not fit the parquet schema: {exc}") from None
        self._writer.write_table(table)

    def commit(self) -> None:
        if self._writer is None:  # no rows: still a valid (empty) parquet file
            self._writer = self._pq.ParquetWriter(
                self._file.handle, self._pa.schema([(c, self._pa.null()) for c in self._columns])
            )
        self._writer.close()
        self._file.commit()

    def abort(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the temp file is removed anyway
                self._writer.close()
        self._file.abort()


_WRITERS: dict[str, type[JsonlWriter] | type[CsvWriter] | type[ParquetWriter]] = {
    ".jsonl": JsonlWriter,
    ".csv": CsvWriter,
    ".parquet": ParquetWriter,
}


assert tuple(_WRITERS) == OUTPUT_SUFFIXES  # one writer per format the config accepts


def check_output(target: Path) -> None:
    """Fail before any work (and any paid pre-flight) when the output cannot be written."""
    problem = output_suffix_problem(str(target))
    if problem:
        raise RunError(f"output {target}: {problem}")


def open_writer(target: Path, columns: list[str]) -> RowWriter:
    check_output(target)
    return _WRITERS[target.suffix.lower()](target, columns)


def errors_path(output: Path) -> Path:
    return output.with_name(output.name + ".errors.jsonl")
