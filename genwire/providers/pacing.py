"""Rate-aware gates: the provider's cap and pacing, and each model's brake on 429s.

* **Scope.** Hosted APIs (OpenAI, NVIDIA, LiteLLM model groups) limit *per model*, so a
  429 brakes only the model that got it (a ``ModelGate`` per model of the endpoint); the
  ``ProviderGate`` keeps ``max_concurrency`` over all the provider's models and the
  optional ``rate_limit`` pacing. A model that is braked holds no provider slot while
  it waits, so the other models' requests and probes go on as before.
* **Evidence before braking.** A lone 429 (bursts, a shared quota, a gateway hiccup)
  delays only the request that got it: it waits its ``Retry-After`` (or the backoff) on
  its own, holding no slot. The brake engages only while 429s *persist*: at least
  ``EVIDENCE_COUNT`` 429s among the model's answers of the last ``EVIDENCE_WINDOW_S``
  seconds, making up at least ``EVIDENCE_SHARE`` of them. 2 % stray 429s never get
  there (a share of 2 %), an endpoint at its limit gets there within a few answers
  (almost every request beyond the limit is refused, a share near 100 %).
* **The brake.** The model pauses until the ``Retry-After`` has passed (one pause, not
  every in-flight request retrying into the limit together), its concurrency halves
  (once per pause: a burst of 429s from one overload is one signal), and it learns a
  request rate: 90 % of the rate at which its requests succeeded before the pause,
  never from zero measured successes (then concurrency alone brakes) and never below one
  request per ``Retry-After`` (the floor). The rate is a token bucket of one second's
  worth that refills during the pause like the server's.
* **Recovery.** While requests succeed, concurrency grows by ``1/limit`` per success
  (about one slot per round) back to ``max_concurrency``, and the learned rate grows
  3 % a second until a persistent run of 429s corrects it again.
* **Pacing** (``rate_limit``): requests are spaced ``60/requests_per_minute`` seconds
  apart, so no minute holds more; tokens are kept in a 60-second log and a request waits
  until its estimate fits under ``tokens_per_minute``. The estimate (``estimate_tokens``)
  is corrected by the response's ``usage``.

Waiters queue FIFO at each gate; a request passes its model's gate, then the provider's
(one queue, the provider's, while its model's gate holds nothing back).

Kept whole (~430 lines): ``ProviderGate`` and its ``ModelGate``s are one admission path (a
request's ``Reservation`` spans both queues, and a release or a 429 updates both); the
contract above is theirs together.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from genwire.config.schema import RateLimitConfig
from genwire.providers.request_context import admit_request

T = TypeVar("T")

WINDOW_S = 60.0
CHARS_PER_TOKEN = 4  # OpenAI's rule of thumb for English; the response corrects it
EVIDENCE_WINDOW_S = 5.0  # answers a 429 is judged against
EVIDENCE_COUNT = 3  # 429s in that window before the brake engages...
EVIDENCE_SHARE = 0.2  # ...and their least share of the window's answers
LEARNED_SHARE = 0.9  # of the measured success rate, when braking
GROWTH_PER_S = 0.03  # the learned rate's growth while no brake comes
MEASURE_S = 10.0  # success rate measured over at most this long
MIN_WAIT_S = 0.1  # the floor's period when the server asks for (almost) no wait


def estimate_tokens(body: bytes, max_tokens: int) -> int:
    """Before a request: its prompt at ~4 characters a token (the JSON body's length,
    a slight overestimate), plus the completion budget it asks for."""
    return math.ceil(len(body) / CHARS_PER_TOKEN) + max_tokens


class _Line:
    """A FIFO of waiters at one gate. ``admit(now)`` either admits (returns the admission)
    or says how long to wait (a float; 0: until someone leaves). A waiter that cannot go
    yet goes back to the head of the line; a timer or a leaving request wakes it.

    ``room()`` says how many more the gate would admit now. A freed slot wakes one waiter,
    not more: the waiters already woken (``_woken``, not yet run) count against the room,
    and a newcomer queues behind them instead of taking the slot they were woken for (a
    16,000-request run woke waiters ~5 times per slot before; every wake that finds no room
    costs a trip of the waiter's whole coroutine chain)."""

    def __init__(self, room: Callable[[], int]) -> None:
        self._room = room
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._woken = 0  # woken waiters that have not run yet
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the waiters belong to
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._waiters)

    async def enter(self, admit: Callable[[float], T | float]) -> T:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # waiters and timers of an earlier event loop never run here
            self._waiters.clear()
            self._woken, self._timer, self._loop = 0, None, loop
        if not self._waiters and not self._woken:  # one event loop: nothing can interleave
            admitted = admit(time.monotonic())
            if not isinstance(admitted, float):
                return admitted
            self._wake_after(admitted)
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        while True:
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._woken -= 1
                    self.wake()  # it was our turn: pass it on
                raise
            self._woken -= 1
            try:
                admitted = admit(time.monotonic())
            except BaseException:  # refused (a stopping run): the room it was woken for goes to the next
                self.wake()
                raise
            if not isinstance(admitted, float):
                if self._waiters:
                    self.wake()  # room left beyond this slot (several freed at once): the next goes too
                return admitted
            # Not yet (a pause, the pacing, or another took the slot): first in line again.
            waiter = loop.create_future()
            self._waiters.appendleft(waiter)
            self._wake_after(admitted)

    def wake(self) -> None:
        """Wake as many waiters as the room holds beyond those already woken."""
        count = self._room() - self._woken
        waiters = self._waiters
        while count > 0 and waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._woken += 1
                count -= 1

    def _wake_after(self, delay: float) -> None:
        """Wake the head of the line after ``delay`` (0: when a slot frees, no timer)."""
        if delay <= 0:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self._timer is not None and self._timer.when() <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.wake()


