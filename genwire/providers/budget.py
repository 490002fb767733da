"""The cost meter (SPEC §16): every paid request passes through it.

Before a request is sent its worst case is *reserved*: input tokens estimated from the
body's length with the smallest characters-per-token ratio the model's answers showed
(a body is never fewer tokens than that), output at the request's ``max_tokens`` (or the
largest output the model gave when unset), plus a margin. The answer's ``usage`` then
*settles* it. A request whose worst case does not fit in what is left of the cap waits
while other requests are in flight (their settlement frees what they did not use); when
nothing is in flight and it still does not fit, the budget is exhausted: that request
and every later one raise ``BudgetExhausted``. Spend therefore never passes the cap by
more than one request's estimate error, at any concurrency.

The meter also keeps what the estimate needs (per model: tokens, latencies, the
endpoint's advertised limits) and hands each paid answer to ``record`` (the run's ledger).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from genwire.errors import BudgetExhausted
from genwire.providers.pricing import Price
from genwire.providers.usage import reported_tokens

__all__ = ["CostMeter", "Hold", "ModelStats", "Paid", "metered_batch_call"]

T = TypeVar("T")

FIRST_CHARS_PER_TOKEN = 1.0  # before any answer: a token is at least a character
MARGIN = 0.1  # on top of a request's worst case
MARGIN_TOKENS = 16
UNKNOWN_OUTPUT_BOUND = 4096  # no max_tokens and no answer seen yet


@dataclass
class ModelStats:
    """What one alias's answers showed in this session."""

    input_tokens: list[int] = field(default_factory=list)  # per paid request
    output_tokens: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # seconds, the successful attempt
    usd: float = 0.0
    chars_per_token: float | None = None  # smallest body chars / prompt tokens seen
    limit_requests: int | None = None  # x-ratelimit-limit-requests (per minute)
    limit_tokens: int | None = None  # x-ratelimit-limit-tokens (per minute)

    @property
    def requests(self) -> int:
        return len(self.input_tokens)


@dataclass(frozen=True)
class Hold:
    alias: str
    usd: float
    tokens: int
    chars: int


@dataclass(frozen=True)
class Paid:
    """One paid answer, as the ledger records it."""

    alias: str
    input_tokens: int
    output_tokens: int
    usd: float | None
    batched: bool


