"""The response cache's keys (SPEC §12): ``entry_key``, a sha256 of a request as sent, and
``KeyTemplate``, the same key for a column's requests with the common part encoded once.
``HOLE`` marks where a request's varying part sits.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii as _escape  # what _KEY_ENCODER escapes strings with
from typing import Any

from genwire.providers.base import chat_messages

__all__ = ["FORMAT_VERSION", "HOLE", "KeyTemplate", "entry_key"]

# 2: the key holds the non-credential headers' hash (not the API key's) and the pipeline
# seed. Entries of another version are never matched: they are simply misses.
FORMAT_VERSION = 2


# One encoder for every key: ``json.dumps`` with options builds a new one per call. ASCII
# output (non-ASCII as \u escapes) is as canonical and a third faster to make.
_KEY_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    default=repr,  # a plugin's odd param still gets a key; sending it fails as it always did
)


def entry_key(endpoint: str, body: Any, column: str, rows: Sequence[int], seed: int = 0) -> str:
    """sha256 of the endpoint identity, the request body as sent (canonical JSON: sorted
    keys), the column, the row indices and the pipeline seed. ``endpoint`` holds only a
    hash of the provider's non-credential headers, never a header value or the API key."""
    text = _KEY_ENCODER.encode([FORMAT_VERSION, endpoint, body, column, list(rows), seed])
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# Where a request's varying part sits in its body as given to ``KeyTemplate``: random per
# process, so no request can hold it (the key never does: the part takes its place).
HOLE = f"\x00genwire:part:{os.urandom(12).hex()}\x00"
_HOLE_JSON = _KEY_ENCODER.encode(HOLE)


class KeyTemplate:
    """``entry_key`` for the requests of a column that differ only in their rows and in
    one part of the body (a chat request's messages, an embedding request's inputs): the
    rest is encoded once. The canonical JSON of a container is its parts' JSON joined, so
    ``key(part, rows)`` is ``entry_key`` of the body with ``part`` in the ``HOLE``, byte
    for byte (held equal by a test), at a third of the cost: on a cached rerun, encoding
    the key was a quarter of a hit's cost."""

    __slots__ = ("_body", "_column", "_endpoint", "_parts", "_seed")

    def __init__(self, endpoint: str, body: Any, column: str, seed: int) -> None:
        """``body``: the request's body with ``HOLE`` where its varying part goes."""
        self._endpoint, self._body, self._column, self._seed = endpoint, body, column, seed
        parts = _KEY_ENCODER.encode([FORMAT_VERSION, endpoint, body, column, HOLE, seed]).split(_HOLE_JSON)
        # Three parts unless HOLE's text also sat elsewhere (only a request built from
        # HOLE itself could): then each key is encoded whole.
        self._parts = parts if len(parts) == 3 else None

    def matches(self, endpoint: str, body: Any) -> bool:
        # Python's equality: a param of 1 in one request and 1.0 (or True) in the next of
        # the same column shares the first one's key. Servers read 1 and 1.0 alike; the
        # built-ins send a column's params unchanged from row to row.
        return endpoint == self._endpoint and body == self._body

    def key(self, part: Any, rows: tuple[int, ...]) -> str:
        if self._parts is None:
            return entry_key(self._endpoint, _filled(self._body, part), self._column, rows, self._seed)
        head, middle, tail = self._parts
        # Rows are ints: str() is their JSON.
        rows_json = str(rows[0]) if len(rows) == 1 else ",".join(map(str, rows))
        text = f"{head}{_part_json(part)}{middle}[{rows_json}]{tail}"
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    def chat_keys(self, prompts: Sequence[tuple[str, str | None] | None], rows: Sequence[int]) -> list[str | None]:
        """``key(chat_messages(*prompts[i]), (rows[i],))`` for each chat request made for one
        row (None for a prompt None): the messages' JSON written straight from the texts
        (the same bytes, held equal by a test), a batch's keys in one loop."""
        if self._parts is None:
            return [
                None if p is None else self.key(chat_messages(*p), (row,)) for p, row in zip(prompts, rows, strict=True)
            ]
        head, middle, tail = self._parts
        sha256, escape = hashlib.sha256, _escape
        keys: list[str | None] = []
        for prompt, row in zip(prompts, rows, strict=True):
            if prompt is None:
                keys.append(None)
                continue
            text, system = prompt
            user = f'{{"content":{escape(text)},"role":"user"}}'
            messages = user if system is None else f'{{"content":{escape(system)},"role":"system"}},{user}'
            keys.append(sha256(f"{head}[{messages}]{middle}[{row}]{tail}".encode("ascii")).hexdigest())
        return keys


def _part_json(part: Any) -> str:
    """``_KEY_ENCODER.encode(part)``; for the usual parts (a list of texts, a list of
    messages: dicts of texts) built from the C string escaper without the encoder's
    per-container cost."""
    if type(part) is not list:
        return _KEY_ENCODER.encode(part)
    items = []
    for item in part:
        if type(item) is str:
            items.append(_escape(item))
        elif type(item) is dict and len(item) == 2 and type(content := item.get("content")) is str:
            # A chat message ({"role", "content"}, texts): its sorted keys written directly.
            role = item.get("role")
            if type(role) is not str:
                return _KEY_ENCODER.encode(part)
            items.append(f'{{"content":{_escape(content)},"role":{_escape(role)}}}')
        elif type(item) is dict:
            fields = []
            for name in sorted(item):
                value = item[name]
                if type(name) is not str or type(value) is not str:
                    return _KEY_ENCODER.encode(part)
                fields.append(f"{_escape(name)}:{_escape(value)}")
            items.append("{" + ",".join(fields) + "}")
        else:
            return _KEY_ENCODER.encode(part)
    return "[" + ",".join(items) + "]"


def _filled(body: Any, part: Any) -> Any:
    """``body`` with ``part`` in place of ``HOLE``."""
    if isinstance(body, dict):
        return {k: _filled(v, part) for k, v in body.items()}
    if isinstance(body, list):
        return [_filled(v, part) for v in body]
    return part if body == HOLE else body