class ModelGate:
    """One model of an endpoint: its adaptive concurrency, its pause and learned rate, and
    the evidence (its recent answers) that decides whether a 429 brakes it."""

    def __init__(self, max_concurrency: int, *, adaptive: bool) -> None:
        self.max_concurrency = max_concurrency
        self.adaptive = adaptive
        self.limit = float(max_concurrency)
        self.in_flight = 0
        self.paused_until = 0.0
        self.pauses = 0
        self.line = _Line(self._room)
        self._answers: deque[tuple[float, bool]] = deque()  # (when, was a 429), newest last
        self._limited = 0  # 429s among ``_answers``
        self._successes: deque[float] = deque()
        self._learned: float | None = None  # requests/s, set by a brake with successes to measure
        self._learned_tokens = 0.0
        self._learned_stamp = 0.0
        self._floor = 0.0
        self._measure_from = time.monotonic()
        self._measure_since: float | None = None  # a brake asked for a measurement

    @property
    def current(self) -> int:
        """Requests of this model that may be in flight now."""
        return max(1, int(self.limit))

    @property
    def learned_rate(self) -> float | None:
        return self._learned

    def _room(self) -> int:
        return self.current - self.in_flight

    def transparent(self, provider_cap: int) -> bool:
        """Whether this gate holds nothing back that a provider of ``provider_cap`` does
        not: no pause, no learned rate, its concurrency not below the cap, no waiter."""
        return (
            self._learned is None
            and self._measure_since is None
            and self.current >= provider_cap
            and not self.line
            and (self.pauses == 0 or self.paused_until <= time.monotonic())
        )

    def admit(self, now: float) -> ModelGate | float:
        wait = self.paused_until - now
        if wait > 0:
            return wait
        if self.in_flight >= self.current:
            return 0.0
        wait = self._rate_wait(now)
        if wait > 0:
            return wait
        self.in_flight += 1
        if self._learned is not None:
            self._learned_tokens -= 1
        return self

    def _rate_wait(self, now: float) -> float:
        if self._measure_since is not None:
            self._learn(now)
        rate = self._learned
        if rate is None:
            return 0.0
        dt = now - self._learned_stamp
        rate = self._learned = rate * (1 + GROWTH_PER_S) ** dt
        self._learned_tokens = min(max(1.0, rate), self._learned_tokens + dt * rate)
        self._learned_stamp = now
        return (1 - self._learned_tokens) / rate if self._learned_tokens < 1 else 0.0

    def leave(self, *, ok: bool | None) -> None:
        """A request gave its slot back: answered (``ok``), failed otherwise (False), or
        never sent (None: cancelled while waiting at the provider's gate)."""
        self.in_flight -= 1
        if ok is not None:
            now = time.monotonic()
            self._record(now, limited=False)
            if ok and self.adaptive:
                self._successes.append(now)
                while self._successes[0] < now - MEASURE_S:
                    self._successes.popleft()
                if self.limit < self.max_concurrency:
                    self.limit = min(float(self.max_concurrency), self.limit + 1.0 / self.limit)
        self.line.wake()

    def _record(self, now: float, *, limited: bool) -> None:
        answers = self._answers
        answers.append((now, limited))
        self._limited += limited
        while answers and answers[0][0] < now - EVIDENCE_WINDOW_S:
            self._limited -= answers.popleft()[1]

    def persistent(self) -> bool:
        """Whether the 429s of the window are evidence of a limit, not strays."""
        return self._limited >= EVIDENCE_COUNT and self._limited >= EVIDENCE_SHARE * len(self._answers)

    def rate_limited(self, wait: float) -> bool:
        """A 429 answer (its slot given back). True: the model brakes and pauses ``wait``
        seconds; False: a stray, which only its own request waits out."""
        self.in_flight -= 1
        now = time.monotonic()
        self._record(now, limited=True)
        braked = False
        if self.adaptive and (now < self.paused_until or self.persistent()):
            braked = True
            self._engage(now, wait)
        self.line.wake()
        return braked

    def brake(self, wait: float) -> None:
        """The brake another process of the cluster engaged on this model (SPEC §22): it
        pauses, halves and learns here as if the 429s had been this process's own."""
        if self.adaptive:
            self._engage(time.monotonic(), wait)

    def _engage(self, now: float, wait: float) -> None:
        if now >= self.paused_until:  # the first 429 of this overload
            self.limit = max(1.0, self.limit / 2)
            self.pauses += 1
            # Measured when the pause ends: answers that were in flight still count.
            self._measure_since = max(self._measure_from, now - MEASURE_S)
            self._floor = 1.0 / max(wait, MIN_WAIT_S)
        self.paused_until = max(self.paused_until, now + wait)
        self._measure_from = self.paused_until

    def _learn(self, now: float) -> None:
        """After a pause: the rate at which requests succeeded before it, less 10 %."""
        since, self._measure_since = self._measure_since, None
        assert since is not None
        window = self.paused_until - since
        succeeded = sum(1 for t in self._successes if t >= since)
        if succeeded == 0 and self._learned is None:
            return  # nothing measured: a rate from zero successes would let nothing through
        # A window under a second is too short to measure: step down from the rate we had.
        short = window < 1.0 and self._learned is not None
        measured = self._learned if short and self._learned is not None else succeeded / max(1.0, window)
        self._learned = max(self._floor, LEARNED_SHARE * measured)
        self._learned_stamp = now
        # Full: the server's bucket refilled during the pause too, so the pause costs little.
        self._learned_tokens = max(1.0, self._learned)


