"""One provider's gate: how many requests may be in flight, and when the next may go.

* **A 429 slows the whole provider.** ``rate_limited(wait)`` pauses every request of the
  provider — new ones and retries — until the server's ``Retry-After`` (or the backoff)
  has passed: one pause, not sixteen requests retrying on their own and hitting the
  limit together again.
* **Adaptive concurrency (AIMD).** The limit starts at ``max_concurrency`` (a first
  burst is what the user configured: the pre-flight fans out on purpose), halves on a 429
  (at most once per pause: a burst of 429s from one overload is one signal) and grows by
  ``1/limit`` per success (about one slot per round of requests) back toward it.
* **A learned rate.** Concurrency alone cannot hold a *rate* when answers are fast, so
  the first 429 of an overload also sets a request rate: 90 % of the rate at which
  requests succeeded since the last pause. It is a token bucket holding one second's
  worth (it refills during the pause, like the server's, so the pause costs little),
  and it grows 3 % a second until the next 429 corrects it.
* **Pacing** (``rate_limit``): requests are spaced ``60/requests_per_minute`` seconds
  apart, so no minute holds more; tokens are kept in a 60-second log and a request waits
  until its estimate fits under ``tokens_per_minute``. The estimate (``estimate_tokens``)
  is corrected by the response's ``usage``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

from genwire.config.schema import RateLimitConfig

WINDOW_S = 60.0
LEARNED_SHARE = 0.9  # of the measured success rate, after a 429
GROWTH_PER_S = 0.03  # the learned rate's growth while no 429 comes
MEASURE_S = 10.0  # success rate measured over at most this long
MIN_RATE = 0.05  # requests/s: one every 20 s at worst
CHARS_PER_TOKEN = 4  # OpenAI's rule of thumb for English; the response corrects it


def estimate_tokens(body: bytes, max_tokens: int) -> int:
    """Before a request: its prompt at ~4 characters a token (the JSON body's length,
    a slight overestimate), plus the completion budget it asks for."""
    return math.ceil(len(body) / CHARS_PER_TOKEN) + max_tokens


class Reservation:
    """A request's place in the token log; ``settle`` replaces the estimate."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, stamp: float, tokens: int) -> None:
        self.stamp = stamp
        self.tokens = tokens


