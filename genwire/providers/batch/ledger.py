"""What a collector needs of the run's journal of batches (``engine.records.batch_journal``
implements it; the providers layer cannot import the engine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Ledger(Protocol):
    tag: str  # put in each batch's metadata: the batches of this journal, found again

    def batch_of(self, provider: str, custom_id: str) -> str | None:
        """The batch an earlier session submitted this request in, if any (not one whose
        output file was gone)."""
        ...

    def unbatched_files(self, provider: str) -> dict[str, list[str] | None]:
        """Files uploaded by an earlier session with no batch recorded (killed between
        the upload and the batch's creation): file id -> the request ids it holds (None:
        the journal's line of them was damaged)."""
        ...

    def lost(self, provider: str) -> bool:
        """A damaged journal line may have named a batch of this provider."""
        ...

    def idless_files(self, provider: str) -> dict[str, str]:
        """Batches whose file's request ids the journal lost: file id -> batch id."""
        ...

    def known(self, provider: str, batch_id: str) -> bool:
        """The journal knows this batch and the request ids it holds."""
        ...

    def has_ended(self, provider: str, batch_id: str) -> bool:
        """An earlier session (or this one) read the batch to its end."""
        ...

    def uploaded(self, provider: str, file_id: str, custom_ids: Sequence[str]) -> None:
        """Record (durably, before the batch is created) a file and its request ids."""
        ...

    def submitted(self, provider: str, batch_id: str, file_id: str) -> None:
        """Record (durably, before the run waits on it) the batch made from a file."""
        ...

    def found(self, provider: str, batch_id: str, file_id: str, custom_ids: Sequence[str]) -> None:
        """Record a batch found again at the provider, with the request ids of its file."""
        ...

    def searched(self, provider: str) -> None:
        """The provider was searched for the batches damaged lines may have named."""
        ...

    def ended(self, provider: str, batch_id: str, status: str, *, gone: bool = False) -> None:
        """A batch reached a final status and its lines were read (``gone``: its output
        file was gone at the provider). Idempotent per batch."""
        ...
