"""The cost meter (SPEC §16): every paid request passes through it.

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
from array import array
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from genwire.errors import BudgetExhausted
from genwire.providers.money import usd as dollars_text
from genwire.providers.pricing import Price
from genwire.providers.usage import reported_tokens

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "CostMeter",
    "Hold",
    "Learned",
    "ModelStats",
    "Narrowed",
    "Paid",
    "answers_asked",
    "metered_batch_call",
]

T = TypeVar("T")
log = logging.getLogger(__name__)

FIRST_CHARS_PER_TOKEN = 1.0  # before any answer: a token is at least a character
MARGIN = 0.1  # on top of a request's worst case
MARGIN_TOKENS = 16
# A model's output limit when neither its config nor the price table gives one: above
# what today's chat models answer in one go (a reasoning model's may be larger: set
# models.<alias>.max_output_tokens).
DEFAULT_OUTPUT_LIMIT = 32_768
_MAX_COUNT = 2**63 - 1  # what an array("q") holds
# Requests per alias whose tokens and latency are kept: an estimate samples tens of rows,
# a run of millions of requests keeps 240 KB per model, not 24 bytes a request.
MEASURED_REQUESTS = 10_000


@dataclass
class ModelStats:
    """What one alias's answers showed in this session."""

    requests: int = 0  # paid requests
    # Per paid request, the first ``MEASURED_REQUESTS`` of them (what the estimate's means
    # and p95s are taken from), as machine numbers: a 100,000-row run's RSS grew 15 % with
    # lists of Python objects, and 7 % more with every request's numbers kept. A count past
    # 2**63 is kept as that.
    input_tokens: array[int] = field(default_factory=lambda: array("q"))
    output_tokens: array[int] = field(default_factory=lambda: array("q"))
    latencies: array[float] = field(default_factory=lambda: array("d"))  # seconds, the successful attempt
    usd: float = 0.0
    chars_per_token: float | None = None  # smallest body chars / prompt tokens seen
    limit_requests: int | None = None  # x-ratelimit-limit-requests (per minute)
    limit_tokens: int | None = None  # x-ratelimit-limit-tokens (per minute)
    # What every answer of the run taught (kept across begin_rows: the probes teach too).
    answered: int = 0  # settled answers
    ignores_max_tokens: bool = False  # an answer came longer than its max_tokens
    past_limit: bool = False  # an answer came longer than the model's known output limit
    longest_answer: int = 0  # the most output tokens one answer (one choice) had
    without_usage: int = 0  # answers that reported no usage

    def measure(self, input_tokens: int, output_tokens: int, latency_s: float) -> None:
        """One paid request: counted, and measured while fewer than ``MEASURED_REQUESTS`` were."""
        self.requests += 1
        if len(self.latencies) < MEASURED_REQUESTS:
            self.input_tokens.append(min(input_tokens, _MAX_COUNT))
            self.output_tokens.append(min(output_tokens, _MAX_COUNT))
            self.latencies.append(latency_s)

    def add(self, more: ModelStats) -> None:
        """``more``'s requests and measurements (another process's) added to these."""
        self.requests += more.requests
        room = max(0, MEASURED_REQUESTS - len(self.latencies))
        self.input_tokens.extend(more.input_tokens[:room])
        self.output_tokens.extend(more.output_tokens[:room])
        self.latencies.extend(more.latencies[:room])

    def forget_requests(self) -> None:
        """The pre-flight is over: its requests are not the rows'."""
        self.requests = 0
        del self.input_tokens[:], self.output_tokens[:], self.latencies[:]
        self.usd = 0.0


@dataclass(frozen=True)
class Hold:
    """A reservation: what was held against the cap, and the worst case it assumed."""

    alias: str
    usd: float
    tokens: int
    chars: int
    input_tokens: int = 0  # the worst case's, margin included (what an answer without usage costs)
    output_tokens: int = 0  # every answer asked for
    max_tokens: int = 0  # the request's bound per answer (0: none)
    answers: int = 1  # n / best_of


@dataclass(frozen=True)
class Learned:
    """What a model's answers showed about its worst case, passed to other meters (a Ray
    worker's learns what the driver's pre-flight probe showed)."""

    answered: int
    ignores_max_tokens: bool
    past_limit: bool
    longest_answer: int


@dataclass(frozen=True)
class Narrowed:
    """The first time the reservations held a model's requests in flight below its
    ``max_concurrency``: the budget left was below that many worst cases."""

    alias: str
    in_flight: int  # the model's requests in flight when one had to wait for room
    max_concurrency: int
    worst_case_usd: float  # one request's
    left_usd: float | None  # the cost cap's room left then (None: a token cap narrowed)

    def text(self) -> str:
        left = f"${self.left_usd:.3g} left" if self.left_usd is not None else "what is left of the budget"
        return (
            f"the budget narrowed model {self.alias}'s requests in flight to {self.in_flight:,} of its "
            f"max_concurrency {self.max_concurrency:,}: {left} is below {self.max_concurrency:,} worst cases "
            f"of ${self.worst_case_usd:.3g}"
        )


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


def p95(values: Sequence[int] | Sequence[float]) -> float:
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


def max_tokens_of(params: Mapping[str, Any]) -> int:
    """A request's (or a model's params') bound on its answer; 0 when unset."""
    value = params.get("max_completion_tokens", params.get("max_tokens"))
    return value if type(value) is int and value > 0 else 0


def answers_asked(params: Mapping[str, Any]) -> int:
    """How many answers a request is billed for: ``n`` choices, or ``best_of`` candidates
    (each generated and billed, whichever is returned)."""
    asked = 1
    for key in ("n", "best_of"):
        value = params.get(key)
        if type(value) is int and value > asked:
            asked = value
    return asked
