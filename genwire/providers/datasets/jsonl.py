"""JSON Lines: one JSON object per non-blank line."""

from __future__ import annotations

import json
from typing import Any

from genwire.errors import DatasetError

from ._base import LazyDataset, Row, union_columns
from ._files import UTF8_BOM, os_error, require_file, utf8_error


class JsonlDataset(LazyDataset):
    kind = "jsonl"

    def _read(self) -> tuple[list[Row], list[str]]:
        require_file(self.path, self.kind)
        rows: list[Row] = []
        try:
            # Binary lines so a decoding error names its own line, and so U+2028 inside
            # JSON strings is not mistaken for a line break.
            with self.path.open("rb") as f:
                for number, raw in enumerate(f, 1):
                    obj = self._parse(number, raw)
                    if obj is not None:
                        rows.append(obj)
        except OSError as exc:
            raise os_error(self.path, exc) from None
        return rows, union_columns(rows)

    def _parse(self, number: int, raw: bytes) -> Row | None:
        if number == 1 and raw.startswith(UTF8_BOM):
            raw = raw[len(UTF8_BOM) :]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise utf8_error(self.path, raw, exc, first_line=number) from None
        if not line.strip():
            return None
        try:
            obj: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{self.path}:{number}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        except RecursionError:
            raise DatasetError(f"{self.path}:{number}: invalid JSON: nested too deeply") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{self.path}:{number}: expected a JSON object, got {_json_type(obj)}")
        return obj


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"
