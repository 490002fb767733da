"""The journal of a batch-mode run: which batches hold which requests, on disk before
the run waits on them, so a rerun after a kill re-attaches instead of paying again. The
journal is the truth about what was paid (SPEC §14).

``<output>.checkpoint/batch-journal.jsonl``, one JSON object per line, appended and
fsynced::

    {"event": "file", "provider": p, "file": id, "ids": [custom_id, ...]}   uploaded
    {"event": "batch", "provider": p, "batch": id, "file": id}              created
    {"event": "ended", "provider": p, "batch": id, "status": s}             read
    (``"gone": true`` on an ``ended`` line: its output file was gone at the provider)

A file recorded with no batch means the run died between the upload and the batch's
creation: the collector looks for a batch made from that file before resubmitting. A
request in several batches (resubmitted after an expiry) belongs to the last one.
Recording that a batch ended is idempotent: a batch followed again by a rerun (its
answers were not in the response cache) changes nothing. A line that cannot be read
(a torn write, bad JSON, ``"ids": null``) is one warning naming the file and line; the
collector then finds the batches it may have named at the provider (by input file, and
by the journal's tag in each batch's metadata) instead of resubmitting their requests.
The journal is removed only when no batch it names is still open at the provider;
``--fresh`` keeps it (the batches it lists still run, and are billed, at the provider: a
rerun collects from them instead of paying twice).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from genwire.providers.batch.collector import SPOOL_PREFIX

__all__ = ["JOURNAL_NAME", "BatchJournal", "JournalState", "journal_batches", "journal_tag", "open_batch_ids"]

JOURNAL_NAME = "batch-journal.jsonl"

log = logging.getLogger("genwire.batch")


def journal_tag(directory: Path) -> str:
    """The tag a run puts in its batches' metadata: finds them again if the journal is
    damaged (the checkpoint directory's absolute path, hashed)."""
    return hashlib.sha256(str(directory.resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:24]


class _Damaged(ValueError):
    pass


def _text(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise _Damaged(f'"{key}" is {json.dumps(value)[:40]}, not a name')
    return value


def _ids(record: dict[str, Any]) -> list[str]:
    ids = record.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _Damaged(f'"ids" is {json.dumps(ids)[:40]}, not a list of request ids')
    return ids


@dataclass
class JournalState:
    """What a journal says, read whole; damaged lines are kept as warnings."""

    path: Path
    files: dict[tuple[str, str], list[str] | None] = field(default_factory=dict)  # None: ids unreadable
    batches: dict[tuple[str, str], str | None] = field(default_factory=dict)  # -> its input file
    ended: dict[tuple[str, str], str] = field(default_factory=dict)  # -> final status
    gone: set[tuple[str, str]] = field(default_factory=set)  # ended with its output file gone
    batch_of: dict[tuple[str, str], str] = field(default_factory=dict)  # (provider, custom id) -> batch
    unbatched: dict[tuple[str, str], list[str] | None] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # one warning per line
    lost: set[str | None] = field(default_factory=set)  # providers a damaged line may concern (None: any)

    @classmethod
    def read(cls, path: Path) -> JournalState:
        state = cls(path)
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            return state
        with handle:
            for number, raw in enumerate(handle, start=1):
                if raw.strip():
                    state._line(number, raw)
        return state

    def _line(self, number: int, raw: bytes) -> None:
        provider: str | None = None
        try:
            try:
                record = json.loads(raw)
            except ValueError:
                why = "a torn write (cut off)" if not raw.endswith(b"\n") else "not JSON"
                raise _Damaged(why) from None
            if not isinstance(record, dict):
                raise _Damaged("not a JSON object")
            provider = _text(record, "provider")
            self._apply(provider, record)
        except _Damaged as exc:
            self.damaged.append(
                f"{self.path}: line {number} cannot be read ({exc}); the batches it may have named are looked "
                "for at the provider instead of submitting their requests again"
            )
            self.lost.add(provider)

    def _apply(self, provider: str, record: dict[str, Any]) -> None:
        event = record.get("event")
        if event == "file":
            file_id = _text(record, "file")
            try:
                ids: list[str] | None = _ids(record)
            except _Damaged:
                # The file is known: its batch is found by its input file, its ids read from it.
                self.files[provider, file_id] = self.unbatched[provider, file_id] = None
                raise
            self.files[provider, file_id] = self.unbatched[provider, file_id] = ids
        elif event == "batch":
            batch, file_id = _text(record, "batch"), _text(record, "file")
            self.batches[provider, batch] = file_id
            for custom_id in self.unbatched.pop((provider, file_id), None) or self.files.get((provider, file_id)) or []:
                self.batch_of[provider, custom_id] = batch
        elif event == "ended":
            key = (provider, _text(record, "batch"))
            self.ended.setdefault(key, str(record.get("status")))
            if record.get("gone") is True:
                self.gone.add(key)
        else:
            raise _Damaged(f"an unknown event {json.dumps(event)[:40]}")

    def open_batches(self) -> list[tuple[str, str]]:
        """(provider, batch) recorded and not read to their end."""
        return [key for key in self.batches if key not in self.ended]


def journal_batches(directory: Path) -> dict[str, dict[str, Any]]:
    """Per batch id: ``provider``, ``requests`` and the last known ``status`` (None while
    open), from a checkpoint directory's journal (read without the run's lock)."""
    state = JournalState.read(directory / JOURNAL_NAME)
    out: dict[str, dict[str, Any]] = {}
    for (provider, batch), file_id in state.batches.items():
        ids = state.files.get((provider, file_id)) if file_id is not None else None
        status = state.ended.get((provider, batch))
        out[batch] = {"provider": provider, "requests": len(ids or []), "status": status}
    return out


def open_batch_ids(directory: Path) -> list[str]:
    """The batches a checkpoint directory's journal lists as not read to their end."""
    return [batch for batch, info in journal_batches(directory).items() if info["status"] is None]


class BatchJournal:
    """The ``Ledger`` of ``providers.batch``: lookups from what earlier sessions wrote."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / JOURNAL_NAME
        self.tag = journal_tag(directory)
        for stale in directory.glob(SPOOL_PREFIX + "*"):  # a killed session's half-built files
            stale.unlink(missing_ok=True)
        self._state = JournalState.read(self.path)
        for warning in self._state.damaged:
            log.warning("%s", warning)
        self._handle: IO[bytes] | None = None

    def _append(self, record: dict[str, Any]) -> None:
        try:
            if self._handle is None:
                self._cut_torn_end()
                self._handle = self.path.open("ab")
            self._handle.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:  # named: the collector's failure message says which file
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from None

    def _cut_torn_end(self) -> None:
        """Cut a torn last line so the next append starts a line of its own."""
        if not self.path.exists():
            return
        with self.path.open("rb+") as handle:
            data = handle.read()
            good = data.rfind(b"\n") + 1
            if good < len(data):
                handle.truncate(good)

    def rewrite_if_recovered(self) -> None:
        """Damaged lines were warned of and every provider they may concern was searched:
        the journal is written again from what it holds (atomically), so they are warned
        of once. Until then (a kill mid-search) they stay, and the next session searches."""
        state, lines = self._state, list[dict[str, Any]]()
        if not state.damaged or state.lost:
            return
        self.close()
        for (provider, file_id), ids in state.files.items():
            if ids is not None:
                lines.append({"event": "file", "provider": provider, "file": file_id, "ids": ids})
        for (provider, batch), source in state.batches.items():
            if source is not None and state.files.get((provider, source)) is not None:
                lines.append({"event": "batch", "provider": provider, "batch": batch, "file": source})
        for (provider, batch), status in state.ended.items():
            line: dict[str, Any] = {"event": "ended", "provider": provider, "batch": batch, "status": status}
            if (provider, batch) in state.gone:
                line["gone"] = True
            lines.append(line)
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("wb") as handle:
            handle.write(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        state.damaged.clear()

    # --- what the run asks of it ------------------------------------------------------

    def open_batch_ids(self) -> list[tuple[str, str]]:
        return self._state.open_batches()

    @property
    def names_batches(self) -> bool:
        """The journal names a batch (or a file a batch may have been made from): the
        checkpoint stays, so a rerun collects what was paid for instead of paying again."""
        return bool(self._state.batches or self._state.unbatched or self._state.lost)

    # --- Ledger --------------------------------------------------------------------------

    def batch_of(self, provider: str, custom_id: str) -> str | None:
        batch = self._state.batch_of.get((provider, custom_id))
        return None if batch is None or (provider, batch) in self._state.gone else batch

    def unbatched_files(self, provider: str) -> dict[str, list[str] | None]:
        return {f: ids for (p, f), ids in self._state.unbatched.items() if p == provider}

    def lost(self, provider: str) -> bool:
        return bool(self._state.lost & {provider, None})

    def idless_files(self, provider: str) -> dict[str, str]:
        """Files whose request ids the journal lost but whose batch it knows: file -> batch."""
        idless = {f for (p, f), ids in self._state.files.items() if p == provider and ids is None}
        return {f: b for (p, b), f in self._state.batches.items() if p == provider and f in idless}

    def known(self, provider: str, batch_id: str) -> bool:
        file_id = self._state.batches.get((provider, batch_id))
        return file_id is not None and self._state.files.get((provider, file_id)) is not None

    def has_ended(self, provider: str, batch_id: str) -> bool:
        return (provider, batch_id) in self._state.ended

    def uploaded(self, provider: str, file_id: str, custom_ids: Sequence[str]) -> None:
        self._append({"event": "file", "provider": provider, "file": file_id, "ids": list(custom_ids)})
        self._state.files[provider, file_id] = self._state.unbatched[provider, file_id] = list(custom_ids)

    def submitted(self, provider: str, batch_id: str, file_id: str) -> None:
        self._append({"event": "batch", "provider": provider, "batch": batch_id, "file": file_id})
        self._state._apply(provider, {"event": "batch", "batch": batch_id, "file": file_id})

    def found(self, provider: str, batch_id: str, file_id: str, custom_ids: Sequence[str]) -> None:
        """A batch found again at the provider (the journal had lost it, or its ids)."""
        self.uploaded(provider, file_id, custom_ids)
        self.submitted(provider, batch_id, file_id)

    def searched(self, provider: str) -> None:
        """The provider was searched for the batches the damaged lines may have named."""
        self._state.lost.discard(provider)

    def searched_everywhere(self) -> None:
        """Every batching provider was searched (a damaged line naming no provider)."""
        self._state.lost.discard(None)

    def ended(self, provider: str, batch_id: str, status: str, *, gone: bool = False) -> None:
        key = (provider, batch_id)
        if key in self._state.ended:  # idempotent: a batch followed again changes nothing
            return
        record: dict[str, Any] = {"event": "ended", "provider": provider, "batch": batch_id, "status": status}
        if gone:
            record["gone"] = True
            self._state.gone.add(key)
        self._append(record)
        self._state.ended[key] = status

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
