"""CSV with a header row; every value stays a string, as the file has it."""

from __future__ import annotations

import csv
from typing import TextIO

from genwire.errors import DatasetError

from ._base import LazyDataset, Row
from ._files import decode_utf8, os_error, read_bytes, require_file


class CsvDataset(LazyDataset):
    kind = "csv"

    def _read(self) -> tuple[list[Row], list[str]]:
        require_file(self.path, self.kind)
        try:
            # Streamed: the common case never holds the raw text and the rows at once.
            with self.path.open(encoding="utf-8-sig", newline="") as f:
                return self._parse(f)
        except UnicodeDecodeError:
            # The text layer decodes in blocks and cannot say where; find the line.
            decode_utf8(self.path, read_bytes(self.path))
            raise DatasetError(f"{self.path}: not valid UTF-8") from None  # decode_utf8 raised
        except OSError as exc:
            raise os_error(self.path, exc) from None

    def _parse(self, f: TextIO) -> tuple[list[Row], list[str]]:
        reader = csv.reader(f)
        header: list[str] | None = None
        rows: list[Row] = []
        line = 1  # physical line where the next record starts (quoted fields span lines)
        try:
            for record in reader:
                start, line = line, reader.line_num + 1
                if not record:  # blank line
                    continue
                if header is None:
                    header = self._check_header(record, start)
                    continue
                if len(record) != len(header):
                    raise DatasetError(
                        f"{self.path}:{start}: expected {len(header)} fields as in the header, got {len(record)}"
                    )
                rows.append(dict(zip(header, record, strict=True)))
        except csv.Error as exc:
            raise DatasetError(f"{self.path}:{reader.line_num}: invalid CSV: {exc}") from None
        # A file with no header at all is an empty dataset; the pre-flight reports it.
        return rows, header or []

    def _check_header(self, header: list[str], line: int) -> list[str]:
        seen: set[str] = set()
        for name in header:
            if name in seen:
                raise DatasetError(f"{self.path}:{line}: column {name!r} appears twice in the header row")
            seen.add(name)
        return header
