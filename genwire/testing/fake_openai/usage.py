"""Realistic ``usage`` for the fake server (SPEC §16's estimate and budget are tested
against it): prompt tokens at about ``chars_per_token`` characters a token, with a fixed
spread per text (the same text always counts the same), and answers whose length varies
from answer to answer, bounded by the request's ``max_tokens``.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, field

__all__ = ["RealisticUsage"]

FILLER = "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing matches "
MESSAGE_OVERHEAD_TOKENS = 4  # per chat message, as OpenAI's count adds


@dataclass
class RealisticUsage:
    chars_per_token: float = 4.0
    spread: float = 0.1  # a text counts len/chars_per_token x (1 ± spread)
    completion_mean: int = 120  # tokens an answer has on average, when max_tokens allows
    completion_sigma: float = 0.4  # log-normal spread of answer lengths
    seed: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def text_tokens(self, text: str) -> int:
        wobble = (zlib.crc32(text.encode()) / 0xFFFFFFFF) * 2 - 1  # in [-1, 1], fixed per text
        return max(1, round(len(text) / self.chars_per_token * (1 + self.spread * wobble)))

    def prompt_tokens(self, texts: list[str], *, chat: bool) -> int:
        overhead = MESSAGE_OVERHEAD_TOKENS * len(texts) if chat else 0
        return sum(map(self.text_tokens, texts)) + overhead

    def completion_tokens(self, max_tokens: int | None) -> int:
        """An answer's length: log-normal around the mean, at most ``max_tokens``.
        Caller holds the server's lock (the generator is shared)."""
        mean = self.completion_mean if not max_tokens else min(self.completion_mean, max(1, int(0.6 * max_tokens)))
        drawn = round(self.rng.lognormvariate(math.log(mean), self.completion_sigma))
        return max(1, min(drawn, max_tokens or 8 * mean))

    def answer(self, head: str, tokens: int) -> str:
        """Text of about ``tokens`` tokens starting with ``head``."""
        chars = max(1, round(tokens * self.chars_per_token))
        text = head + " " + FILLER * (chars // len(FILLER) + 1)
        return text[:chars]
