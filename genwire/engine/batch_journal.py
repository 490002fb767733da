"""The journal of a batch-mode run: which batches hold which requests, on disk before
the run waits on them, so a rerun after a kill re-attaches instead of paying again.

``<output>.checkpoint/batch-journal.jsonl``, one JSON object per line, appended and
fsynced::

    {"event": "file", "provider": p, "file": id, "ids": [custom_id, ...]}   uploaded
    {"event": "batch", "provider": p, "batch": id, "file": id}              created
    {"event": "ended", "provider": p, "batch": id, "status": s}             read

A file recorded with no batch means the run died between the upload and the batch's
creation: the collector looks for a batch made from that file before resubmitting. A
request in several batches (resubmitted after an expiry) belongs to the last one. A torn
last line (a kill mid-write) is cut off. The checkpoint's removal at the end of a run
removes the journal with it; ``--fresh`` keeps it (the batches it lists still run, and are
billed, at the provider: a rerun collects from them instead of paying twice).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from genwire.providers.batch.collector import SPOOL_PREFIX

__all__ = ["JOURNAL_NAME", "BatchJournal", "journal_batches", "open_batch_ids"]

JOURNAL_NAME = "batch-journal.jsonl"


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        for raw in handle:
            try:
                record = json.loads(raw)
            except ValueError:
                continue  # a torn last line
            if isinstance(record, dict):
                yield record


def journal_batches(directory: Path) -> dict[str, dict[str, Any]]:
    """Per batch id: ``provider``, ``requests`` and the last known ``status`` (None while
    open), from a checkpoint directory's journal (read without the run's lock)."""
    files: dict[tuple[str, str], int] = {}
    out: dict[str, dict[str, Any]] = {}
    for record in _records(directory / JOURNAL_NAME):
        provider = str(record.get("provider"))
        if record.get("event") == "file":
            files[provider, str(record.get("file"))] = len(record.get("ids") or [])
        elif record.get("event") == "batch":
            requests = files.get((provider, str(record.get("file"))), 0)
            out[str(record.get("batch"))] = {"provider": provider, "requests": requests, "status": None}
        elif record.get("event") == "ended" and str(record.get("batch")) in out:
            out[str(record.get("batch"))]["status"] = record.get("status")
    return out


def open_batch_ids(directory: Path) -> list[str]:
    """The batches a checkpoint directory's journal lists as not read to their end."""
    return [batch for batch, info in journal_batches(directory).items() if info["status"] is None]


class BatchJournal:
    """The ``Ledger`` of ``providers.batch``: lookups from what earlier sessions wrote."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / JOURNAL_NAME
        for stale in directory.glob(SPOOL_PREFIX + "*"):  # a killed session's half-built files
            stale.unlink(missing_ok=True)
        self._files: dict[tuple[str, str], list[str]] = {}
        self._batch_of: dict[tuple[str, str], str] = {}
        self._unbatched: dict[tuple[str, str], list[str]] = {}
        self.open_batches = 0
        ended: set[str] = set()
        for record in _records(self.path):
            self._apply(record, ended)
        self._repair()
        self._handle: IO[bytes] | None = None

    def _apply(self, record: dict[str, Any], ended: set[str]) -> None:
        provider, event = str(record.get("provider")), record.get("event")
        if event == "file":
            ids = [str(i) for i in record.get("ids") or []]
            self._files[provider, str(record.get("file"))] = ids
            self._unbatched[provider, str(record.get("file"))] = ids
        elif event == "batch":
            batch = str(record.get("batch"))
            ids = self._unbatched.pop((provider, str(record.get("file"))), [])
            for custom_id in ids:
                self._batch_of[provider, custom_id] = batch
            self.open_batches += 1
        elif event == "ended" and str(record.get("batch")) not in ended:
            ended.add(str(record.get("batch")))
            self.open_batches -= 1

    def _repair(self) -> None:
        """Cut a torn last line so the next append starts a line of its own."""
        if not self.path.exists():
            return
        with self.path.open("rb+") as handle:
            data = handle.read()
            good = data.rfind(b"\n") + 1
            if good < len(data):
                handle.truncate(good)

    def _append(self, record: dict[str, Any]) -> None:
        if self._handle is None:
            self._handle = self.path.open("ab")
        self._handle.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    # --- Ledger --------------------------------------------------------------------------

    def batch_of(self, provider: str, custom_id: str) -> str | None:
        return self._batch_of.get((provider, custom_id))

    def unbatched_files(self, provider: str) -> dict[str, list[str]]:
        return {file_id: ids for (p, file_id), ids in self._unbatched.items() if p == provider}

    def uploaded(self, provider: str, file_id: str, custom_ids: Sequence[str]) -> None:
        self._append({"event": "file", "provider": provider, "file": file_id, "ids": list(custom_ids)})

    def submitted(self, provider: str, batch_id: str, file_id: str) -> None:
        self._append({"event": "batch", "provider": provider, "batch": batch_id, "file": file_id})
        self.open_batches += 1
        # A batch recovered from an unbatched file: its requests are now looked up there.
        for custom_id in self._unbatched.pop((provider, file_id), []):
            self._batch_of[provider, custom_id] = batch_id

    def ended(self, provider: str, batch_id: str, status: str) -> None:
        self._append({"event": "ended", "provider": provider, "batch": batch_id, "status": status})
        self.open_batches -= 1

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
