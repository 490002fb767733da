"""What each model alias cost: requests, retries, rate-limited answers and tokens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class ModelUsage:
    """Counts for one model alias. Tokens come from the responses' ``usage`` (0 where a
    server reports none); ``requests`` counts every attempt, retries included. ``cached``
    counts answers served by the response cache (no request sent) and ``saved_tokens``
    the prompt and completion tokens those answers were paid with when they were stored.
    ``batched`` counts requests sent in batches (each submission of a line)."""

    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: int = 0
    saved_tokens: int = 0
    batched: int = 0  # requests sent in Batch API files (SPEC §14), not online
    saved_prompt_tokens: int = 0  # saved_tokens split, for what the cache saved in USD (SPEC §16)
    saved_completion_tokens: int = 0

    def add(self, other: ModelUsage) -> None:
        self.requests += other.requests
        self.retries += other.retries
        self.rate_limited += other.rate_limited
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached += other.cached
        self.saved_tokens += other.saved_tokens
        self.batched += other.batched
        self.saved_prompt_tokens += other.saved_prompt_tokens
        self.saved_completion_tokens += other.saved_completion_tokens

    def count_tokens(self, body: Any) -> int | None:
        """Add the tokens an OpenAI-style response reports in ``usage``, and return their
        sum (None when it reports none; anything else is ignored)."""
        tokens = reported_tokens(body)
        if tokens is None:
            return None
        prompt, completion = tokens
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        return prompt + completion

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def reported_tokens(body: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens an OpenAI-style response reports in ``usage``, or None."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def token_shares(tokens: tuple[int, int] | None, parts: int) -> list[tuple[int, int]]:
    """``tokens`` (prompt, completion) of one request split over the ``parts`` answers it
    holds, as evenly as whole tokens go (the first parts take the remainder): what each
    part's cache entry says a hit on it saved, summing to the request's."""
    prompt, completion = tokens or (0, 0)
    return [
        (prompt // parts + (i < prompt % parts), completion // parts + (i < completion % parts)) for i in range(parts)
    ]


def _count(value: Any) -> int:
    # Exact int check: a bool or a float from a confused server is not a token count.
    return value if type(value) is int and value >= 0 else 0


def requests_of(usage: Mapping[str, ModelUsage]) -> dict[str, int]:
    """Requests (every attempt) per alias: the one way any count of requests is read."""
    return {alias: u.requests for alias, u in usage.items()}


def merge_usage(parts: Iterable[Mapping[str, ModelUsage]]) -> dict[str, ModelUsage]:
    """Sum per alias: one definition for the container's clients and Ray's workers."""
    total: dict[str, ModelUsage] = {}
    for part in parts:
        for alias, usage in part.items():
            total.setdefault(alias, ModelUsage()).add(usage)
    return dict(sorted(total.items()))


@dataclass(frozen=True)
class Concurrency:
    """A provider's requests in flight against its current (adaptive) and configured
    limit; ``pauses`` counts its models' pauses persistent 429s caused; ``waiting`` the
    requests queued for a slot (not those waiting out a stray 429 on their own)."""

    in_flight: int
    limit: int
    max_concurrency: int
    peak_in_flight: int
    pauses: int = 0
    waiting: int = 0

    def __str__(self) -> str:
        return f"{self.in_flight}/{self.limit}"
