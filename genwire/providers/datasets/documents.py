"""A directory of .txt/.md files, chunked into passages: rows of id, source, text."""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path

from genwire.errors import DatasetError

from ._base import LazyDataset, Row
from ._files import decode_utf8, read_bytes, require_dir
from .chunking import chunk_text

SUFFIXES = frozenset({".txt", ".md"})
COLUMNS = ["id", "source", "text"]


class DocumentsDataset(LazyDataset):
    kind = "documents"

    def __init__(self, name: str, path: Path, chunk_chars: int) -> None:
        super().__init__(name, path)
        self.chunk_chars = chunk_chars

    @property
    def endpoint_key(self) -> Hashable:
        return ("dataset", self.kind, str(self.path), self.chunk_chars)

    def _read(self) -> tuple[list[Row], list[str]]:
        require_dir(self.path)
        files = self._files()
        if not files:
            raise DatasetError(f"no .txt or .md files under {self.path}")
        rows: list[Row] = []
        for source, file in files:
            text = decode_utf8(file, read_bytes(file))
            for index, passage in enumerate(chunk_text(text, self.chunk_chars)):
                rows.append({"id": f"{source}#{index}", "source": source, "text": passage})
        return rows, list(COLUMNS)

    def _files(self) -> list[tuple[str, Path]]:
        """(relative POSIX path, absolute path), sorted by the former so ids are stable."""
        found: list[tuple[str, Path]] = []

        def fail(exc: OSError) -> None:
            raise DatasetError(f"{exc.filename}: cannot list: {exc.strerror}")

        # os.walk does not follow symlinked directories, so a link cycle cannot hang us.
        for dirpath, _dirnames, filenames in os.walk(self.path, onerror=fail):
            for filename in filenames:
                file = Path(dirpath, filename)
                if file.suffix.lower() in SUFFIXES and file.is_file():
                    found.append((file.relative_to(self.path).as_posix(), file))
        found.sort()
        return found
