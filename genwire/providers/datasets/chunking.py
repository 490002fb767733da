"""Split text into passages of at most ``limit`` characters.

Boundaries are tried in order: paragraphs (blank lines), then sentences, then words; a
single word longer than ``limit`` is the only thing ever cut. Whitespace inside a passage
is collapsed to single spaces. Pieces are packed greedily; a piece too long for one
passage is split at the next level, and only its last part may share a passage with the
pieces after it. Linear in the text length.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
# After . ! ? (optionally closed by a quote or bracket), before the next sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019)\]])\s+")


def chunk_text(text: str, limit: int) -> list[str]:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    out: list[str] = []
    paragraphs = (_normalise(p) for p in _PARAGRAPH_BREAK.split(text))
    _pack(paragraphs, limit, 0, out)
    return out


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _sentences(text: str) -> list[str]:
    return _SENTENCE_END.split(text)


def _words(text: str) -> list[str]:
    return text.split(" ")


def _cut(text: str, limit: int) -> list[str]:
    return [text[i : i + limit] for i in range(0, len(text), limit)]


# Each level splits a normalised piece that is too long into smaller normalised pieces.
_LEVELS: list[Callable[[str, int], list[str]]] = [
    lambda text, _limit: _sentences(text),
    lambda text, _limit: _words(text),
    _cut,
]


def _pack(pieces: Iterable[str], limit: int, level: int, out: list[str]) -> None:
    buf: list[str] = []
    size = 0  # length of " ".join(buf), tracked to avoid rebuilding strings
    for piece in pieces:
        if not piece:
            continue
        if len(piece) > limit:
            if buf:
                out.append(" ".join(buf))
                buf, size = [], 0
            _pack(_LEVELS[level](piece, limit), limit, level + 1, out)
            # The split's short tail may still share a passage with what follows.
            tail = out.pop()
            buf, size = [tail], len(tail)
            continue
        grown = size + len(piece) + (1 if buf else 0)
        if grown > limit:
            out.append(" ".join(buf))
            buf, grown = [], len(piece)
        buf.append(piece)
        size = grown
    if buf:
        out.append(" ".join(buf))
