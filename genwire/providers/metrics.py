"""What a run's model requests did, second by second (SPEC §19): the request side.

The run sets a ``RequestRecorder`` as the current one (``start_recording``); each HTTP attempt
of a model request, and each call of an embedded (local) model, goes through
``timed_attempt`` (in flight, latency bucket, outcome) and a request that gives up says
so with ``note_gave_up``. Outside a run (or with the recorder off) both cost one
context-variable read. Counters the clients keep anyway
(requests, retries, 429s, tokens, cache hits, batched lines: ``ModelUsage``) are not
recorded here: the engine reads their differences once a second (``engine.records.metrics``), so
a cache hit costs nothing more than it did.

Latency is bucketed on a log scale (``latency_bucket``): percentiles read from the
buckets are within one bucket's width (about 12 %), whatever the number of requests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TypeVar

from genwire.errors import ModelError
from genwire.providers.failures import AttemptFailure

__all__ = [
    "BUCKETS",
    "AliasSecond",
    "RequestRecorder",
    "bucket_bounds",
    "current_recorder",
    "latency_bucket",
    "note_gave_up",
    "outcome_of",
    "start_recording",
    "stop_recording",
    "timed_attempt",
]

T = TypeVar("T")

# Bucket i holds latencies in [FIRST_S * GROWTH**i, FIRST_S * GROWTH**(i+1)); bucket 0 also
# everything below FIRST_S, the last everything above (1 ms to ~22 minutes in 64 buckets).
FIRST_S = 0.001
GROWTH = 1.25
BUCKETS = 64
_LOG_GROWTH = math.log(GROWTH)


def latency_bucket(seconds: float) -> int:
    if seconds <= FIRST_S:
        return 0
    return min(int(math.log(seconds / FIRST_S) / _LOG_GROWTH), BUCKETS - 1)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The (low, high) seconds of a bucket."""
    return FIRST_S * GROWTH**bucket, FIRST_S * GROWTH ** (bucket + 1)


@dataclass(slots=True)
class AliasSecond:
    """One alias's attempts in one interval: sent, answered (ok or not), the most in
    flight at once, latency buckets of the answered, failed attempts by class and
    requests that gave up by class (``errors - gave_up`` were retried)."""

    sent: int = 0
    answered: int = 0
    peak_in_flight: int = 0
    latency: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    gave_up: dict[str, int] = field(default_factory=dict)


class RequestRecorder:
    """Per alias: attempts in flight now, and this interval's ``AliasSecond`` (taken, and
    started afresh, by ``take``)."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}
        self._now: dict[str, AliasSecond] = {}

    def _second(self, alias: str) -> AliasSecond:
        second = self._now.get(alias)
        if second is None:
            second = self._now[alias] = AliasSecond()
        return second

    def take(self) -> dict[str, AliasSecond]:
        """This interval's figures; the next starts with the attempts still in flight as its peak."""
        taken, self._now = self._now, {}
        for alias, count in self.in_flight.items():
            if count:
                self._second(alias).peak_in_flight = count
        return taken

    async def attempt(self, alias: str, attempt: Awaitable[T]) -> T:
        started = self.begin(alias)
        try:
            result = await attempt
        except BaseException as exc:
            self.end(alias, started, outcome_of(exc))
            raise
        self.end(alias, started, None)
        return result

    def begin(self, alias: str) -> float:
        """An attempt is sent; returns when (for ``end``). ``begin``/``end`` are ``attempt``
        for a client's own loop: no coroutine wrapped around the request, whose every
        resumption would pass through it."""
        second = self._second(alias)
        second.sent += 1
        flying = self.in_flight.get(alias, 0) + 1
        self.in_flight[alias] = flying
        if flying > second.peak_in_flight:
            second.peak_in_flight = flying
        return time.monotonic()

    def end(self, alias: str, started: float, outcome: str | None) -> None:
        """The attempt begun at ``started`` ended: answered (``outcome`` None), failed
        (its class or exception type) or ``CANCELLED`` (no answer: not counted as one)."""
        self.in_flight[alias] -= 1
        if outcome == CANCELLED:
            return
        second = self._second(alias)  # the interval may have turned meanwhile
        second.answered += 1
        bucket = latency_bucket(time.monotonic() - started)
        second.latency[bucket] = second.latency.get(bucket, 0) + 1
        if outcome is not None:
            second.errors[outcome] = second.errors.get(outcome, 0) + 1

    def gave_up(self, alias: str, error_class: str) -> None:
        second = self._second(alias)
        second.gave_up[error_class] = second.gave_up.get(error_class, 0) + 1

    def add(self, alias: str, other: AliasSecond) -> None:
        """Another process's figures (a Ray worker's), into this interval's."""
        second = self._second(alias)
        second.sent += other.sent
        second.answered += other.answered
        second.peak_in_flight = max(second.peak_in_flight, other.peak_in_flight)
        for bucket, count in other.latency.items():
            second.latency[bucket] = second.latency.get(bucket, 0) + count
        for mine, theirs in ((second.errors, other.errors), (second.gave_up, other.gave_up)):
            for error_class, count in theirs.items():
                mine[error_class] = mine.get(error_class, 0) + count


CANCELLED = "cancelled"


def outcome_of(error: BaseException) -> str:
    """An attempt's outcome when it raised: its failure class, the type of an unclassified
    exception, or ``CANCELLED`` (cancelled, interrupted: no answer)."""
    if isinstance(error, AttemptFailure | ModelError):  # ModelError: an embedded model's call
        return error.error_class.value
    if isinstance(error, Exception):
        return type(error).__name__
    return CANCELLED


_current: ContextVar[RequestRecorder | None] = ContextVar("genwire_request_recorder", default=None)


def current_recorder() -> RequestRecorder | None:
    """The run's recorder (None outside a run or with it off)."""
    return _current.get()


def start_recording(recorder: RequestRecorder) -> Token[RequestRecorder | None]:
    """From now on, requests of this task (and of the tasks it starts) are recorded."""
    return _current.set(recorder)


def stop_recording(token: Token[RequestRecorder | None]) -> None:
    _current.reset(token)


async def timed_attempt(alias: str, attempt: Awaitable[T]) -> T:
    """``await attempt``, recorded (in flight, latency, outcome) when a run records."""
    recorder = _current.get()
    if recorder is None:
        return await attempt
    return await recorder.attempt(alias, attempt)


def note_gave_up(alias: str, error_class: str) -> None:
    """A request failed for good (its retries, if any, are over)."""
    recorder = _current.get()
    if recorder is not None:
        recorder.gave_up(alias, error_class)
