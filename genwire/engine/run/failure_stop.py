"""The failure-rate stop (SPEC §9 ``max_failure_rate``), judged as each row settles.

The sink counts the rows of the batches it wrote; this adds, while batches run, the rows
whose requests were sent and the rows that failed since (``providers.request_context``
reports both). When more of the rows under way or decided failed than the rate allows
(after ``MIN_ROWS_FOR_RATE`` decided rows), the run is *stopping*: no further request is
admitted (its row is dropped, as at the budget: a rerun makes it) and no batch starts.
With a 400 on every row that is at most ``MIN_ROWS_FOR_RATE`` plus the provider's
``max_concurrency`` requests, where judging whole batches in order sent five batches.

Rows a resumed run retries (failed in an earlier session) are left out, as the sink
leaves them out: rows that fail for good would stop every resume within its first rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = ["MIN_ROWS_FOR_RATE", "FailureStop", "above_rate"]

MIN_ROWS_FOR_RATE = 20  # don't stop early on the failure rate of a handful of rows


def above_rate(failed: int, decided: int, seen: int, max_failure_rate: float) -> bool:
    """The rule: ``failed`` of ``seen`` rows is more than the rate allows, once at least
    ``MIN_ROWS_FOR_RATE`` rows are ``decided`` (kept, failed or rejected)."""
    return decided >= MIN_ROWS_FOR_RATE and seen > 0 and failed / seen > max_failure_rate


class FailureStop:
    """The session's new rows: those the sink wrote (``done``, ``lost``) and those of the
    running batches (``under_way``: a request sent; ``failing``: failed since)."""

    def __init__(self, max_failure_rate: float, retried: Collection[int] = ()) -> None:
        self.max_failure_rate = max_failure_rate
        self.retried = retried  # failed in an earlier session: not judged in this one
        self.done = 0  # new rows written kept (or rejected by a gate): decided, not failed
        self.lost = 0  # new rows written failed
        self.under_way: set[int] = set()  # rows of running batches: bounded by the rows ahead
        self.failing: set[int] = set()
        self.stopping = False

    # providers.request_context.Admission: the requests and failures of the running batches.
    def sent(self, rows: tuple[int, ...]) -> bool:
        if self.stopping:
            return False
        retried = self.retried
        self.under_way.update(rows if not retried else (row for row in rows if row not in retried))
        return True

    def failed(self, rows: tuple[int, ...]) -> None:
        new = [row for row in rows if row not in self.retried]
        if new:
            self.failing.update(new)
            self.under_way.update(new)
            self.stopping = self.stopping or self.live_above()

    def live_above(self) -> bool:
        """The rule over every new row decided or under way (a row under way counts as
        not failed: the rate is never overstated by rows still to answer)."""
        failed = self.lost + len(self.failing)
        seen = self.done + self.lost + len(self.under_way)
        return above_rate(failed, self.done + failed, seen, self.max_failure_rate)

    # The sink: what it wrote, in row order.
    def wrote(self, indices: Iterable[int], done: int, lost: int) -> None:
        """A batch's rows are written: ``done`` new rows kept or rejected, ``lost`` failed."""
        self.done += done
        self.lost += lost
        if not self.under_way:  # no request sent (a cached rerun): nothing to forget
            return
        for index in indices:
            self.under_way.discard(index)
            self.failing.discard(index)

    def retrying(self, indices: Iterable[int]) -> None:
        """Failed rows are generated again: failed no more, until they fail again."""
        self.lost -= sum(1 for index in indices if index not in self.retried)

    def written_above(self) -> bool:
        """The rule over the rows written (what the stop's message reports)."""
        decided = self.done + self.lost
        return above_rate(self.lost, decided, decided, self.max_failure_rate)

    def reopen(self) -> None:
        """The rows written are not above the rate after all (rows answered from the cache
        or with no request to send were decided after the stop): requests go out again."""
        self.stopping = False
