"""What the cost meter counts with: its margins and defaults, one model's measured answers
(``ModelStats``), a request's hold (``Hold``), what a session learned (``Learned``), a
narrowing (``Narrowed``), a paid answer (``Paid``), and a request's asked output and answers.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "Hold",
    "Learned",
    "ModelStats",
    "Narrowed",
    "Paid",
    "answers_asked",
    "max_tokens_of",
    "p95",
]

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


def p95(values: Sequence[int] | Sequence[float]) -> float:
    """The 95th percentile (nearest rank); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)])


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
