"""The fake server's answers on the wire: OpenAI-style chat, embedding and error bodies,
and the request fields they are built from (texts, ``max_tokens``), as aiohttp responses.

Pure functions of their arguments: the server's state decides which answer, these build it.
"""

from __future__ import annotations

import binascii
import functools
import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from genwire.providers.packed_floats import packed
from genwire.testing.fake_openai.scripted import FakeResponse
from genwire.testing.vectors import fake_row, fake_vector

_ERROR_TYPES = {
    400: ("invalid_request_error", "Bad request"),
    401: ("invalid_request_error", "Incorrect API key provided"),
    403: ("permission_error", "You are not allowed to use this model"),
    404: ("invalid_request_error", "Not found"),
    429: ("rate_limit_error", "Rate limit reached, please retry later"),
    500: ("server_error", "The server had an error while processing your request"),
    502: ("server_error", "Bad gateway"),
    503: ("server_error", "The engine is currently overloaded, please try again later"),
    504: ("server_error", "Gateway timeout"),
}


def error_body(status: int, message: str | None = None, code: str | None = None) -> bytes:
    kind, default = _ERROR_TYPES.get(status, ("api_error", f"HTTP {status}"))
    error = {"message": message or default, "type": kind, "param": None, "code": code}
    return json.dumps({"error": error}).encode()


@functools.lru_cache(maxsize=8192)
def vector_json(text: str, dimensions: int) -> str:
    # Cached encoded form: pipelines embed the same texts repeatedly (dedup, probes).
    # Same numbers as json.dumps would give for the 6-decimal floats, 40% cheaper.
    return "[" + ",".join(map("{:.6f}".format, fake_vector(text, dimensions))) + "]"


def as_base64(vector: list[float]) -> str:
    """A vector as ``encoding_format: base64`` sends it: little-endian float32 bytes."""
    return packed(vector, "f")


@functools.lru_cache(maxsize=8192)
def vector_base64(text: str, dimensions: int) -> str:
    # From the array (the same float32 bytes as as_base64 of the list): 4x cheaper, and the
    # fake server shares the CPU with the client it serves
    raw = fake_row(text, dimensions).astype("<f4").tobytes()
    return f'"{binascii.b2a_base64(raw, newline=False).decode()}"'


def wants_base64(body: dict[str, Any]) -> bool:
    return body.get("encoding_format") == "base64"


def fake_answer(prompt: str) -> str:
    """The default chat answer: deterministic and never empty."""
    return f"answer to: {prompt[:40]}"


def request_texts(endpoint: str, body: dict[str, Any]) -> list[str]:
    """The request's texts: message contents (chat, last is the prompt) or inputs."""
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return []
        return [m["content"] for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
    inputs = body.get("input")
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, list):
        return [t if isinstance(t, str) else json.dumps(t) for t in inputs]
    return []


def max_tokens_of(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if type(value) is int and value > 0 else None


def count_tokens(text: str) -> int:
    """The fake's tokenizer: whitespace-separated words (at least 1 for any text)."""
    return max(1, len(text.split()))


def chat_body(
    model: str,
    content: str | None,
    prompt_tokens: int,
    completion_tokens: int,
    tool_calls: Any = None,
    *,
    choices: int = 1,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
            for index in range(choices)
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def embedding_body(
    model: str, vectors: list[list[float]], prompt_tokens: int, *, base64: bool = False
) -> dict[str, Any]:
    data: list[Any] = [as_base64(v) for v in vectors] if base64 else vectors
    return {
        "object": "list",
        "model": model,
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(data)],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def fast_embedding_body(model: str, texts: list[str], dims: int, prompt_tokens: int, *, base64: bool = False) -> bytes:
    """Same document as ``embedding_body`` with normal vectors, from cached JSON pieces;
    ``base64``: each vector as the base64 of its little-endian float32 bytes (OpenAI's
    ``encoding_format: base64``)."""
    encoded = vector_base64 if base64 else vector_json
    items = ",".join(
        f'{{"object":"embedding","index":{i},"embedding":{encoded(t, dims)}}}' for i, t in enumerate(texts)
    )
    head = json.dumps({"object": "list", "model": model})[:-1]
    usage = f'"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens}}}'
    return f'{head},"data":[{items}],{usage}}}'.encode()


def json_response(status: int, payload: Any) -> web.Response:
    # allow_nan (the default) is deliberate: the "nan" script sends a bare NaN token.
    return raw_response(status, json.dumps(payload).encode())


def raw_response(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def scripted_response(request: web.Request, item: FakeResponse) -> web.Response:
    headers = dict(item.headers)
    if item.body is not None:
        body = item.body.encode() if isinstance(item.body, str) else item.body
        content_type = headers.pop("Content-Type", "text/plain")
        return web.Response(status=item.status, body=body, content_type=content_type, headers=headers)
    if item.json is not None:
        payload = item.json
        if item.echo_auth:
            payload = {"echo": request.headers.get("Authorization", ""), "body": payload}
        return raw_response(item.status, json.dumps(payload).encode(), headers)
    message = None
    if item.echo_auth:
        echoed = request.headers.get("Authorization", "")
        message = f"rejected request with header Authorization: {echoed}"
    return raw_response(item.status, error_body(item.status, message), headers)