class Reservation:
    """A request's places at both gates; ``tokens`` is its entry in the token log."""

    __slots__ = ("model", "stamp", "tokens")

    def __init__(self, stamp: float, tokens: int, model: ModelGate) -> None:
        self.stamp = stamp
        self.tokens = tokens
        self.model = model


class ProviderGate:
    """A provider's ``max_concurrency`` over all its models, its ``rate_limit`` pacing,
    and one ``ModelGate`` per model it serves."""

    def __init__(self, max_concurrency: int, rate_limit: RateLimitConfig | None, *, adaptive: bool) -> None:
        self.max_concurrency = max_concurrency
        self.adaptive = adaptive
        self.in_flight = 0
        # Answers whose slot stays taken after they came, until they are on the driver's disk
        # (a Ray worker's: ``engine.cluster.holds``), so paid-but-not-stored stays under the cap.
        self.held = 0
        self.peak_in_flight = 0
        self.models: dict[str, ModelGate] = {}
        # Told (model, wait) when one of its models brakes on its own 429s: a Ray worker
        # passes it to the other workers (SPEC §22), whose gates then ``brake`` it too.
        self.on_brake: Callable[[str, float], None] | None = None
        rpm = rate_limit.requests_per_minute if rate_limit else None
        self._interval = WINDOW_S / rpm if rpm else 0.0
        self._tpm = rate_limit.tokens_per_minute if rate_limit else None
        self._next_start = 0.0
        self._tokens: deque[Reservation] = deque()
        self._line = _Line(lambda: self.max_concurrency - self.in_flight - self.held)

    def model(self, name: str) -> ModelGate:
        gate = self.models.get(name)
        if gate is None:
            gate = self.models[name] = ModelGate(self.max_concurrency, adaptive=self.adaptive)
        return gate

    @property
    def current(self) -> int:
        """Requests that may be in flight now over all models (at most the cap)."""
        if not self.models:
            return self.max_concurrency
        return min(self.max_concurrency, sum(g.current for g in self.models.values()))

    @property
    def pauses(self) -> int:
        return sum(g.pauses for g in self.models.values())

    @property
    def waiting(self) -> int:
        """Requests queued at either gate (not those waiting out a stray 429 on their own)."""
        return len(self._line) + sum(len(g.line) for g in self.models.values())

    async def acquire(self, model: str, tokens: int = 0) -> Reservation:
        """Wait for the model's gate (its pause, rate and concurrency), then the provider's
        (cap and pacing), each in FIFO order.

        One queue while the model's gate cannot hold anything back (never braked, its
        concurrency at least the provider's cap, nobody waiting at it): the request
        waits at the provider's gate alone, and the model's gate admits it there, when
        it gets its provider slot. Queuing at both made each request of a saturated run
        wait twice (a resume of its whole coroutine chain each). A model braked while
        its requests queued there sends them back to its own gate, holding no slot."""
        gate = self.model(model)
        if gate.transparent(self.max_concurrency):
            reservation = await self._line.enter(lambda now: self._admit_both(now, tokens, gate))
            if reservation is not None:
                return reservation
        await gate.line.enter(gate.admit)
        try:
            return await self._line.enter(lambda now: self._admit(now, tokens, gate))
        except BaseException:
            gate.leave(ok=None)
            raise

    def _admit_both(self, now: float, tokens: int, gate: ModelGate) -> Reservation | float | None:
        """The provider's admission, then the model's (None: the model holds it back now)."""
        if self.in_flight + self.held >= self.max_concurrency:
            return 0.0
        wait = self._pacing_wait(now, tokens)
        if wait > 0:
            return wait
        admit_request()  # a stopping run sends nothing more: RunStopping, with no slot or pace taken
        if isinstance(gate.admit(now), float):
            return None  # braked meanwhile: to the model's own gate
        return self._take(now, tokens, gate)

    def _admit(self, now: float, tokens: int, gate: ModelGate) -> Reservation | float:
        if self.in_flight + self.held >= self.max_concurrency:
            return 0.0
        wait = self._pacing_wait(now, tokens)
        if wait > 0:
            return wait
        admit_request()
        return self._take(now, tokens, gate)

    def _take(self, now: float, tokens: int, gate: ModelGate) -> Reservation:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self._next_start = max(now, self._next_start) + self._interval
        reservation = Reservation(now, tokens, gate)
        if self._tpm is not None:
            self._tokens.append(reservation)
        return reservation

    def _pacing_wait(self, now: float, tokens: int) -> float:
        wait = self._next_start - now if self._interval else 0.0
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

    def release(self, reservation: Reservation, *, tokens: int | None, ok: bool | None, held: bool = False) -> None:
        """After a response other than a 429 (``ok``), or a request cancelled before its
        answer (None): ``tokens`` it reported (None: keep the estimate). ``held``: the
        provider's slot stays taken until ``unhold`` (the model's is given back now)."""
        if tokens is not None:
            reservation.tokens = tokens
        if held:
            self.in_flight -= 1
            self.held += 1  # no wake: the slot passes from the request to its answer
        else:
            self._leave()
        reservation.model.leave(ok=ok)

    def unhold(self) -> None:
        """A held answer is stored (or will never be): its slot is free."""
        self.held -= 1
        self._line.wake()

    def rate_limited(self, reservation: Reservation, wait: float) -> bool:
        """After a 429: True if its model now brakes (pausing ``wait`` seconds), False if
        the 429 was a stray that only its own request waits out."""
        self._leave()
        gate = reservation.model
        pauses = gate.pauses
        braked = gate.rate_limited(wait)
        if gate.pauses > pauses and self.on_brake is not None:  # a new overload: once, not per 429
            self.on_brake(next(name for name, g in self.models.items() if g is gate), wait)
        return braked

    def brake(self, model: str, wait: float) -> None:
        """Another process of the cluster braked ``model`` (its ``on_brake``)."""
        self.model(model).brake(wait)

    def _leave(self) -> None:
        self.in_flight -= 1
        self._line.wake()
