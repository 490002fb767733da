"""Per-row outcomes: a failed row is a value, so one bad row never sinks its batch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RowFailure:
    """Returned by ``generate`` in place of a value when that row failed. The engine
    writes the row and ``error`` to the errors file and keeps the other rows."""

    error: BaseException

    @property
    def message(self) -> str:
        """One line for the errors file: the exception type and its message."""
        text = str(self.error)
        return f"{type(self.error).__name__}: {text}" if text else type(self.error).__name__


async def gather_rows(coros: Iterable[Awaitable[T]]) -> list[T | RowFailure]:
    """Await every per-row call concurrently and return results in order, with each
    ``Exception`` turned into a ``RowFailure``.

    Anything that is not an ``Exception`` (``CancelledError``, ``KeyboardInterrupt``,
    ``SystemExit``) is re-raised: those mean "stop", not "this row failed".
    """
    results = await asyncio.gather(*coros, return_exceptions=True)
    out: list[T | RowFailure] = []
    for result in results:
        if isinstance(result, Exception):
            out.append(RowFailure(result))
        elif isinstance(result, BaseException):
            raise result
        else:
            out.append(result)
    return out
