"""Answer lengths and shapes for the fake server (the budget's red-team cases, SPEC §16):
answers that grow from one request to the next, a model that ignores ``max_tokens``,
answers without ``usage``. ``n`` choices are always served (as OpenAI does): that lives
in the server itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AnswerShape", "answers_asked", "sized_text"]

FILLER_WORD = "token"


@dataclass
class AnswerShape:
    """How long a model's chat answers are: ``first`` tokens, growing linearly to
    ``grow_to`` by the ``over``-th answer. ``max_tokens`` bounds them unless
    ``ignore_max_tokens`` (after the first ``honoured`` answers). ``omit_usage``: answers
    carry no ``usage`` (the server still counts what it billed). ``first == 0``: lengths
    as usual (only the other switches)."""

    first: int = 0
    grow_to: int | None = None
    over: int = 1
    ignore_max_tokens: bool = False
    omit_usage: bool = False
    honoured: int = 0  # with ignore_max_tokens: the first answers that keep max_tokens all the same
    served: int = 0  # answers sized so far

    @property
    def sized(self) -> bool:
        return self.first > 0

    def next_tokens(self, max_tokens: int | None) -> int:
        """The next answer's length. Caller holds the server's lock."""
        k, self.served = self.served, self.served + 1
        tokens = self.first
        if self.grow_to is not None:
            tokens = round(self.first + (self.grow_to - self.first) * min(1.0, k / max(1, self.over)))
        if max_tokens and (not self.ignore_max_tokens or k < self.honoured):
            tokens = min(tokens, max_tokens)
        return max(1, tokens)


def sized_text(head: str, tokens: int) -> str:
    """``head``'s words, cut or filled to ``tokens`` whitespace-separated words (the
    fake's tokenizer)."""
    words = head.split()[:tokens]
    return " ".join(words + [FILLER_WORD] * (tokens - len(words)))


def answers_asked(body: Mapping[str, Any]) -> int:
    """The choices a chat request asks for (``n``), 1 when unset or invalid."""
    n = body.get("n")
    return n if type(n) is int and 1 <= n <= 128 else 1
