"""Where batch results go, in row order: the checkpoint (every batch, on disk, before the
next), the counts, the progress bar and the failure-rate stop. ``finish`` streams the
checkpoint into the output and the errors file, each renamed into place atomically,
then removes the checkpoint. A run that does not finish keeps its checkpoint."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

from genwire.engine.records.batch_result import BatchResult, failure_record
from genwire.engine.records.checkpoint import Checkpoint
from genwire.engine.records.encoding import UnwritableCell, encode_failure, encode_row
from genwire.engine.records.writers import AtomicFile, WriteFailure, errors_path, open_writer
from genwire.engine.rows.failure_stop import FailureStop
from genwire.errors import RunStopped

T = TypeVar("T")


class Progress(Protocol):
    def start(self, total: int, done: int = 0) -> None: ...

    def advance(self, done: int, failed: int, status: str = "") -> None: ...

    def stop(self) -> None: ...


class OutputSink:
    def __init__(
        self,
        target: Path,
        columns: list[str],
        checkpoint: Checkpoint,
        *,
        max_failure_rate: float,
        progress: Progress | None,
        status: Callable[[], str] | None = None,
        wanted: int | None = None,
        failure_stop: FailureStop | None = None,
    ) -> None:
        """``wanted``: a gated run (SPEC §21) writes the ``wanted`` kept candidates of
        lowest index; the rejected candidates and the surplus go to the rejected file."""
        self.target = target
        self.wanted = wanted
        self.rejected = 0  # candidates a gate rejected in this session
        self.surplus = 0  # kept candidates past the wanted ones (known at finish)
        self.errors_target = errors_path(target)
        self.checkpoint = checkpoint
        self.columns = columns
        self.max_failure_rate = max_failure_rate
        self.progress = progress
        self.status = status  # e.g. "in flight 6/16", for the progress line
        self.resumed = checkpoint.resumed
        self.written = 0  # rows done in this session
        self.failed = 0  # rows failed in this session
        self.cached = 0  # answers served by the response cache in this session
        # The session's failure rate is judged on rows no session tried before (a resumed
        # run retries the earlier failures first; the whole run's rate is judged at the
        # end), and as rows settle, not only as batches are written: ``FailureStop``.
        self.failure_stop = failure_stop or FailureStop(max_failure_rate, checkpoint.failed_before())
        self.failed_here: set[int] = set()  # rows failed in this session: not made again in it
        if progress is not None:
            progress.start(checkpoint.num_records, min(checkpoint.resumed, checkpoint.num_records))

    @property
    def total(self) -> int:
        return self.checkpoint.num_records

    async def add(self, result: BatchResult) -> None:
        rows: list[tuple[int, bytes]] = []
        failures = [encode_failure(f) for f in result.failures]
        failed = [f["row"] for f in result.failures]
        for index, row in zip(result.indices, result.rows, strict=True):
            try:
                rows.append((index, encode_row(index, row)))
            except UnwritableCell as exc:
                failures.append(encode_failure(failure_record(index, row, exc.column, exc, "unwritable")))
                failed.append(index)
        rejected = [(int(r["candidate"]), str(r["gate"]), encode_failure(r)) for r in result.rejected]
        shown = max(0, min(len(rows), self.total - self.kept))  # a gated run's bar stops at the rows wanted
        await self.checkpoint.save(rows, failures, rejected)
        self.written += len(rows)
        self.failed += len(failures)
        self.rejected += len(rejected)
        self.cached += result.cached
        if self.progress is not None:
            self.progress.advance(shown, len(failures), self._status_text())
        stop = self.failure_stop
        self.failed_here.update(failed)
        stop.settled([index for index, _ in rows], failed, [r[0] for r in rejected])
        if not stop.stopping:  # stopping: the running batches send nothing more; judged once they are written
            self.stop_at_rate()

    def stop_at_rate(self) -> None:
        """Stop (``RunStopped``) if the new rows written failed above the rate."""
        stop = self.failure_stop
        processed, new_failed = stop.done + stop.lost, stop.lost
        if stop.written_above():
            again = self.failed - new_failed
            also = f", and {again} rows that had failed before failed again" if again else ""
            new = "new " if stop.retried else ""
            self._stop(f"stopped after {processed} {new}rows: {new_failed} failed ({new_failed / processed:.0%}){also}")

    def retrying(self, indices: Sequence[int]) -> None:
        """Rows that failed in this session are generated again (into a checkpoint
        segment of their own: ``Checkpoint.next_segment``): failed no more, until they
        fail again."""
        self.failed -= len(indices)
        self.failure_stop.retrying(indices)

    def refresh(self) -> None:
        """Redraw the status alone (batch mode: batches move while no row finishes)."""
        if self.progress is not None:
            self.progress.advance(0, 0, self._status_text())

    def _status_text(self) -> str:
        parts = [
            self.status() if self.status else "",
            f"{self.cached:,} cached" if self.cached else "",
            f"{self.rejected:,} rejected" if self.rejected else "",
        ]
        return ", ".join(p for p in parts if p)

    def finish(self, before_removal: Callable[[], T]) -> T:
        """All rows were tried: check the failure rate over the whole run, then write
        the output and the errors file, call ``before_removal`` (the run's report reads
        the checkpoint) and remove the checkpoint; returns what ``before_removal`` did."""
        self._stop_progress()
        writer = open_writer(self.target, self.columns)
        wanted = self.wanted
        rows = self.checkpoint.rows if wanted is None else lambda: itertools.islice(self.checkpoint.rows(), wanted)
        try:
            late = writer.write_all(rows)
        except BaseException:
            writer.abort()
            raise
        self.written -= len(late)
        self.failed += len(late)
        tried = self.total if wanted is None else self.kept + self.failed + self.rejected
        try:
            rate = self.failed / tried if tried else 0.0
            if (self.failed and rate > self.max_failure_rate) or self.kept == 0:
                # Every row failed at max_failure_rate 100 %: stopped at the rate (no row to write), not above it.
                where = "above" if rate > self.max_failure_rate else "at"
                self._stop(f"{self.failed} of {tried} rows failed ({rate:.0%})", late, where=where)
            if wanted is not None:
                from genwire.engine.gates.plan import write_rejected
                from genwire.engine.records.funnel import rejected_path

                self.surplus = write_rejected(self.checkpoint, wanted, rejected_path(self.target))
        except BaseException:
            writer.abort()
            raise
        if self.failed:
            self._write_errors(late)
        else:
            self.errors_target.unlink(missing_ok=True)  # a stale errors file from an earlier run would mislead
        writer.commit()
        outcome = before_removal()
        self.checkpoint.remove()
        return outcome

    @property
    def kept(self) -> int:
        return self.resumed + self.written

    @property
    def in_output(self) -> int:
        """Rows the output holds (a gated run's: the wanted ones, not the surplus)."""
        return self.kept if self.wanted is None else min(self.kept, self.wanted)

    def suspend(self) -> None:
        """The run ends unfinished (interrupt, error): the checkpoint stays for a resume."""
        self._stop_progress()
        self.checkpoint.close()

    def _stop(self, what: str, late: Sequence[WriteFailure] = (), *, where: str = "above") -> NoReturn:
        self._write_errors(late)
        raise RunStopped(
            f"{what}, {where} max_failure_rate {self.max_failure_rate:.0%}; failed rows are in "
            f"{self.errors_target}. {self.kept:,} of {self.total:,} rows are kept in {self.checkpoint.directory}; "
            "fix the cause and rerun the same command to resume",
            checkpoint=self.checkpoint.directory,
            kept=self.kept,
        )

    def _write_errors(self, late: Sequence[WriteFailure]) -> None:
        errors = AtomicFile(self.errors_target, binary=True)
        try:
            for record in self.checkpoint.failures():
                errors.handle.write(encode_failure(record))
            for f in late:
                errors.handle.write(
                    encode_failure(failure_record(f.index, f.row, f.column, ValueError(f.message), "unwritable"))
                )
        except BaseException:
            errors.abort()
            raise
        errors.commit()

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
