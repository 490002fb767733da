"""What a server's answer says, read without the provider: the excerpt of an error message,
``Retry-After``, whether a 400 means "no such model", a request's ``max_tokens``.

Plain functions over text and payloads (no client, no secrets): the provider (``endpoint``)
scrubs a body before it asks these for an excerpt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from genwire.providers.failures import MAX_RETRY_WAIT_S

__all__ = ["SNIPPET_CHARS", "max_tokens", "parse_retry_after", "readable_excerpt", "says_model_missing"]

# Response-body snippets in error messages are cut to this many characters.
SNIPPET_CHARS = 200
# Phrases with which servers say "this model does not exist" in a 400 body
# (OpenAI answers 404; some vLLM/TGI/NIM versions answer 400).
_MISSING_MODEL_PHRASES = (
    "does not exist",
    "doesn't exist",
    "not found",
    "model_not_found",
    "unknown model",
    "no such model",
    "not a valid model",
    "invalid model",
)

# Sentences after the first are kept only if they carry a figure and one of these words.
_LIMIT_WORDS = re.compile(r"limit|per (?:minute|second|day)|rpm|tpm|quota|retry|try again|cooldown|seconds", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
BLOB_CHARS = 60  # a bracketed run longer than this is a dump (deployment lists, JSON), not prose


def _drop_blobs(text: str) -> str:
    """Replace long ``{...}``/``[...]``/``(...)`` runs (also one cut off at the end) with ``…``."""
    pairs = {"{": "}", "[": "]", "(": ")"}
    out: list[str] = []
    depth_stack: list[str] = []
    start = 0
    for i, ch in enumerate(text):
        if ch in pairs:
            if not depth_stack:
                start = i
            depth_stack.append(pairs[ch])
        elif depth_stack and ch == depth_stack[-1]:
            depth_stack.pop()
            if not depth_stack:
                blob = text[start : i + 1]
                out.append(blob if len(blob) <= BLOB_CHARS else blob[0] + "…" + blob[-1])
        elif not depth_stack:
            out.append(ch)
    if depth_stack:  # unbalanced to the end: a dump that was cut off
        rest = text[start:]
        out.append(rest if len(rest) <= BLOB_CHARS else rest[0] + "…")
    return "".join(out)


def readable_excerpt(text: str, limit: int) -> str:
    """A server's message as it is if it fits; else its first sentence, plus later sentences that give limit
    figures (``Limit: 40 requests per minute``, ``Try again in 5 seconds``), without long
    JSON or deployment dumps (LiteLLM puts its cooldown list before the useful part)."""
    text = " ".join(_drop_blobs(text).split())
    if len(text) <= limit:  # short enough to keep whole
        return text
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    if not sentences:
        return ""
    kept = [sentences[0]] + [s for s in sentences[1:] if _LIMIT_WORDS.search(s) and re.search(r"\d", s)]
    out = " ".join(" ".join(kept).split())
    return out if len(out) <= limit else out[: limit - 1] + "…"


def max_tokens(payload: Mapping[str, Any]) -> int:
    value = payload.get("max_completion_tokens", payload.get("max_tokens"))
    return value if type(value) is int and value > 0 else 0


def says_model_missing(detail: str) -> bool:
    lowered = detail.lower()
    return "model" in lowered and any(p in lowered for p in _MISSING_MODEL_PHRASES)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After is delta-seconds or an HTTP date; anything else is ignored."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(seconds, MAX_RETRY_WAIT_S))
