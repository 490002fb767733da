"""Datasets: jsonl, csv and parquet files and directories of documents.

``open_dataset`` builds one without touching the disk; it loads on ``load()`` or on first
use. See ``LazyDataset`` for the read API every kind shares.
"""

from __future__ import annotations

from pathlib import Path

from genwire.config.schema import DocumentsDatasetConfig, FileDatasetConfig

from ._base import LazyDataset, Row
from .chunking import chunk_text
from .csv_file import CsvDataset
from .documents import DocumentsDataset
from .jsonl import JsonlDataset
from .parquet import ParquetDataset

__all__ = [
    "CsvDataset",
    "DocumentsDataset",
    "JsonlDataset",
    "LazyDataset",
    "ParquetDataset",
    "Row",
    "chunk_text",
    "open_dataset",
]

_FILE_KINDS: dict[str, type[LazyDataset]] = {
    "jsonl": JsonlDataset,
    "csv": CsvDataset,
    "parquet": ParquetDataset,
}


def open_dataset(name: str, config: FileDatasetConfig | DocumentsDatasetConfig, path: Path) -> LazyDataset:
    """The dataset ``name`` described by ``config``; ``path`` is already resolved."""
    if isinstance(config, DocumentsDatasetConfig):
        return DocumentsDataset(name, path, config.chunk_chars)
    return _FILE_KINDS[config.kind](name, path)
