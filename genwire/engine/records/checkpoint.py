"""The run's checkpoint: every finished batch, on disk, before the next one is taken.

Layout of ``<output>.checkpoint/``::

    meta.json          fingerprint, num_records, columns (no secret: config paths and hashes)
    lock               held (flock) by the run using it; holds its PID
    rows-0001.jsonl    {"i": row index, "row": {...}} per line, one file per session
    failed-0001.jsonl  the failure records of that session
    rejected-0001.jsonl  a gated run (SPEC §21): the candidates a gate rejected in that
                       session, {"candidate", "gate", "reason", "row"} per line

A *session* is one ``genwire run`` over the checkpoint. Within a session batches arrive in
row order, so each ``rows-*`` file is sorted by index and the final output is a streaming
merge of them (flat memory). A row is never done twice: a resumed session generates only
the indices no ``rows-*`` file holds. The final errors file is the last session's
failures: that session retried every row that had failed before.

A kill can tear the last line of a file; opening the checkpoint cuts it off (that row is
simply generated again). Any other line that cannot be used (bad bytes, not JSON, no row,
a missing, impossible, repeated or out-of-order row index) is one warning naming the file
and line, and is cut out of its file the same way: its row is generated again and every
other row is kept. A file that does not belong here is named and ignored.

Reading the session files back and repairing them is checkpoint_files.py's job; this
module owns the checkpoint's life (open, lock, append, merge, finish), kept whole
(~420 lines): ``Checkpoint`` is one object over one locked folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import heapq
import itertools
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from genwire.config.limits import MAX_NUM_RECORDS
from genwire.engine.records.checkpoint_files import (
    FAILED_FILE,
    JOURNAL_FILE,
    LOCK_FILE,
    META_FILE,
    REJECTED_FILE,
    ROWS_FILE,
    DoneRows,
    Rejections,
    json_lines,
    read_rejected,
    read_rows,
    segment_number,
    session_files,
    stray_files,
)
from genwire.engine.records.fingerprint import Fingerprint, changes
from genwire.errors import RunSetupError

FORMAT_VERSION = 1
log = logging.getLogger("genwire.checkpoint")


def checkpoint_dir(output: Path) -> Path:
    return output.with_name(output.name + ".checkpoint")


def kept_rows(directory: Path) -> int:
    """Rows a checkpoint holds (0 if there is none); read without taking the lock."""
    count = 0
    for segment in directory.glob("rows-*.jsonl"):
        with contextlib.suppress(OSError), segment.open("rb") as handle:
            count += sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    return count


def lock_holder(directory: Path) -> str | None:
    """The PID of the run holding a checkpoint's lock now (``"unknown"`` if it did not
    say), or None when no run holds it. Asked without taking the lock for long."""
    try:
        lock = (directory / LOCK_FILE).open("r", encoding="utf-8")
    except OSError:
        return None
    with lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            return lock.read().strip() or "unknown"
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return None


class Checkpoint:
    """Open with ``Checkpoint.open``; ``close`` releases the lock, ``remove`` deletes it."""

    def __init__(
        self,
        directory: Path,
        lock: IO[str],
        num_records: int,
        done: DoneRows,
        session: int,
        rejected: Rejections | None = None,
        candidates: int | None = None,
    ) -> None:
        self.directory = directory
        self.num_records = num_records
        # A gated run (SPEC §21): candidates 0..candidates-1 may be generated (the cap).
        self.candidates = candidates
        self._lock = lock
        self._done = done  # the rows some rows-* file holds
        self.rejections = rejected if rejected is not None else Rejections()  # the rejected-* files' candidates
        self.resumed = len(done)
        self.kept = self.resumed
        self._session = session
        self._first_segment = session  # this session's first: ``next_segment`` adds more
        self._rows: IO[bytes] | None = None
        self._failed: IO[bytes] | None = None
        self._rejected: IO[bytes] | None = None
        self.keep_journal = False  # batch mode: batches it names are still open at the provider
        self._syncing: asyncio.Future[None] | None = None  # the last saved batch's fsync

    # --- opening -----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        fingerprint: Fingerprint,
        num_records: int,
        *,
        fresh: bool,
        fresh_hint: str,
        candidates: int | None = None,
    ) -> Checkpoint:
        """Lock the checkpoint, then start it, or resume it when it matches. A gated run
        (SPEC §21) gives ``candidates``, its cap: ``num_records`` counts kept rows, and row
        indices are candidates' (any number below the cap, or an earlier, higher cap).

        Raises ``RunSetupError`` when another run holds it, or when it was made by a
        different configuration (naming what changed and ``fresh_hint``)."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock = (directory / LOCK_FILE).open("a+", encoding="utf-8")
        except OSError as exc:
            raise RunSetupError(f"cannot create the checkpoint {directory}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            lock.close()
            raise RunSetupError(
                f"another genwire run (PID {holder}) is writing the same output; its checkpoint {directory} is "
                "locked. Wait for it to finish, or give this run another output (-o)"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            return cls._start(
                directory, lock, fingerprint, num_records, fresh=fresh, fresh_hint=fresh_hint, candidates=candidates
            )
        except BaseException:
            lock.close()
            raise

    @classmethod
    def _start(
        cls,
        directory: Path,
        lock: IO[str],
        fingerprint: Fingerprint,
        n: int,
        *,
        fresh: bool,
        fresh_hint: str,
        candidates: int | None,
    ) -> Checkpoint:
        meta_path = directory / META_FILE
        if fresh:
            for path in directory.iterdir():
                # Batch mode's journal stays: the batches it lists are still running (and
                # billed) at the provider; a --batch run collects what it asks for again
                # from them instead of paying twice, and `genwire batches` still sees them.
                if path.name in (LOCK_FILE, JOURNAL_FILE):
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        meta = cls._read_meta(meta_path, fresh_hint) if meta_path.exists() else None
        if meta is None and session_files(directory, ROWS_FILE):
            # meta.json is written before any row: rows without it come from an unknown config.
            raise RunSetupError(
                f"the checkpoint {directory} holds rows but no {META_FILE} (its fingerprint), so nothing says "
                f"which configuration made them; {fresh_hint} discards it"
            )
        if meta is not None:
            problems = changes(meta["fingerprint"], fingerprint)
            if n < meta["num_records"]:
                problems.append(
                    f"num_records is {n}, fewer than the {meta['num_records']} rows the checkpoint was made for"
                )
            if problems:
                raise RunSetupError(
                    f"the checkpoint {directory} was made by a different configuration:\n"
                    + "\n".join(f"  {p}" for p in problems)
                    + f"\nrerun with the earlier configuration to resume it, or {fresh_hint} to discard it"
                )
        _write_json_atomically(meta_path, {"version": FORMAT_VERSION, "fingerprint": fingerprint, "num_records": n})
        for path in stray_files(directory):
            log.warning(
                "ignoring %s in the checkpoint: genwire does not write such a file there (the run does not read it)",
                path,
            )
        segments = session_files(directory, ROWS_FILE)
        rejected_segments = session_files(directory, REJECTED_FILE)
        # A gated run's row indices are candidates': any below the index limit (a cap lowered
        # since must not make the rows above it look damaged).
        limit = n if candidates is None else MAX_NUM_RECORDS
        try:
            done = read_rows(segments, limit)
            rejected = read_rejected(rejected_segments, limit, done)
        except OSError as exc:  # unreadable or read-only: fixing that keeps every row
            raise RunSetupError(
                f"cannot read or repair the checkpoint file {exc.filename or directory}: {exc.strerror or exc}; "
                f"fix its permissions to resume, or {fresh_hint} to discard it"
            ) from None
        failed = session_files(directory, FAILED_FILE)
        last = max((segment_number(p) for p in [*segments, *failed, *rejected_segments]), default=0)
        return cls(directory, lock, n, done, last + 1, rejected, candidates)

    @staticmethod
    def _read_meta(path: Path, fresh_hint: str) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            if meta.get("version") != FORMAT_VERSION:
                raise ValueError(f"format version {meta.get('version')!r}, this genwire writes {FORMAT_VERSION}")
            if not isinstance(meta.get("fingerprint"), dict) or type(meta.get("num_records")) is not int:
                raise ValueError("fingerprint or num_records missing")
        except (OSError, ValueError, AttributeError) as exc:
            raise RunSetupError(
                f"the checkpoint {path.parent} cannot be read ({exc}); {fresh_hint} discards it"
            ) from None
        return meta

    # --- a session ---------------------------------------------------------------------

    def pending(self) -> Iterator[int]:
        """Row indices still to generate, in order: never reached, or failed before (in a
        gated run, candidates below the cap neither kept nor rejected)."""
        if self.candidates is None:
            return self._done.missing(self.num_records)
        rejected = self.rejections.done
        return (i for i in self._done.missing(self.candidates) if i not in rejected)

    def is_done(self, index: int) -> bool:
        """Whether row ``index`` is kept (in some rows-* file)."""
        return index in self._done

    def append(
        self,
        rows: list[tuple[int, bytes]],
        failures: list[bytes],
        rejected: Sequence[tuple[int, str, bytes]] = (),
    ) -> None:
        """One batch: encoded row lines, failure lines and (a gated run) the lines of the
        candidates its gates rejected, with their index and gate, flushed to the disk
        before returning (a kill after this cannot lose them)."""
        _sync(self._write(rows, failures, rejected))

    async def save(
        self,
        rows: list[tuple[int, bytes]],
        failures: list[bytes],
        rejected: Sequence[tuple[int, str, bytes]] = (),
    ) -> None:
        """``append`` for the run's event loop. The batch is written to the OS before this
        returns (a kill -9 or Ctrl-C after it cannot lose it); its fsync (milliseconds,
        mostly waiting for the disk) runs in a thread meanwhile, and the next ``save``
        waits for it before writing: a batch is on the disk before the next is written,
        and the run's requests go on while it gets there."""
        await self.synced()
        descriptors = self._write(rows, failures, rejected)
        self._syncing = asyncio.get_running_loop().run_in_executor(None, _sync, descriptors)

    async def synced(self) -> None:
        """The last ``save``'s batch is on the disk."""
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            await syncing

    def _write(
        self,
        rows: list[tuple[int, bytes]],
        failures: list[bytes],
        rejected: Sequence[tuple[int, str, bytes]],
    ) -> list[int]:
        """The batch written to the OS (a kill -9 after this cannot lose it; power loss
        can, until the fsync) and counted; returns the descriptors to fsync: duplicates,
        which ``_sync`` closes (closing the checkpoint meanwhile cannot pull them away)."""
        if self._rows is None or self._failed is None or self._rejected is None:
            self._rows = (self.directory / f"rows-{self._session:04d}.jsonl").open("ab")
            self._failed = (self.directory / f"failed-{self._session:04d}.jsonl").open("ab")
            self._rejected = (self.directory / f"rejected-{self._session:04d}.jsonl").open("ab")
        written = (
            (self._rows, [line for _, line in rows]),
            (self._failed, failures),
            (self._rejected, [line for _, _, line in rejected]),
        )
        unsynced = []
        for handle, lines in written:
            if lines:
                handle.write(b"".join(lines))
                handle.flush()
                unsynced.append(os.dup(handle.fileno()))
        for index, _ in rows:
            self._done.add(index)
        for index, gate, _ in rejected:
            self.rejections.add(index, gate)
        self.kept += len(rows)
        return unsynced

    def rejected(self) -> Iterator[dict[str, Any]]:
        """Every rejected candidate's record, in candidate order, from all sessions' files."""
        self._flush()
        streams = [json_lines(p) for p in session_files(self.directory, REJECTED_FILE)]
        return heapq.merge(*streams, key=lambda record: int(record["candidate"]))

    def rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every done row, in index order, streamed from all sessions' files."""
        self._flush()
        streams = [((r["i"], r["row"]) for r in json_lines(p)) for p in session_files(self.directory, ROWS_FILE)]
        last = -1
        for index, row in heapq.merge(*streams, key=lambda item: item[0]):
            if index != last:  # defensive: a row in two files is written once
                yield index, row
                last = index

    def failed_before(self) -> set[int]:
        """Row indices an earlier session tried and that failed (not done since): this
        session retries them. A line that cannot be read is skipped (its row is then
        judged as a new one)."""
        indices: set[int] = set()
        for path in session_files(self.directory, FAILED_FILE):
            if segment_number(path) >= self._session:
                continue
            with path.open("rb") as handle:
                for line in handle:
                    try:
                        index = json.loads(line).get("row")
                    except (ValueError, AttributeError):
                        continue
                    if type(index) is int and index not in self._done:
                        indices.add(index)
        return indices

    def failures(self) -> Iterator[dict[str, Any]]:
        """This session's failure records, in row order, over its segments: a row's latest,
        unless a later segment made it (kept or rejected)."""
        self._flush()
        paths = [p for p in session_files(self.directory, FAILED_FILE) if segment_number(p) >= self._first_segment]
        if len(paths) == 1:  # a session in one segment (nearly every one): its file as it is
            yield from json_lines(paths[0])
            return
        streams = [((int(r["row"]), n, r) for r in json_lines(path)) for n, path in enumerate(paths)]
        rejected = self.rejections.done
        merged = heapq.merge(*streams, key=lambda item: (item[0], item[1]))
        for row, records in itertools.groupby(merged, key=lambda item: item[0]):
            *_, (_, _, latest) = records
            if row not in self._done and row not in rejected:
                yield latest

    # --- ending ------------------------------------------------------------------------

    def _flush(self) -> None:
        for handle in (self._rows, self._failed, self._rejected):
            if handle is not None and not handle.closed:
                handle.flush()

    async def next_segment(self) -> None:
        """Write what comes next to files of their own, as a new session would: each
        file holds its rows in index order (``rows`` merges them), and a session that
        generates its failed candidates again writes them below rows already written."""
        await self.synced()
        for handle in (self._rows, self._failed, self._rejected):
            if handle is not None:
                handle.close()
        self._rows = self._failed = self._rejected = None
        self._session += 1

    def close(self) -> None:
        """Close the files and release the lock; the checkpoint stays for a resume."""
        for handle in (self._rows, self._failed, self._rejected):
            if handle is not None:
                handle.close()
        with contextlib.suppress(OSError):
            self._lock.close()

    def remove(self) -> None:
        """After the output is in place: the checkpoint has served its purpose."""
        self.close()
        if not self.keep_journal:
            shutil.rmtree(self.directory, ignore_errors=True)
            return
        for path in self.directory.iterdir():  # all but the journal of batches still open
            if path.name != JOURNAL_FILE:
                with contextlib.suppress(OSError):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _sync(descriptors: list[int]) -> None:
    """fsync and close ``descriptors`` (each a duplicate, its file written and flushed)."""
    for fd in descriptors:
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_json_atomically(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(value, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
