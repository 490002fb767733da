"""Where batch results go, in row order: the output file, the errors file, the counts,
the progress bar, and the failure-rate stop. Commit renames both files into place;
abort leaves no partial output."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from genwire.engine.batches import BatchResult
from genwire.engine.writers import JsonlWriter, errors_path, open_writer
from genwire.errors import RunError

MIN_ROWS_FOR_RATE = 20  # don't stop on the failure rate of a handful of rows


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def advance(self, done: int, failed: int) -> None: ...

    def stop(self) -> None: ...


class OutputSink:
    def __init__(
        self, target: Path, columns: list[str], *, total: int, max_failure_rate: float, progress: Progress | None
    ) -> None:
        self.target = target
        self.errors_target = errors_path(target)
        self.max_failure_rate = max_failure_rate
        self.progress = progress
        self.written = 0
        self.failed = 0
        self._rows = open_writer(target, columns)
        self._errors = JsonlWriter(self.errors_target, [])
        if progress is not None:
            progress.start(total)

    def add(self, result: BatchResult) -> None:
        self._rows.write(result.rows)
        self._errors.write(result.failures)
        self.written += len(result.rows)
        self.failed += len(result.failures)
        if self.progress is not None:
            self.progress.advance(len(result.rows), len(result.failures))
        processed = self.written + self.failed
        if processed >= MIN_ROWS_FOR_RATE and self.failed / processed > self.max_failure_rate:
            raise RunError(
                f"stopped after {processed} rows: {self.failed} failed ({self.failed / processed:.0%}), above "
                f"max_failure_rate {self.max_failure_rate:.0%}; failed rows are in {self.errors_target}"
            )

    def commit(self) -> None:
        self._stop_progress()
        self._rows.commit()
        if self.failed:
            self._errors.commit()
        else:
            self._errors.abort()
            self.errors_target.unlink(missing_ok=True)  # a stale errors file from an earlier run would mislead

    def abort(self, exc: BaseException) -> None:
        self._stop_progress()
        self._rows.abort()
        if isinstance(exc, RunError) and self.failed:
            self._errors.commit()  # keep the evidence of why the run stopped
        else:
            self._errors.abort()

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
