"""A batch's result, as every engine hands it on (kept rows, failures, rejected candidates,
what a Ray worker paid for), and the small helpers the rooms above share to make and read it."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from genwire.engine.records.receipt import Receipt
from genwire.errors import ModelError
from genwire.providers.response_cache.layout import Entry

T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last may be shorter), read lazily."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


@dataclass
class BatchResult:
    indices: list[int]  # of ``rows``, one each
    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    cached: int = 0  # answers the response cache served for this batch (no request sent)
    # The answers its rows kept, for a runner that does not store them itself (a Ray
    # worker: the driver is the cache's one writer).
    answers: list[Entry] = field(default_factory=list)
    # What a Ray worker paid for since its last receipt (the driver feeds the run's accounts).
    receipt: Receipt | None = None
    # A gated run (SPEC §21): the candidates a gate rejected, in index order,
    # ``{"candidate", "gate", "reason", "row"}`` (the row's cells generated so far).
    rejected: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0  # rows the batch was started with (kept, failed, rejected or dropped at the budget)
    # Made by a Ray worker that had stopped sending at the failure rate (its unsent rows dropped).
    stopping: bool = False


def failure_record(
    index: int, row: dict[str, Any], column: str, error: BaseException, error_class: str | None = None
) -> dict[str, Any]:
    if error_class is None:
        error_class = error.error_class.value if isinstance(error, ModelError) else type(error).__name__
    message = error.message if isinstance(error, ModelError) else str(error)
    return {"row": index, "column": column, "error_class": error_class, "error": message, "data": dict(row)}
