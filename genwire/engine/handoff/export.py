"""``genwire export``: a folder ``datasets.load_dataset(DIR)`` loads as is (SPEC §24) —
``README.md`` (the card), ``data/train-0000K-of-0000N.parquet`` (at most ``SHARD_BYTES``
each), and with the rejected candidates ``rejected/train-*.parquet`` (candidate, gate,
reason, then the row's cells). Streamed twice over each source (one schema for every
shard, then the rows): flat memory at any number of rows. Deterministic: the same run
exports the same bytes, so a second push changes nothing."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.engine.handoff.card import render_card
from genwire.engine.handoff.finished import finished_run
from genwire.engine.handoff.rows import Row, jsonl_chunks, row_chunks
from genwire.errors import RunSetupError

SHARD_BYTES = 500 * 1024 * 1024
REJECTED_HEAD = ("candidate", "gate", "reason")

Chunks = Callable[[], Iterator[list[Row]]]  # a fresh pass over a source's rows


@dataclass
class Exported:
    directory: Path
    rows: int
    shards: list[Path]
    rejected: int  # rows of the rejected config (0: none exported)
    files: list[Path]  # every file written, README first


def export(output: Path, directory: Path, *, with_rejected: bool = False, shard_bytes: int = SHARD_BYTES) -> Exported:
    """Export the finished run that wrote ``output`` into ``directory``; its earlier shards
    there are replaced."""
    run = finished_run(output)
    if directory.exists() and not directory.is_dir():
        raise RunSetupError(f"cannot export into {directory}: it is a file; give a folder (made if missing)")
    if with_rejected and run.rejected is None:
        raise RunSetupError(
            f"--with-rejected: the run writing {output} has no rejected candidates ({output.name}.rejected.jsonl): "
            "only a gated run has them; export without --with-rejected"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        shards = write_shards(lambda: row_chunks(run.output), directory / "data", shard_bytes)
        rejected_rows, rejected_shards = 0, []
        if with_rejected and run.rejected is not None:
            rejected_path = run.rejected
            rejected_shards = write_shards(lambda: _rejected_rows(rejected_path), directory / "rejected", shard_bytes)
            rejected_rows = _count_rows(rejected_shards)
        readme = directory / "README.md"
        readme.write_text(render_card(run, with_rejected=with_rejected), encoding="utf-8")
    except OSError as exc:
        raise RunSetupError(f"cannot write the export in {directory}: {exc.strerror or exc}") from None
    return Exported(directory, _count_rows(shards), shards, rejected_rows, [readme, *shards, *rejected_shards])


def _rejected_rows(path: Path) -> Iterator[list[Row]]:
    """The rejected file's lines as flat rows: candidate, gate, reason, then the cells
    (a cell named like one of those three is kept as ``row_<name>``)."""
    for chunk in jsonl_chunks(path):
        rows = []
        for line in chunk:
            row = {name: line.get(name) for name in REJECTED_HEAD}
            cells = line.get("row")
            if not isinstance(cells, dict):
                cells = {}
            for name, value in cells.items():
                row[f"row_{name}" if name in REJECTED_HEAD else name] = value
            rows.append(row)
        yield rows


def write_shards(chunks: Chunks, folder: Path, shard_bytes: int) -> list[Path]:
    """The rows as ``train-0000K-of-0000N.parquet`` in ``folder`` (replacing what was
    there), a new shard once one passes ``shard_bytes``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _schema(pa, chunks)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    written: list[Path] = []
    writer: Any = None
    handle: Any = None
    try:
        for chunk in chunks():
            if writer is None:
                path = folder / f".shard-{len(written):05d}.tmp"
                handle = path.open("wb")
                writer = pq.ParquetWriter(handle, schema)
                written.append(path)
            writer.write_table(_table(pa, chunk, schema, folder))
            if handle.tell() >= shard_bytes:
                writer.close()
                handle.close()
                writer = handle = None
        if writer is None and not written:  # no row at all: one empty shard keeps the config loadable
            path = folder / ".shard-00000.tmp"
            with path.open("wb") as empty:
                pq.ParquetWriter(empty, schema).close()
            written.append(path)
    finally:
        if writer is not None:
            writer.close()
        if handle is not None:
            handle.close()
    total = len(written)
    final = [folder / f"train-{i:05d}-of-{total:05d}.parquet" for i in range(total)]
    for temporary, path in zip(written, final, strict=True):
        os.replace(temporary, path)
    return final


def _schema(pa: Any, chunks: Chunks) -> Any:
    """One schema for every row: types widened as chunks come (null, then text, ...)."""
    schema = None
    for chunk in chunks():
        names = list(dict.fromkeys(name for row in chunk for name in row))  # from_pylist reads the first row's keys
        found = pa.Table.from_pylist([{n: row.get(n) for n in names} for row in chunk]).schema
        try:
            schema = found if schema is None else pa.unify_schemas([schema, found], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise RunSetupError(
                f"cannot export: a column holds values of two kinds parquet cannot mix ({exc})"
            ) from None
    return schema if schema is not None else pa.schema([])


def _table(pa: Any, chunk: list[Row], schema: Any, folder: Path) -> Any:
    try:
        return pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in chunk], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        for row in chunk:  # name the first row that does not fit
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pa.Table.from_pylist([{n: row.get(n) for n in schema.names}], schema=schema)
                continue
            shown = json.dumps(row, ensure_ascii=False, default=str)[:200]
            raise RunSetupError(
                f"cannot export to {folder.name}/: a row does not fit the others' types ({exc}): {shown}"
            ) from None
        raise RunSetupError(f"cannot export to {folder.name}/: {exc}") from None


def _count_rows(shards: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(path).metadata.num_rows for path in shards)
