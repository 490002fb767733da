"""The cost meter (SPEC §16): every paid request passes through it.

``CostMeter`` is one role (reserve before, settle after, under one budget that wakes the
requests waiting for room), so it stays whole here; what it counts with is ``figures``'.

Before a request is sent its worst case is *reserved*: input tokens estimated from the
body's length with the smallest characters-per-token ratio the model's answers showed
(a body is never fewer tokens than that), plus a margin, and its output times the answers
it asks for (``n``, ``best_of``). The output reserved is the model's output limit whenever
one is known (``output_limits``: its ``max_output_tokens``, or the price table's), since
a model may ignore ``max_tokens`` at any point of a run; only where none is known is it
``max_tokens`` (without one, or for a model seen to ignore it, ``DEFAULT_OUTPUT_LIMIT``).
An answer longer than a known limit shows the limit is wrong: a warning, and that model's
later requests reserve ``DEFAULT_OUTPUT_LIMIT``. The answer's ``usage`` then *settles* it;
an answer without ``usage`` is settled at what was held (its worst case), and teaches
nothing. A request whose worst case does not fit in
what is left of the cap waits while other requests are in flight (their settlement frees
what they did not use); when nothing is in flight and it still does not fit, the budget
is exhausted: that request and every later one raise ``BudgetExhausted``.

With a known output limit, spend therefore never passes the cap by more than one
request's worst case. Without one, under a cap a model's first request (the pre-flight's
probe included) goes alone: its answer shows whether the model keeps ``max_tokens`` and
reports ``usage`` before a second one is sent. An answer longer than its ``max_tokens``
marks the model (its later requests hold ``DEFAULT_OUTPUT_LIMIT``), so an overshoot is
bounded by the requests already in flight when it first came.

Reservations narrow a model's requests in flight only when the budget left is below its
``max_concurrency`` worst cases; the first time they do, a warning says so and
``narrowed`` keeps the figures (the summary's and the estimate's).

The meter also keeps what the estimate needs (per model: tokens, latencies, the
endpoint's advertised limits) and hands each paid answer to ``record`` (the run's ledger).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from genwire.errors import BudgetExhausted
from genwire.providers.budget.figures import (
    DEFAULT_OUTPUT_LIMIT,
    FIRST_CHARS_PER_TOKEN,
    MARGIN,
    MARGIN_TOKENS,
    Hold,
    Learned,
    ModelStats,
    Narrowed,
    Paid,
    answers_asked,
    max_tokens_of,
)
from genwire.providers.money import usd as dollars_text
from genwire.providers.pricing import Price
from genwire.providers.usage import reported_tokens

__all__ = ["CostMeter", "metered_batch_call"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class CostMeter:
    """Reserves, settles and records; one per run, used from the run's event loop."""

    def __init__(
        self,
        prices: Mapping[str, Price | None],
        *,
        output_limits: Mapping[str, int] | None = None,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        concurrency: Mapping[str, int] | None = None,
        spent_usd: float = 0.0,
        spent_tokens: int = 0,
        record: Callable[[Paid], None] | None = None,
    ) -> None:
        self.prices = dict(prices)
        self.output_limits = dict(output_limits or {})
        self.concurrency = dict(concurrency or {})  # per alias: its providers' max_concurrency
        self.narrowed: Narrowed | None = None
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
        self._in_flight_of: dict[str, int] = {}  # per alias
        self._refused: tuple[str, float, int] | None = None  # (alias, usd, max_tokens) of the request that did not fit
        self._freed: asyncio.Event | None = None  # set (and replaced) when a hold is freed
        self.exhausted = False
        # A share of a larger cap (a Ray worker's lease, SPEC §22): asked for more room
        # (tokens, usd) before a request that does not fit waits or gives up; True when
        # it grew ``max_cost_usd`` / ``max_tokens``.
        # The third argument names the request: (alias, max_tokens, -1 for an embedding).
        self.more_room: Callable[[int, float, tuple[str, int]], Awaitable[bool]] | None = None
        # Called when the last request in flight settles and none waits (a Ray worker gives
        # back the rest of its lease, so a share it no longer needs is not held from the others).
        self.on_idle: Callable[[], None] | None = None
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
            stats.forget_requests()
        self._rows_begun = True

    def end_rows(self) -> None:
        if self._rows_cpu_started is not None:
            self.rows_cpu_s = time.process_time() - self._rows_cpu_started
        self._rows_begun, self._rows_cpu_started = False, None

    # --- before a request ----------------------------------------------------------------

    def output_bound(self, alias: str, max_tokens: int) -> int:
        """The most output tokens one answer may have: the model's known output limit
        (or ``max_tokens``, when larger); without one, ``max_tokens`` when set and kept;
        else ``DEFAULT_OUTPUT_LIMIT`` (or the longest answer seen, when longer)."""
        stats = self.stats.get(alias)
        known = self.output_limits.get(alias)
        if known is not None and (stats is None or not stats.past_limit):
            return max(known, max_tokens)
        if known is None and max_tokens and (stats is None or not stats.ignores_max_tokens):
            return max_tokens
        longest = stats.longest_answer if stats is not None else 0
        return max(DEFAULT_OUTPUT_LIMIT, math.ceil(longest * (1 + MARGIN)), max_tokens)

    def learned(self) -> dict[str, Learned]:
        """What each model's answers showed so far (for another process's meter)."""
        return {
            alias: Learned(s.answered, s.ignores_max_tokens, s.past_limit, s.longest_answer)
            for alias, s in self.stats.items()
            if s.answered
        }

    def learn(self, learned: Mapping[str, Learned]) -> None:
        """What another meter's answers showed (the driver's probes, for a Ray worker)."""
        for alias, what in learned.items():
            stats = self.stats_of(alias)
            stats.answered = max(stats.answered, what.answered)
            stats.ignores_max_tokens |= what.ignores_max_tokens
            stats.past_limit |= what.past_limit
            stats.longest_answer = max(stats.longest_answer, what.longest_answer)

    def worst_case(
        self, alias: str, chars: int, max_tokens: int, *, output: bool = True, answers: int = 1
    ) -> tuple[int, float]:
        """(tokens, usd) a request of ``chars`` body characters may cost at most."""
        tokens, usd, _, _ = self._worst(alias, chars, max_tokens, output, answers)
        return tokens, usd

    def _worst(
        self, alias: str, chars: int, max_tokens: int, output: bool, answers: int
    ) -> tuple[int, float, int, int]:
        """(tokens, usd, input tokens, output tokens) of the worst case."""
        stats = self.stats.get(alias)
        ratio = stats.chars_per_token if stats is not None and stats.chars_per_token else FIRST_CHARS_PER_TOKEN
        input_tokens = math.ceil(chars / ratio)
        output_tokens = self.output_bound(alias, max_tokens) * max(1, answers) if output else 0
        tokens = math.ceil((input_tokens + output_tokens) * (1 + MARGIN)) + MARGIN_TOKENS
        held_input = math.ceil(input_tokens * (1 + MARGIN)) + MARGIN_TOKENS
        price = self.prices.get(alias)
        usd = 0.0
        if price is not None:
            usd = price.cost(held_input, output_tokens) * (1 + MARGIN)
        return tokens, usd, held_input, output_tokens

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

    async def reserve_request(self, alias: str, path: str, payload: Mapping[str, Any], chars: int) -> Hold:
        """``reserve`` for one request body (every metered request comes through here)."""
        return await self.reserve(
            alias, chars, max_tokens_of(payload), output=path != "/embeddings", answers=answers_asked(payload)
        )

    async def reserve(
        self,
        alias: str,
        chars: int,
        max_tokens: int,
        *,
        output: bool = True,
        answers: int = 1,
        first_alone: bool = True,
    ) -> Hold:
        """Hold the request's worst case, waiting for in-flight requests to settle if it
        does not fit yet; ``BudgetExhausted`` when it cannot fit at all. ``first_alone``:
        until a model without a known output limit has answered once, no second request
        of it is sent (batch lines, which are answered together, pass False)."""
        if self._rows_begun and self._rows_cpu_started is None:
            self._rows_cpu_started = time.process_time()
        if not self.capped:
            self._begin(alias)
            return Hold(alias, 0.0, 0, chars)
        first_alone = first_alone and alias not in self.output_limits  # a known limit is held whatever comes
        while True:
            tokens, usd, input_tokens, output_tokens = self._worst(alias, chars, max_tokens, output, answers)
            if self.exhausted:
                break
            untried = first_alone and self.stats_of(alias).answered == 0 and self._in_flight_of.get(alias, 0) > 0
            if not untried and self._fits(tokens, usd):
                break
            what = (alias, max_tokens if output else -1)
            if not untried and self.more_room is not None and await self.more_room(tokens, usd, what):
                continue  # a larger share of the cap (a Ray worker's lease)
            if not untried:
                self._note_narrowed(alias, usd)
            if self._in_flight == 0:
                self.exhausted = True  # nothing will free room: every waiter gives up too
                self._refused = (alias, usd, max_tokens if output else -1)
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
        self._begin(alias)
        return Hold(alias, usd, tokens, chars, input_tokens, output_tokens, max_tokens if output else 0, answers)

    def _note_narrowed(self, alias: str, usd: float) -> None:
        """A request of ``alias`` waits for room: the first time with fewer of its requests
        in flight than its ``max_concurrency``, say so (once a run)."""
        limit = self.concurrency.get(alias)
        in_flight = self._in_flight_of.get(alias, 0)
        if self.narrowed is not None or limit is None or in_flight == 0 or in_flight >= limit:
            return
        left = None if self.max_cost_usd is None else max(0.0, self.max_cost_usd - self.spent_usd)
        self.narrowed = Narrowed(alias, in_flight, limit, usd, left)
        log.warning("%s", self.narrowed.text())

    def _begin(self, alias: str) -> None:
        self._in_flight += 1
        self._in_flight_of[alias] = self._in_flight_of.get(alias, 0) + 1

    def exhausted_message(self) -> str:
        caps = []
        if self.max_cost_usd is not None:
            caps.append(f"{dollars_text(self.spent_usd)} of ${self.max_cost_usd:g}")
        if self.max_tokens is not None:
            caps.append(f"{self.spent_tokens:,} of {self.max_tokens:,} tokens")
        return "not sent: the budget is spent (" + ", ".join(caps) + ")" + self.refusal_hint()

    def refused_elsewhere(self, alias: str, usd: float, max_tokens: int) -> None:
        """The request that ended the budget was another process's (a Ray worker's): the
        stop message names it as this meter's own (``refusal_hint``)."""
        if self._refused is None:
            self._refused = (alias, usd, max_tokens)

    def refusal_hint(self) -> str:
        """Why nothing more fit when a single request is dearer than what was left (the
        cap too low for one request's worst case): "" otherwise."""
        refused = self._refused
        if refused is None or self.max_cost_usd is None or refused[1] <= self.max_cost_usd - self.spent_usd:
            return ""
        alias, usd, max_tokens = refused
        hint = f"; one request of {alias} may cost up to {dollars_text(usd)}"
        if alias in self.output_limits and max_tokens >= 0:
            hint += f" (its answer held at {self.output_bound(alias, max_tokens):,} tokens, the model's output limit)"
        elif max_tokens == 0:
            hint += (
                f" (its answer held at {self.output_bound(alias, 0):,} tokens, the model's output limit: "
                f"set max_tokens in models.{alias}.params, or models.{alias}.max_output_tokens)"
            )
        return hint

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
        """The answer came: pay what its ``usage`` says and record it. Without ``usage``
        it is taken to have cost the worst case held, and teaches nothing."""
        alias = hold.alias
        stats = self.stats_of(alias)
        stats.answered += 1
        if usage is None:
            stats.without_usage += 1
            if stats.without_usage == 1:
                log.warning(
                    "model %s: the endpoint reports no usage in its answers; each answer is counted at its "
                    "worst case (%s)",
                    alias,
                    "output at max_tokens" if hold.max_tokens else "output at the model's output limit",
                )
            usage = (hold.input_tokens, hold.output_tokens)
        else:
            self._learn(stats, hold, usage)
        input_tokens, output_tokens = usage
        price = self.prices.get(alias)
        usd = price.cost(input_tokens, output_tokens, batched=batched) if price is not None else None
        stats.measure(input_tokens, output_tokens, latency_s)
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

    def _learn(self, stats: ModelStats, hold: Hold, usage: tuple[int, int]) -> None:
        """What a reported ``usage`` shows: characters per token; whether the model's known
        output limit is wrong, or (without one) whether it keeps ``max_tokens``: an answer
        longer than either and its later requests hold ``DEFAULT_OUTPUT_LIMIT``."""
        input_tokens, output_tokens = usage
        if input_tokens > 0:
            ratio = hold.chars / input_tokens
            if stats.chars_per_token is None or ratio < stats.chars_per_token:
                stats.chars_per_token = ratio
        per_answer = math.ceil(output_tokens / max(1, hold.answers))
        stats.longest_answer = max(stats.longest_answer, per_answer)
        known = self.output_limits.get(hold.alias)
        if known is not None and per_answer > known and not stats.past_limit:
            stats.past_limit = True
            log.warning(
                "model %s answered %s output tokens, more than its output limit of %s tokens "
                "(models.%s.max_output_tokens, or the pricing table's): that limit is wrong; the budget now holds "
                "%s tokens for each of its requests",
                hold.alias,
                f"{per_answer:,}",
                f"{known:,}",
                hold.alias,
                f"{max(DEFAULT_OUTPUT_LIMIT, math.ceil(per_answer * (1 + MARGIN))):,}",
            )
        if hold.max_tokens and output_tokens > hold.max_tokens * hold.answers and not stats.ignores_max_tokens:
            stats.ignores_max_tokens = True
            if known is not None:
                return  # its known limit was held already
            log.warning(
                "model %s answered %s output tokens for max_tokens %s: the budget now holds its output limit "
                "for each of its requests",
                hold.alias,
                f"{output_tokens:,}",
                f"{hold.max_tokens * hold.answers:,}",
            )

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
        self._in_flight_of[hold.alias] -= 1
        self._reserved_usd -= hold.usd
        self._reserved_tokens -= hold.tokens
        self._wake()
        if self._in_flight == 0 and self.waiting == 0 and self.on_idle is not None:
            self.on_idle()

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


async def metered_batch_call(
    meter: CostMeter | None, alias: str, path: str, body: Mapping[str, Any], call: Callable[[], Awaitable[T]]
) -> T:
    """Batch mode: a line's worst case is held before it joins a file, so a whole file is
    reserved before it is uploaded; its answer settles at the batch price."""
    if meter is None:
        return await call()
    chars = len(json.dumps(body, separators=(",", ":")))
    hold = await meter.reserve(
        alias, chars, max_tokens_of(body), output=path != "/embeddings", answers=answers_asked(body), first_alone=False
    )
    try:
        answer = await call()
    except BaseException:
        meter.release(hold)
        raise
    data = answer[0] if isinstance(answer, tuple) else answer
    meter.settle(hold, reported_tokens(data), 0.0, batched=True)
    return answer