class ProviderGate:
    def __init__(self, max_concurrency: int, rate_limit: RateLimitConfig | None, *, adaptive: bool) -> None:
        self.max_concurrency = max_concurrency
        self.adaptive = adaptive
        self.limit = float(max_concurrency)
        self.in_flight = 0
        self.peak_in_flight = 0
        self.paused_until = 0.0
        self.pauses = 0
        rpm = rate_limit.requests_per_minute if rate_limit else None
        self._interval = WINDOW_S / rpm if rpm else 0.0
        self._tpm = rate_limit.tokens_per_minute if rate_limit else None
        self._next_start = 0.0
        self._tokens: deque[Reservation] = deque()
        self._learned: float | None = None  # requests/s, set by the first 429
        self._learned_tokens = 0.0
        self._learned_stamp = 0.0
        self._successes: deque[float] = deque()
        self._measure_from = time.monotonic()
        self._measure_since: float | None = None  # a 429 asked for a measurement
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    @property
    def current(self) -> int:
        """Requests that may be in flight now."""
        return max(1, int(self.limit))

    async def acquire(self, tokens: int = 0) -> Reservation:
        """Wait for a slot, the end of any pause, and the pacing; waiters go in FIFO order."""
        if not self._waiters:  # one event loop: nothing can interleave with this check
            admitted = self._try_admit(time.monotonic(), tokens)
            if isinstance(admitted, Reservation):
                return admitted
            self._wake_after(admitted)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        while True:
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake(1)  # it was our turn: pass it on
                raise
            admitted = self._try_admit(time.monotonic(), tokens)
            if isinstance(admitted, Reservation):
                return admitted
            # Not yet (a pause, the pacing, or another took the slot): first in line again.
            waiter = loop.create_future()
            self._waiters.appendleft(waiter)
            self._wake_after(admitted)

    def _wake(self, count: int) -> None:
        while count > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def _wake_after(self, delay: float) -> None:
        """Wake the head of the line after ``delay`` (0: when a slot frees, no timer)."""
        if delay <= 0:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self._timer_loop is not loop:  # a timer of an earlier event loop never fires here
            self._timer = None
        if self._timer is not None and self._timer.when() <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_loop = loop.call_at(due, self._on_timer), loop

    def _on_timer(self) -> None:
        self._timer = None
        self._wake(max(1, self.current - self.in_flight))

    def _try_admit(self, now: float, tokens: int) -> Reservation | float:
        """A reservation, or how long to wait (0: until a slot frees)."""
        wait = self.paused_until - now
        if wait > 0:
            return wait
        if self.in_flight >= self.current:
            return 0.0
        wait = self._pacing_wait(now, tokens)
        if wait > 0:
            return wait
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self._next_start = max(now, self._next_start) + self._interval
        if self._learned is not None:
            self._learned_tokens -= 1
        reservation = Reservation(now, tokens)
        if self._tpm is not None:
            self._tokens.append(reservation)
        return reservation

    def _pacing_wait(self, now: float, tokens: int) -> float:
        wait = self._next_start - now if self._interval else 0.0
        if self._measure_since is not None:
            self._learn(now)
        rate = self._learned
        if rate is not None:
            dt = now - self._learned_stamp
            rate = self._learned = rate * (1 + GROWTH_PER_S) ** dt + MIN_RATE * dt
            self._learned_tokens = min(max(1.0, rate), self._learned_tokens + dt * rate)
            self._learned_stamp = now
            if self._learned_tokens < 1:
                wait = max(wait, (1 - self._learned_tokens) / rate)
        if self._tpm is not None:
            log = self._tokens
            while log and log[0].stamp <= now - WINDOW_S:
                log.popleft()
            used = sum(r.tokens for r in log)
            # A request larger than the whole budget still goes, alone in its window.
            if log and used + tokens > self._tpm:
                excess = used + tokens - self._tpm
                for r in log:  # wait until enough of the oldest entries leave the window
                    excess -= r.tokens
                    if excess <= 0:
                        wait = max(wait, r.stamp + WINDOW_S - now)
                        break
        return wait

    def release(self, reservation: Reservation, *, tokens: int | None, ok: bool) -> None:
        """After a response: ``tokens`` it reported (None: keep the estimate)."""
        if tokens is not None:
            reservation.tokens = tokens
        self.in_flight -= 1
        if ok and self.adaptive:
            now = time.monotonic()
            self._successes.append(now)
            while self._successes[0] < now - MEASURE_S:
                self._successes.popleft()
            if self.limit < self.max_concurrency:
                self.limit = min(float(self.max_concurrency), self.limit + 1.0 / self.limit)
        # Wake as many as may go now, not every waiter (hundreds wait in a big run).
        self._wake(max(1, self.current - self.in_flight))

    def _learn(self, now: float) -> None:
        """After a pause: the rate at which requests succeeded before it, less 10 %."""
        since, self._measure_since = self._measure_since, None
        assert since is not None
        window = self.paused_until - since
        succeeded = sum(1 for t in self._successes if t >= since)
        # A window under a second is too short to measure: step down from the rate we had.
        measured = succeeded / max(1.0, window) if window >= 1.0 or self._learned is None else self._learned
        self._learned = max(MIN_RATE, LEARNED_SHARE * measured)
        self._learned_stamp = now
        # Full: the server's bucket refilled during the pause too, so the pause costs little.
        self._learned_tokens = max(1.0, self._learned)

    def rate_limited(self, wait: float) -> None:
        """A 429: hold every request back for ``wait`` seconds and shrink the limit."""
        if not self.adaptive:
            return
        now = time.monotonic()
        if now >= self.paused_until:  # the first 429 of this overload
            self.limit = max(1.0, self.limit / 2)
            self.pauses += 1
            # Measured when the pause ends: answers that were in flight still count.
            self._measure_since = max(self._measure_from, now - MEASURE_S)
        self.paused_until = max(self.paused_until, now + wait)
        self._measure_from = self.paused_until
