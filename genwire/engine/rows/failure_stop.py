"""The failure-rate stop (SPEC §9 ``max_failure_rate``), judged as each row settles: the one
judge every engine feeds.

Rows are counted as they settle, not only as batches are written: each request is admitted
at the provider's gate (``providers.request_context.admit_request``, the path the budget's
refusal takes too) and each row block that fails reports its rows. When more of the rows
under way or decided failed than the rate allows (after ``MIN_ROWS_FOR_RATE`` decided
rows), the judge is *stopping*: no further request is admitted (its row is dropped, as at
the budget: a rerun makes it) and no batch starts. With a 400 on every row that is at most
``MIN_ROWS_FOR_RATE`` plus the provider's ``max_concurrency`` requests, where judging whole
batches in order sent five batches.

Who feeds it:

* The local engine (gated or not): the session's judge admits every request; the sink tells
  it each batch written (``settled``), in row order.
* Ray: each worker holds a judge of its own, fed by the rows it settles (a round trip to the
  driver per request, or a verdict that waits for a drain, would make the bound a race):
  each worker stops within ``MIN_ROWS_FOR_RATE`` plus its share of ``max_concurrency``, so the
  cluster within ``workers x MIN_ROWS_FOR_RATE + max_concurrency``. A worker that stops
  tells the others (``halt``, as a brake is passed on) and the driver (its batches say so),
  whose session judge then stops too; the driver judges the written rows as locally.

Rows a resumed run retries (failed in an earlier session) are left out, as the sink leaves
them out: rows that fail for good would stop every resume within its first rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable

__all__ = ["MIN_ROWS_FOR_RATE", "FailureStop", "above_rate"]

MIN_ROWS_FOR_RATE = 20  # don't stop early on the failure rate of a handful of rows


def above_rate(failed: int, decided: int, seen: int, max_failure_rate: float) -> bool:
    """The rule: ``failed`` of ``seen`` rows is more than the rate allows, once at least
    ``MIN_ROWS_FOR_RATE`` rows are ``decided`` (kept, failed or rejected)."""
    return decided >= MIN_ROWS_FOR_RATE and seen > 0 and failed / seen > max_failure_rate


class FailureStop:
    """The new rows of a session (or of a Ray worker): those settled (``done``, ``lost``)
    and those of the running batches (``under_way``: a request sent; ``failing``: failed since)."""

    def __init__(self, max_failure_rate: float, retried: Collection[int] = ()) -> None:
        self.max_failure_rate = max_failure_rate
        self.retried = retried  # failed in an earlier session: not judged in this one
        self.done = 0  # new rows settled kept (or rejected by a gate): decided, not failed
        self.lost = 0  # new rows settled failed
        self.under_way: set[int] = set()  # rows of running batches: bounded by the rows ahead
        self.failing: set[int] = set()
        self.stopping = False
        self.on_stop: Callable[[], None] | None = None  # told once, as this judge finds the rate passed

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
            if not self.stopping and self.live_above():
                self.stopping = True
                if self.on_stop is not None:
                    self.on_stop()

    def live_above(self) -> bool:
        """The rule over every new row decided or under way (a row under way counts as
        not failed: the rate is never overstated by rows still to answer)."""
        failed = self.lost + len(self.failing)
        seen = self.done + self.lost + len(self.under_way)
        return above_rate(failed, self.done + failed, seen, self.max_failure_rate)

    def halt(self) -> None:
        """Another judge of the run (a Ray worker's) found the rate passed: stop sending too."""
        self.stopping = True

    # What settled: the sink's batches written, in row order, or a Ray worker's batches.
    def settled(self, kept: Collection[int], failed: Collection[int], rejected: Collection[int]) -> None:
        """A batch ended: rows ``kept``, ``failed`` and ``rejected`` by a gate (decided, not failed)."""
        retried = self.retried
        done = sum(1 for index in kept if index not in retried) + len(rejected)
        lost = sum(1 for index in failed if index not in retried)
        self.done += done
        self.lost += lost
        if not self.under_way:  # no request sent (a cached rerun): nothing to forget
            return
        for index in itertools.chain(kept, failed, rejected):
            self.under_way.discard(index)
            self.failing.discard(index)

    def retrying(self, indices: Iterable[int]) -> None:
        """Failed rows are generated again: failed no more, until they fail again."""
        self.lost -= sum(1 for index in indices if index not in self.retried)

    def written_above(self) -> bool:
        """The rule over the rows settled (what the stop's message reports)."""
        decided = self.done + self.lost
        return above_rate(self.lost, decided, decided, self.max_failure_rate)

    def reopen(self) -> None:
        """The rows written are not above the rate after all (rows answered from the cache
        or with no request to send were decided after the stop): requests go out again."""
        self.stopping = False
