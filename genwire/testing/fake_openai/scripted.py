"""What a test scripts the fake server to send: a status, a ``FakeResponse`` or a symbol.

``SYMBOLS`` names the misbehaviours the server knows (a hang, a malformed body, a dropped
connection...); ``check_scripted`` refuses anything else when the script is set, not
when a request meets it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Symbol = Literal[
    "ok",  # answered as if unscripted (a script's way to let requests through first)
    "hang",
    "malformed",
    "empty_vector",
    "wrong_dimensions",
    "one_wrong_dimension",
    "nan",
    "reset",
    "empty_text",
    "echo_auth",
    "not_json",
    "endless_body",
    "chunked",
    "truncated",
]
SYMBOLS: frozenset[str] = frozenset(get_args(Symbol))


@dataclass(frozen=True)
class FakeResponse:
    """A fully specified answer: ``json`` (serialised) or ``body`` (sent as is).

    With neither, an OpenAI-style error body for ``status`` is sent. ``echo_auth`` puts
    the request's Authorization header into the error message, as some misbehaving
    proxies do; tests use it to prove a client never repeats its key.
    """

    status: int = 200
    json: Any = None
    body: bytes | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    echo_auth: bool = False


Scripted = int | FakeResponse | Symbol | str


def check_scripted(item: object) -> None:
    if isinstance(item, bool) or not isinstance(item, int | FakeResponse | str):
        raise TypeError(f"scripted response must be int, FakeResponse or symbol, not {item!r}")
    if isinstance(item, str) and item not in SYMBOLS:
        raise ValueError(f"unknown scripted symbol {item!r}; known: {sorted(SYMBOLS)}")
