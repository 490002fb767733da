"""Atomic dataset writers: the finished rows, streamed from the checkpoint into a
temporary file beside the target, renamed into place in one step. A failed or
interrupted write leaves no partial output and no temporary file.

A value one format cannot hold (parquet: a type that conflicts with the other rows' or
an empty mapping) fails that row, returned as a ``WriteFailure``; the run goes on.
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from genwire.config.schema import OUTPUT_SUFFIXES, output_suffix_problem
from genwire.engine.records.batch_result import batched
from genwire.engine.records.encoding import dumps
from genwire.errors import RunError, RunSetupError

Rows = Callable[[], Iterable[tuple[int, dict[str, Any]]]]  # a fresh pass over the rows, in order
CHUNK_ROWS = 1024  # rows handed to a writer at a time: flat memory, few calls


@dataclass(frozen=True)
class WriteFailure:
    index: int
    row: dict[str, Any]
    column: str
    message: str


class RowWriter(Protocol):
    def write_all(self, rows: Rows) -> list[WriteFailure]: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


def chunks(rows: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    return batched(rows, CHUNK_ROWS)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class AtomicFile:
    def __init__(self, target: Path, binary: bool = False) -> None:
        self.target = target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except OSError as exc:
            raise RunError(f"cannot write {target}: {exc.strerror or exc}") from None
        # mkstemp creates 0600, and the mode survives the rename: give the file the mode
        # any other new file gets (0666 less the umask).
        os.fchmod(fd, 0o666 & ~_umask())
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
        self._file = AtomicFile(target)
        self._columns = columns

    def commit(self) -> None:
        self._file.commit()

    def abort(self) -> None:
        self._file.abort()


class JsonlWriter(_TextWriter):
    def write_all(self, rows: Rows) -> list[WriteFailure]:
        for chunk in chunks(rows()):
            self._file.handle.write("".join(dumps(row) + "\n" for _, row in chunk))
        return []


class CsvWriter(_TextWriter):
    """Nested values (mappings, lists) are JSON-encoded in their cell."""

    def write_all(self, rows: Rows) -> list[WriteFailure]:
        out = csv.writer(self._file.handle)
        out.writerow(self._columns)
        for chunk in chunks(rows()):
            out.writerows([self._cells(row) for _, row in chunk])
        return []

    def _cells(self, row: dict[str, Any]) -> list[Any]:
        cells = []
        for column in self._columns:
            value = row.get(column)
            cells.append(value if isinstance(value, str | int | float | bool) or value is None else dumps(value))
        return cells


class ParquetWriter:
    """Two passes over the rows: the first finds one schema for the whole run (widening
    as rows arrive: a null column that later holds text becomes text, a nested key seen
    only in a later row is kept); the second writes. A row whose value fits no schema
    the other rows allow fails alone."""

    def __init__(self, target: Path, columns: list[str]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise RunError(f"writing {target.name} needs pyarrow: pip install 'genwire[parquet]'") from None
        self._pa, self._pq = pa, pq
        self._errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, TypeError)
        self._file = AtomicFile(target, binary=True)
        self._columns = columns
        self._writer: Any = None

    def _table(self, chunk: list[tuple[int, dict[str, Any]]], schema: Any = None) -> Any:
        return self._pa.Table.from_pylist([{c: r.get(c) for c in self._columns} for _, r in chunk], schema=schema)

    def _unify(self, a: Any, b: Any) -> Any:
        return self._pa.unify_schemas([a, b], promote_options="permissive")

    def _schema(self, rows: Rows) -> tuple[Any, dict[int, WriteFailure]]:
        schema = self._pa.schema([(c, self._pa.null()) for c in self._columns])
        bad: dict[int, WriteFailure] = {}
        for chunk in chunks(rows()):
            try:
                schema = self._unify(schema, self._table(chunk).schema)
                continue
            except self._errors:
                pass
            for item in chunk:  # the slow path, only for a chunk that holds a bad row
                try:
                    schema = self._unify(schema, self._table([item]).schema)
                except self._errors as exc:
                    bad[item[0]] = self._failure(item, schema, exc)
        return schema, bad

    def _failure(self, item: tuple[int, dict[str, Any]], schema: Any, exc: BaseException) -> WriteFailure:
        index, row = item
        for column in self._columns:
            try:
                self._unify(schema, self._pa.Table.from_pylist([{column: row.get(column)}]).schema)
            except self._errors as cell_exc:
                exc = cell_exc
                break
        else:
            column = self._columns[0]
        why = " ".join(str(exc).split())[:200]
        return WriteFailure(index, row, column, f"cannot be written to parquet ({why}); write .jsonl to keep it")

    def write_all(self, rows: Rows) -> list[WriteFailure]:
        schema, bad = self._schema(rows)
        pa = self._pa
        # Parquet has no type for a mapping with no keys at all ({} where no row has a
        # key): such a place becomes a null column, and a row with a {} there fails.
        empty = [f for f in schema if _strip_empty(pa, f.type) != f.type]
        schema = pa.schema([pa.field(f.name, _strip_empty(pa, f.type)) for f in schema])
        self._writer = self._pq.ParquetWriter(self._file.handle, schema)
        for chunk in chunks(rows()):
            good = []
            for item in chunk:
                index, row = item
                column = next((f.name for f in empty if _needs_empty(pa, row.get(f.name), f.type)), None)
                if column is not None:
                    message = "holds an empty mapping ({}), which parquet cannot store; write .jsonl to keep it"
                    bad[index] = WriteFailure(index, row, column, message)
                elif index not in bad:
                    good.append(item)
            self._write(good, schema, bad)
        return sorted(bad.values(), key=lambda f: f.index)

    def _write(self, chunk: list[tuple[int, dict[str, Any]]], schema: Any, bad: dict[int, WriteFailure]) -> None:
        if not chunk:
            return
        try:
            self._writer.write_table(self._table(chunk, schema))
            return
        except self._errors:
            pass
        for item in chunk:
            try:
                self._writer.write_table(self._table([item], schema))
            except self._errors as exc:
                bad[item[0]] = self._failure(item, schema, exc)

    def commit(self) -> None:
        if self._writer is None:  # never written: still a valid (empty) parquet file
            schema = self._pa.schema([(c, self._pa.null()) for c in self._columns])
            self._writer = self._pq.ParquetWriter(self._file.handle, schema)
        self._writer.close()
        self._file.commit()

    def abort(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the temp file is removed anyway
                self._writer.close()
        self._file.abort()


def _strip_empty(pa: Any, kind: Any) -> Any:
    """``kind`` with every struct that has no fields replaced by null."""
    if pa.types.is_struct(kind):
        if kind.num_fields == 0:
            return pa.null()
        return pa.struct([pa.field(f.name, _strip_empty(pa, f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(_strip_empty(pa, kind.value_type))
    if pa.types.is_large_list(kind):
        return pa.large_list(_strip_empty(pa, kind.value_type))
    return kind


def _needs_empty(pa: Any, value: Any, kind: Any) -> bool:
    """Whether ``value`` holds something where ``kind`` has a struct with no fields."""
    if value is None:
        return False
    if pa.types.is_struct(kind):
        if kind.num_fields == 0:
            return True
        return isinstance(value, dict) and any(_needs_empty(pa, value.get(f.name), f.type) for f in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return isinstance(value, list) and any(_needs_empty(pa, v, kind.value_type) for v in value)
    return False


_WRITERS: dict[str, type[JsonlWriter] | type[CsvWriter] | type[ParquetWriter]] = {
    ".jsonl": JsonlWriter,
    ".csv": CsvWriter,
    ".parquet": ParquetWriter,
}


assert tuple(_WRITERS) == OUTPUT_SUFFIXES  # one writer per format the config accepts


def errors_path(output: Path) -> Path:
    return output.with_name(output.name + ".errors.jsonl")


def check_output(target: Path, *, protected: Iterable[Path] = (), extra: Iterable[Path] = ()) -> None:
    """Fail before any work (and any paid pre-flight) when the output cannot be written:
    an unknown format, a directory, a path below a file, or a file the pipeline reads
    (``protected``). ``extra`` are the run's other files (errors file, checkpoint)."""
    problem = output_suffix_problem(str(target))
    if problem:
        raise RunSetupError(f"output {target}: {problem}")
    if target.is_dir():
        raise RunSetupError(f"output {target} is a directory; give a file path (-o DIR/dataset.jsonl)")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise RunSetupError(f"output {target}: {parent} is a file, not a directory")
            break
    reads = {_real(p): p for p in protected}
    for path in (target, *extra):
        if _real(path).is_relative_to(_PACKAGE):
            raise RunSetupError(
                f"output {target}: {path} is inside the genwire package ({_PACKAGE}); a run never writes "
                "there. Copy the pipeline out (`genwire init DIR` writes the starter) or choose -o"
            )
        if _real(path) in reads:
            raise RunSetupError(
                f"output {target}: {path} is a dataset file this pipeline reads ({reads[_real(path)]}); "
                "writing it would destroy the input. Choose another output (-o)"
            )


_PACKAGE = Path(os.path.realpath(Path(__file__).parents[2]))  # the installed genwire/ (this is genwire/engine/records/)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def open_writer(target: Path, columns: list[str]) -> RowWriter:
    return _WRITERS[target.suffix.lower()](target, columns)
