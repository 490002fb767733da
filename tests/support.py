"""Helpers several test modules share."""

from __future__ import annotations


class StopAfter:
    """A progress hook that stops the run after ``batches`` batches: an exception
    mid-run, as any crash would be."""

    class Stop(Exception):
        pass

    def __init__(self, batches: int) -> None:
        self.batches = batches

    def start(self, total: int, done: int = 0) -> None:
        pass

    def advance(self, done: int, failed: int, status: str = "") -> None:
        self.batches -= 1
        if self.batches <= 0:
            raise StopAfter.Stop

    def stop(self) -> None:
        pass
