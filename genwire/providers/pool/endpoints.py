"""Endpoint pools (SPEC §17): one model alias served by several endpoints. This module: the
pool, its members and their figures; the handles a generator holds are ``handles``'.

The generator holds one handle (``PooledChatModel`` / ``PooledEmbeddingModel``); which
endpoint answers is the pool's choice:

* Routing: the healthy primary with the least in-flight work relative to its weight and
  its provider's current (adaptive, SPEC §10) concurrency; a member is never given more
  than that concurrency, so a request never queues behind a slow endpoint's slots while
  another has room. Fallbacks get requests only while no primary is healthy.
* Failover: a transient failure (unreachable, timeout, 5xx, a persistent 429) cools the
  member down (5 s, doubling to 5 min) and the request is sent again at once to another
  member; once the cooldown is over a single trial request decides; ``auth`` /
  ``not_found`` take the member out for the run. Only a request sent after a member's
  latest failure judges it (``PoolMember.epoch``): answers to requests already on their
  way do not end a cooldown. A request fails only when every member was tried (the last
  error is raised).
* The run starts from the pre-flight's verdicts (``EndpointPool.mark``): a member that
  failed its probe starts cooled down, or out.

Members are ordinary provider handles made with ``pool=<the pool's cache identity>``:
they share response-cache entries and hand failures back at once instead of retrying.
Like every handle, a pooled one holds only a route token: nothing leads from it to a
provider, a member or a key (``genwire.providers.routes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from genwire.errors import ErrorClass, ModelError
from genwire.providers.base import Attempts, attempt_log

__all__ = ["COOLDOWN_S", "MAX_COOLDOWN_S", "EndpointPool", "EndpointStats", "PoolMember"]

T = TypeVar("T")

COOLDOWN_S = 5.0  # the first cooldown of a failing member
MAX_COOLDOWN_S = 300.0  # doubling stops here
_OUT_CLASSES = frozenset({ErrorClass.AUTH, ErrorClass.NOT_FOUND})  # no trial can fix these
_LATENCIES_KEPT = 100_000  # per member: enough for percentiles of any run, bounded memory


@dataclass
class EndpointStats:
    """What one endpoint of a pool did: requests sent (HTTP attempts), calls that failed
    there, and the latency of the calls it answered (cache hits excluded)."""

    requests: int = 0
    failures: int = 0
    latencies: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        import statistics  # here: only a run's report reads it (start-up)

        lat = sorted(self.latencies)
        return {
            "requests": self.requests,
            "failures": self.failures,
            "latency_mean_s": round(statistics.fmean(lat), 4) if lat else None,
            "latency_p50_s": round(_percentile(lat, 0.50), 4) if lat else None,
            "latency_p95_s": round(_percentile(lat, 0.95), 4) if lat else None,
        }


def _percentile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class PoolMember:
    """One endpoint of a pool: its model handle, role, weight, capacity and health."""

    name: str
    provider: str  # its provider's name
    handle: Any
    role: Literal["primary", "fallback"]
    weight: float
    capacity: Callable[[], int]  # its provider's current concurrency
    in_flight: int = 0
    cooldown_s: float = 0.0  # 0: healthy; else the length of the current cooldown
    cooling_until: float = 0.0
    out: str | None = None  # why it is out for the run (auth / not_found)
    # Counts the failures that (re)started its cooldown: a request remembers the value at
    # its sending, and only a request sent after the latest failure may judge the member.
    epoch: int = 0
    sent: int = 0  # requests the pool gave it: breaks ties by weight (light load, one at a time)
    stats: EndpointStats = field(default_factory=EndpointStats)

    def healthy(self) -> bool:
        return self.out is None and self.cooldown_s == 0.0

    def on_trial(self, now: float) -> bool:
        """Its cooldown is over: one request at a time decides whether it is back."""
        return self.out is None and self.cooldown_s > 0 and now >= self.cooling_until

    def open(self, now: float) -> bool:
        """It would take a request now: healthy with room, or due for its trial."""
        if self.out is not None:
            return False
        return (self.healthy() and self.room() > 0) or (self.on_trial(now) and self.in_flight == 0)

    def room(self) -> int:
        return max(1, self.capacity()) - self.in_flight

    def load(self) -> tuple[float, float]:
        """In-flight work relative to weight and capacity; on a tie, requests given
        relative to weight (so one-at-a-time callers still follow the weights)."""
        return self.in_flight / (self.weight * max(1, self.capacity())), self.sent / self.weight

    def take(self) -> None:
        self.in_flight += 1
        self.sent += 1

    def failed(self, error_class: ErrorClass, epoch: int, now: float) -> None:
        """A request sent at ``epoch`` failed with ``error_class``: ``auth`` / ``not_found``
        take the member out; a transient class cools it down (5 s, doubling while it keeps
        failing its trials). A request sent before the latest failure says nothing new."""
        if error_class in _OUT_CLASSES:
            self.out = str(error_class)
            return
        if epoch != self.epoch:
            return
        self.epoch += 1
        if self.cooling_until <= now:  # not while a cooldown runs: one failure, one doubling
            self.cooldown_s = min(MAX_COOLDOWN_S, self.cooldown_s * 2 or COOLDOWN_S)
            self.cooling_until = now + self.cooldown_s

    def answered(self, epoch: int) -> None:
        """A request sent at ``epoch`` succeeded: the member is healthy again, unless the
        request was on its way before the member's latest failure (a flapping member's
        in-flight successes prove nothing about it now)."""
        if epoch == self.epoch:
            self.cooldown_s, self.cooling_until = 0.0, 0.0


class EndpointPool:
    """The members of one alias and the routing between them (not given to plugins)."""

    def __init__(self, alias: str, members: Sequence[PoolMember]) -> None:
        self.alias = alias
        self.members = list(members)
        # Requests waiting for a member with room, in arrival order: a released slot goes
        # to the first that can use it (no wake-up of every waiter on every release).
        self._waiters: deque[tuple[set[str], asyncio.Future[PoolMember | None]]] = deque()
        # Told (endpoint, error class) when a member's own failure takes it out for the run:
        # a Ray worker passes it to the other workers, whose pools ``mark`` it (SPEC §22).
        self.on_out: Callable[[str, str], None] | None = None

    def __repr__(self) -> str:
        return f"EndpointPool(alias={self.alias!r}, members={[m.name for m in self.members]!r})"

    def stats(self) -> dict[str, EndpointStats]:
        return {m.name: m.stats for m in self.members}

    @property
    def waiting(self) -> int:
        """Requests queued for a member's slot (the engine reads it as its providers' queue)."""
        return len(self._waiters)

    def _choose(self, tried: set[str], now: float) -> tuple[PoolMember | None, float | None]:
        """The member for the next attempt, or (None, seconds to wait: ``inf`` until a
        member is released) when the members this request may use are busy; (None, None)
        when there is none left to try."""
        left = [m for m in self.members if m.name not in tried and m.out is None]
        if not left:
            return None, None
        for role in ("primary", "fallback"):
            trial = [m for m in left if m.role == role and m.on_trial(now) and m.in_flight == 0]
            if trial:
                return trial[0], None
            healthy = [m for m in left if m.role == role and m.healthy()]
            if healthy or any(m.role == role and m.healthy() for m in self.members):
                # A healthy member of this role exists: lower roles wait for room here.
                ready = [m for m in healthy if m.room() > 0]
                if ready:
                    return min(ready, key=PoolMember.load), None
                if healthy:
                    return None, self._next_trial(left, now)
        # Nothing healthy left to this request: the member whose cooldown ends first
        # gets it now (a row fails only once every endpoint was tried).
        cooling = [m for m in left if m.in_flight == 0 or m.room() > 0]
        if cooling:
            return min(cooling, key=lambda m: (m.role != "primary", m.cooling_until)), None
        return None, self._next_trial(left, now)

    @staticmethod
    def _next_trial(members: Sequence[PoolMember], now: float) -> float:
        ends = [m.cooling_until - now for m in members if m.cooldown_s > 0 and m.cooling_until > now]
        return max(0.01, min(ends)) if ends else math.inf

    async def _acquire(self, tried: set[str]) -> PoolMember | None:
        """A member for this request's next attempt; a request failing over (``tried``)
        goes to the head of the line: it has waited its turn once already."""
        while True:
            member, wait = self._choose(tried, time.monotonic())
            if member is not None:
                member.take()
                return member
            if wait is None:
                return None
            waiter: asyncio.Future[PoolMember | None] = asyncio.get_running_loop().create_future()
            entry = (tried, waiter)
            if tried:
                self._waiters.appendleft(entry)
            else:
                self._waiters.append(entry)
            try:
                # Bounded by the next trial: a cooled-down member may take this request then.
                return await asyncio.wait_for(waiter, None if wait == math.inf else wait)
            except TimeoutError:
                continue
            finally:
                if not waiter.done() or waiter.cancelled():  # not handed a member: leave the line
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(entry)

    def _dispatch(self, everyone: bool) -> None:
        """Hand the room members have now to the waiting requests, first come first
        served. ``everyone``: a member's health changed, so every waiter is looked at
        (one may have no member left to try); else only while some member has room."""
        now = time.monotonic()
        skipped = []
        while self._waiters:
            if not everyone and not any(m.open(now) for m in self.members):
                break  # O(1) per release: a cooling member's room is no reason to scan the line
            entry = self._waiters.popleft()
            tried, waiter = entry
            if waiter.done():
                continue
            member, wait = self._choose(tried, now)
            if member is None and wait is not None:
                skipped.append(entry)  # nothing for this one yet (e.g. it tried the member with room)
                continue
            if member is not None:
                member.take()
            waiter.set_result(member)
        self._waiters.extendleft(reversed(skipped))

    def _release(self, member: PoolMember, epoch: int, error: ModelError | None, ok: bool) -> None:
        member.in_flight -= 1
        if ok:
            member.answered(epoch)
        elif error is not None:
            was_out = member.out
            member.failed(error.error_class, epoch, time.monotonic())
            if member.out is not None and was_out is None and self.on_out is not None:
                self.on_out(member.name, member.out)
        self._dispatch(everyone=not ok and error is not None)

    def mark(self, verdicts: Mapping[str, str]) -> None:
        """Start the run from what is known of the members (``{endpoint: error class}``,
        e.g. the pre-flight's failed checks): ``auth`` / ``not_found`` are out, any other
        failure cools the member down, so the first wave of requests does not go to it.
        Plain strings: a process that did not probe (a Ray worker) can be told the same."""
        now = time.monotonic()
        for member in self.members:
            found = verdicts.get(member.name)
            if found is not None:
                member.failed(_error_class(found), member.epoch, now)
        self._dispatch(everyone=True)

    def verdicts(self) -> dict[str, str]:
        """The members out for the run, with why (``mark``'s input): shareable as it is."""
        return {m.name: m.out for m in self.members if m.out is not None}

    async def call(self, send: Callable[[Any], Awaitable[T]]) -> T:
        """``send(member_handle)`` on the chosen member, failing over as the module says."""
        tried: set[str] = set()
        last: ModelError | None = None
        while True:
            member = await self._acquire(tried)
            if member is None:
                assert last is not None  # the first attempt always finds a member
                raise last
            epoch = member.epoch
            attempts = Attempts()
            outer = attempt_log.get()
            token = attempt_log.set(attempts)
            started = time.perf_counter()
            try:
                result = await send(member.handle)
            except ModelError as exc:
                member.stats.failures += 1
                transient_or_out = exc.error_class.transient or exc.error_class in _OUT_CLASSES
                self._release(member, epoch, exc if transient_or_out else None, ok=False)
                if not transient_or_out:
                    raise  # the request itself (400, a bad answer): another endpoint would say the same
                tried.add(member.name)
                last = ModelError(
                    exc.error_class, f"endpoint {member.name}: {exc.message}", target=self.alias, attempts=exc.attempts
                )
                continue
            except BaseException:
                self._release(member, epoch, None, ok=False)
                raise
            finally:
                attempt_log.reset(token)
                member.stats.requests += attempts.count
                if outer is not None:
                    outer.count += attempts.count
            if attempts.count and len(member.stats.latencies) < _LATENCIES_KEPT:
                member.stats.latencies.append(time.perf_counter() - started)
            self._release(member, epoch, None, ok=True)
            return result


def _error_class(name: str) -> ErrorClass:
    try:
        return ErrorClass(name)
    except ValueError:  # any other failure: cooled down, a trial decides
        return ErrorClass.BAD_RESPONSE
