"""What a collector needs of the run's journal of batches (``engine.batch_journal``
implements it; the providers layer cannot import the engine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Ledger(Protocol):
    def batch_of(self, provider: str, custom_id: str) -> str | None:
        """The batch an earlier session submitted this request in, if any."""
        ...

    def unbatched_files(self, provider: str) -> dict[str, list[str]]:
        """Files uploaded by an earlier session with no batch recorded (killed between
        the upload and the batch's creation): file id -> the request ids it holds."""
        ...

    def uploaded(self, provider: str, file_id: str, custom_ids: Sequence[str]) -> None:
        """Record (durably, before the batch is created) a file and its request ids."""
        ...

    def submitted(self, provider: str, batch_id: str, file_id: str) -> None:
        """Record (durably, before the run waits on it) the batch made from a file."""
        ...

    def ended(self, provider: str, batch_id: str, status: str) -> None:
        """A batch reached a final status and its lines were read."""
        ...