class CostMeter:
    """Reserves, settles and records; one per run, used from the run's event loop."""

    def __init__(
        self,
        prices: Mapping[str, Price | None],
        *,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        spent_usd: float = 0.0,
        spent_tokens: int = 0,
        record: Callable[[Paid], None] | None = None,
    ) -> None:
        self.prices = dict(prices)
        self.max_cost_usd = max_cost_usd
        self.max_tokens = max_tokens
        self.spent_usd = spent_usd  # the run's, earlier sessions included (the ledger)
        self.spent_tokens = spent_tokens
        self.session_usd = 0.0
        self.session_tokens = 0
        self.waiting = 0  # requests waiting for room under the cap
        self._record = record
        self._reserved_usd = 0.0
        self._reserved_tokens = 0
        self._in_flight = 0
        self._freed: asyncio.Event | None = None  # set (and replaced) when a hold is freed
        self.exhausted = False
        # A share of a larger cap (a Ray worker's lease, SPEC §22): asked for more room
        # (tokens, usd) before a request that does not fit waits or gives up; True when
        # it grew ``max_cost_usd`` / ``max_tokens``.
        self.more_room: Callable[[int, float], Awaitable[bool]] | None = None
        self.stats: dict[str, ModelStats] = {}
        self._rows_begun = False
        self._rows_cpu_started: float | None = None  # at the rows' first request (set-up is not per row)
        self.rows_cpu_s = 0.0  # this process's CPU time while rows were generated (the estimate's own bound)

    @property
    def reserved_usd(self) -> float:
        return self._reserved_usd

    @property
    def reserved_tokens(self) -> int:
        return self._reserved_tokens

    @property
    def capped(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None

    def stats_of(self, alias: str) -> ModelStats:
        stats = self.stats.get(alias)
        if stats is None:
            stats = self.stats[alias] = ModelStats()
        return stats

    def begin_rows(self) -> None:
        """The pre-flight is over: what the estimate measures starts here (what the
        probes taught about characters per token and limits is kept)."""
        for stats in self.stats.values():
            stats.input_tokens.clear()
            stats.output_tokens.clear()
            stats.latencies.clear()
            stats.usd = 0.0
        self._rows_begun = True

    def end_rows(self) -> None:
        if self._rows_cpu_started is not None:
            self.rows_cpu_s = time.process_time() - self._rows_cpu_started
        self._rows_begun, self._rows_cpu_started = False, None

    # --- before a request ----------------------------------------------------------------

    def worst_case(self, alias: str, chars: int, max_tokens: int, *, output: bool = True) -> tuple[int, float]:
        """(tokens, usd) a request of ``chars`` body characters may cost at most."""
        stats = self.stats.get(alias)
        ratio = stats.chars_per_token if stats is not None and stats.chars_per_token else FIRST_CHARS_PER_TOKEN
        input_tokens = math.ceil(chars / ratio)
        output_tokens = 0
        if output:
            seen = max(stats.output_tokens, default=0) if stats is not None else 0
            output_tokens = max_tokens or (math.ceil(seen * (1 + MARGIN)) if seen else UNKNOWN_OUTPUT_BOUND)
        tokens = math.ceil((input_tokens + output_tokens) * (1 + MARGIN)) + MARGIN_TOKENS
        price = self.prices.get(alias)
        usd = 0.0
        if price is not None:
            usd = price.cost(math.ceil(input_tokens * (1 + MARGIN)) + MARGIN_TOKENS, output_tokens) * (1 + MARGIN)
        return tokens, usd

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def fits(self, tokens: int, usd: float) -> bool:
        """Whether a worst case of ``tokens`` and ``usd`` fits under the caps now."""
        return self._fits(tokens, usd)

    def _fits(self, tokens: int, usd: float) -> bool:
        if self.max_cost_usd is not None and self.spent_usd + self._reserved_usd + usd > self.max_cost_usd:
            return False
        return self.max_tokens is None or self.spent_tokens + self._reserved_tokens + tokens <= self.max_tokens

    async def reserve(self, alias: str, chars: int, max_tokens: int, *, output: bool = True) -> Hold:
        """Hold the request's worst case, waiting for in-flight requests to settle if it
        does not fit yet; ``BudgetExhausted`` when it cannot fit at all."""
        if self._rows_begun and self._rows_cpu_started is None:
            self._rows_cpu_started = time.process_time()
        if not self.capped:
            self._in_flight += 1
            return Hold(alias, 0.0, 0, chars)
        tokens, usd = self.worst_case(alias, chars, max_tokens, output=output)
        while not self.exhausted and not self._fits(tokens, usd):
            if self.more_room is not None and await self.more_room(tokens, usd):
                continue
            if self._in_flight == 0:
                self.exhausted = True  # nothing will free room: every waiter gives up too
                self._wake()
                break
            if self._freed is None:
                self._freed = asyncio.Event()
            self.waiting += 1
            try:
                await self._freed.wait()
            finally:
                self.waiting -= 1
        if self.exhausted:
            raise BudgetExhausted(self.exhausted_message(), target=alias)
        self._reserved_usd += usd
        self._reserved_tokens += tokens
        self._in_flight += 1
        return Hold(alias, usd, tokens, chars)

    def exhausted_message(self) -> str:
        caps = []
        if self.max_cost_usd is not None:
            caps.append(f"${self.spent_usd:.4f} of ${self.max_cost_usd:g}")
        if self.max_tokens is not None:
            caps.append(f"{self.spent_tokens:,} of {self.max_tokens:,} tokens")
        return "not sent: the budget is spent (" + ", ".join(caps) + ")"

    # --- after it --------------------------------------------------------------------------

    def settle(
        self,
        hold: Hold,
        usage: tuple[int, int] | None,
        latency_s: float,
        headers: Mapping[str, str] | None = None,
        *,
        batched: bool = False,
    ) -> None:
        """The answer came: pay what its ``usage`` says and record it. Without ``usage`` the
        worst case held is what it is taken to have cost."""
        alias = hold.alias
        stats = self.stats_of(alias)
        if usage is None:
            worst_tokens, _ = self.worst_case(alias, hold.chars, 0, output=False)
            usage = (worst_tokens, 0)
        input_tokens, output_tokens = usage
        price = self.prices.get(alias)
        usd = price.cost(input_tokens, output_tokens, batched=batched) if price is not None else None
        if input_tokens > 0:
            ratio = hold.chars / input_tokens
            if stats.chars_per_token is None or ratio < stats.chars_per_token:
                stats.chars_per_token = ratio
        stats.input_tokens.append(input_tokens)
        stats.output_tokens.append(output_tokens)
        stats.latencies.append(latency_s)
        if headers is not None:
            stats.limit_requests = _header_int(headers, "x-ratelimit-limit-requests") or stats.limit_requests
            stats.limit_tokens = _header_int(headers, "x-ratelimit-limit-tokens") or stats.limit_tokens
        if usd is not None:
            stats.usd += usd
            self.spent_usd += usd
            self.session_usd += usd
        self.spent_tokens += input_tokens + output_tokens
        self.session_tokens += input_tokens + output_tokens
        if self._record is not None:
            self._record(Paid(alias, input_tokens, output_tokens, usd, batched))
        self._free(hold)

    def paid_elsewhere(self, paid: Paid) -> None:
        """An answer another process paid for (a Ray worker): it counts as spent here,
        and is recorded, as if this meter had settled it."""
        if paid.usd is not None:
            self.stats_of(paid.alias).usd += paid.usd
            self.spent_usd += paid.usd
            self.session_usd += paid.usd
        self.spent_tokens += paid.input_tokens + paid.output_tokens
        self.session_tokens += paid.input_tokens + paid.output_tokens

    def release(self, hold: Hold) -> None:
        """The request failed or was cancelled: nothing was billed."""
        self._free(hold)

    def _free(self, hold: Hold) -> None:
        self._in_flight -= 1
        self._reserved_usd -= hold.usd
        self._reserved_tokens -= hold.tokens
        self._wake()

    def _wake(self) -> None:
        freed, self._freed = self._freed, None
        if freed is not None:
            freed.set()


def _header_int(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    try:
        number = int(float(value)) if value is not None else 0
    except ValueError:
        return None
    return number if number > 0 else None


def p95(values: list[int] | list[float]) -> float:
    """The 95th percentile (nearest rank); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)])


async def metered_batch_call(
    meter: CostMeter | None, alias: str, path: str, body: Mapping[str, Any], call: Callable[[], Awaitable[T]]
) -> T:
    """Batch mode: a line's worst case is held before it joins a file, so a whole file is
    reserved before it is uploaded; its answer settles at the batch price."""
    if meter is None:
        return await call()
    max_tokens = max_tokens_of(body)
    chars = len(json.dumps(body, separators=(",", ":")))
    hold = await meter.reserve(alias, chars, max_tokens, output=path != "/embeddings")
    try:
        answer = await call()
    except BaseException:
        meter.release(hold)
        raise
    data = answer[0] if isinstance(answer, tuple) else answer
    meter.settle(hold, reported_tokens(data), 0.0, batched=True)
    return answer


def max_tokens_of(params: Mapping[str, Any]) -> int:
    """A request's (or a model's params') bound on its answer; 0 when unset."""
    value = params.get("max_completion_tokens", params.get("max_tokens"))
    return value if type(value) is int and value > 0 else 0
