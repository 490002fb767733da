"""Parquet via pyarrow, which is optional (genwire[parquet]) and imported on first load."""

from __future__ import annotations

from typing import Any

from genwire.errors import DatasetError, exception_text

from ._base import LazyDataset, Row
from ._files import require_file


class ParquetDataset(LazyDataset):
    kind = "parquet"

    def _read(self) -> tuple[list[Row], list[str]]:
        require_file(self.path, self.kind)
        pq = _pyarrow_parquet(self.path)
        try:
            table = pq.read_table(self.path)
        except OSError as exc:
            raise DatasetError(f"{self.path}: cannot read parquet file: {exc}") from None
        except Exception as exc:  # pyarrow raises ArrowInvalid & co. for corrupt files
            raise DatasetError(f"{self.path}: not a valid parquet file: {exc}") from None
        try:
            rows: list[Row] = table.to_pylist()
        except Exception as exc:  # e.g. nanosecond timestamps that Python's datetime cannot hold
            raise DatasetError(
                f"{self.path}: cannot convert its values to Python ({exception_text(exc)}); "
                "cast the column to a supported type (e.g. microsecond timestamps) and write the file again"
            ) from None
        # The schema gives the columns even when the file has no rows.
        columns: list[str] = list(table.schema.names)
        return rows, columns


def _pyarrow_parquet(path: Any) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(f"{path}: reading parquet needs pyarrow: pip install 'genwire[parquet]'") from None
    return pq
