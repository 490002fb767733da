"""How the fake server answers one request once it is admitted: the checks a real API
makes (key, model, ``response_format``, tool schemas), the normal answer shaped by the
behaviours set, and the scripted misbehaviours (hangs, resets, padded or cut bodies).

``FakeAnswering`` is a layer of ``FakeOpenAIServer``: the server counts and admits a
request, then asks ``_answer``; the batch API asks ``_answer_line`` for each line.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from genwire.providers.structured import requested_schema
from genwire.testing.fake_openai.answers import answers_asked, sized_text
from genwire.testing.fake_openai.behaviours import FakeBehaviours
from genwire.testing.fake_openai.schema_instances import schema_instance
from genwire.testing.fake_openai.scripted import FakeResponse, Scripted
from genwire.testing.fake_openai.tool_calls import tool_turn
from genwire.testing.fake_openai.wire import (
    chat_body,
    count_tokens,
    embedding_body,
    error_body,
    fake_answer,
    fast_embedding_body,
    json_response,
    max_tokens_of,
    raw_response,
    request_texts,
    scripted_response,
    wants_base64,
)
from genwire.testing.vectors import fake_vector

_MIB = 1 << 20
_SPACES = b" " * _MIB  # padding is valid JSON whitespace


class FakeAnswering(FakeBehaviours):
    """Builds the answer to one request from the behaviours set (see the module docstring)."""

    # Set by the server: its defaults, its stop signal and the usage it counts.
    default_dimensions: int
    known_models: set[str] | None
    hang_s: float
    _stopping: asyncio.Event | None
    prompt_tokens: dict[str, int]
    completion_tokens: dict[str, int]

    async def _answer(
        self, request: web.Request, endpoint: str, model: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        texts = request_texts(endpoint, body)
        with self._lock:
            api_key = self._api_key
            known = self.known_models
            rejects_format = set(self._no_response_format)
            rejected_tools = set(self._rejected_tools.get(model, ()))
            item = self._next_item(model, texts)
        if api_key is not None and request.headers.get("Authorization") != f"Bearer {api_key}":
            return raw_response(401, error_body(401, code="invalid_api_key"))
        if known is not None and model not in known:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return raw_response(404, error_body(404, message, code="model_not_found"))
        if "response_format" in body and model in rejects_format:
            return raw_response(400, error_body(400, "response_format is not supported by this model"))
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        refused = sorted(rejected_tools.intersection(n for n in offered if isinstance(n, str)))
        if refused:
            message = f"Invalid schema for function '{refused[0]}': the schema is not supported by this model."
            return raw_response(400, error_body(400, message, code="invalid_function_parameters"))
        if item is None:
            with self._lock:
                padding = self._padding_mb.get(model, self._padding_mb.get("*", 0.0))
            answer = self._normal(endpoint, model, body, texts)
            return await self._padded(request, answer, padding) if padding else answer
        return await self._scripted(request, endpoint, model, body, texts, item)

    async def _padded(self, request: web.Request, answer: web.Response, mb: float) -> web.StreamResponse:
        """``answer`` after ``mb`` MiB of spaces (endless for ``math.inf``), streamed in
        1 MiB writes that wait for the client (the server's memory stays flat)."""
        response = web.StreamResponse(status=answer.status, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        left = mb * _MIB
        stopping = self._stopping
        try:
            while left > 0:
                if stopping is not None and stopping.is_set():
                    return response
                step = int(min(left, _MIB))
                await response.write(_SPACES[:step])
                left -= step
            assert isinstance(answer.body, bytes)
            await response.write(answer.body)
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client went away mid-body
            pass
        return response

    async def _streamed(self, request: web.Request, answer: web.Response, cut: bool) -> web.StreamResponse:
        """``answer`` in small chunks (chunked transfer encoding), or (``cut``) its declared
        length with only half the body sent before the connection is dropped."""
        assert isinstance(answer.body, bytes)
        data = answer.body
        response = web.StreamResponse(status=answer.status, headers={"Content-Type": "application/json"})
        if cut:
            response.content_length = len(data)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        if cut:
            await response.write(data[: len(data) // 2])
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        for start in range(0, len(data), 7):
            await response.write(data[start : start + 7])
        await response.write_eof()
        return response

    async def _answer_line(
        self, endpoint: str, model: str, body: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[int, bytes]:
        """A batch line's answer: what an online request would get (not counted in
        ``requests``), as (status, body)."""
        response = await self._answer(LineRequest(headers), endpoint, model, body)  # type: ignore[arg-type]
        raw = response.body if isinstance(response, web.Response) else b""
        return response.status, raw if isinstance(raw, bytes) else b""

    def _dims(self, model: str, body: dict[str, Any]) -> int:
        requested = body.get("dimensions")  # OpenAI's "shorten to n" request field
        if type(requested) is int and requested > 0:
            return requested
        with self._lock:
            return self._dimensions.get(model, self.default_dimensions)

    def _normal(
        self,
        endpoint: str,
        model: str,
        body: dict[str, Any],
        texts: list[str],
        *,
        content: str | None = None,
        vectors: list[list[float]] | None = None,
    ) -> web.Response:
        with self._lock:
            realistic = self._realistic.get(model, self._realistic.get("*"))
            shape = self._shapes.get(model, self._shapes.get("*"))
        if realistic is not None:
            prompt_tokens = realistic.prompt_tokens(texts, chat=endpoint == "chat")
        else:
            prompt_tokens = sum(map(count_tokens, texts))
        if endpoint == "chat":
            if content is None and body.get("tools") and requested_schema(body.get("response_format")) is None:
                with self._lock:
                    scripts = list(self._tool_scripts)
                text, calls = tool_turn(body, scripts)
                if calls:
                    self._count_usage(model, prompt_tokens, 1)
                    return json_response(200, chat_body(model, None, prompt_tokens, 1, calls))
                content = text
            completion_tokens: int | None = None
            with self._lock:
                answer_fn = self._answer_fns.get(model)
            if content is None and answer_fn is not None:
                content = answer_fn(texts[-1] if texts else "")
            if content is None:
                schema = requested_schema(body.get("response_format"))
                # Structured output: an instance of the requested schema, as JSON text.
                with self._lock:
                    by_prompt = model in self._varied_structured or "*" in self._varied_structured
                seed = (texts[-1] if texts else "") if by_prompt else None
                content = (
                    json.dumps(schema_instance(schema, seed=seed))
                    if schema is not None
                    else fake_answer(texts[-1] if texts else "")
                )
                with self._lock:
                    varied = model in self._varied or "*" in self._varied
                    self._answers_varied += 1
                    number = self._answers_varied
                if varied and schema is None:
                    content = f"{content} #{number}"
                if shape is not None and shape.sized and schema is None:
                    with self._lock:
                        completion_tokens = shape.next_tokens(max_tokens_of(body))
                    content = (
                        sized_text(content, completion_tokens)
                        if realistic is None
                        else realistic.answer(content, completion_tokens)
                    )
                elif realistic is not None and schema is None:
                    with self._lock:
                        completion_tokens = realistic.completion_tokens(max_tokens_of(body))
                    content = realistic.answer(content, completion_tokens)
            if completion_tokens is None:  # a given, structured or plain-fake answer: counted as it is
                completion_tokens = count_tokens(content) if realistic is None else realistic.text_tokens(content)
            choices = answers_asked(body)  # each choice is billed
            self._count_usage(model, prompt_tokens, completion_tokens * choices)
            named = self._served_as.get(model, model)  # the model id the answer names (``serve_as``)
            answer = chat_body(named, content, prompt_tokens, completion_tokens * choices, choices=choices)
            if shape is not None and shape.omit_usage:
                del answer["usage"]
            return json_response(200, answer)
        self._count_usage(model, prompt_tokens, 0)
        if vectors is None:
            dims = self._dims(model, body)
            return raw_response(200, fast_embedding_body(model, texts, dims, prompt_tokens, base64=wants_base64(body)))
        return json_response(200, embedding_body(model, vectors, prompt_tokens, base64=wants_base64(body)))

    def _count_usage(self, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens[model] += prompt_tokens
            self.completion_tokens[model] += completion_tokens

    async def _scripted(
        self,
        request: web.Request,
        endpoint: str,
        model: str,
        body: dict[str, Any],
        texts: list[str],
        item: Scripted,
    ) -> web.StreamResponse:
        if isinstance(item, int):
            return raw_response(item, error_body(item))
        if isinstance(item, FakeResponse):
            return scripted_response(request, item)
        if item == "hang":
            await self._hang(request)
            return raw_response(504, error_body(504))  # only reached if stop() cut the hang
        if item == "reset":
            # Drop the connection with no response at all: the client sees a disconnect.
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if item == "malformed":
            return web.Response(status=200, body=b"<html>upstream proxy error", content_type="text/html")
        if item == "endless_body":
            return await self._padded(request, raw_response(200, b"{}"), math.inf)
        if item in ("chunked", "truncated"):
            return await self._streamed(request, self._normal(endpoint, model, body, texts), item == "truncated")
        if item == "echo_auth":
            echoed = request.headers.get("Authorization", "")
            message = f"invalid credentials in request header Authorization: {echoed}"
            return raw_response(401, error_body(401, message))
        if endpoint == "chat":
            if item == "empty_text":
                return self._normal(endpoint, model, body, texts, content="")
            if item == "not_json":
                return self._normal(endpoint, model, body, texts, content="Sure! Here is the object you asked for.")
            return self._normal(endpoint, model, body, texts)  # embedding-only symbol
        dims = self._dims(model, body)
        if item == "empty_vector":
            vectors: list[list[float]] = [[] for _ in texts]
        elif item == "wrong_dimensions":
            vectors = [fake_vector(t, dims + 1) for t in texts]
        elif item == "one_wrong_dimension":  # the last vector one longer than the others
            vectors = [fake_vector(t, dims + (i == len(texts) - 1)) for i, t in enumerate(texts)]
        elif item == "nan":
            vectors = [[float("nan"), *fake_vector(t, dims)[1:]] for t in texts]
        else:  # "empty_text" is chat-only: embeddings answer normally
            vectors = [fake_vector(t, dims) for t in texts]
        return self._normal(endpoint, model, body, texts, vectors=vectors)

    async def _hang(self, request: web.Request) -> None:
        # Sleep in short steps so a client that gave up, or stop(), ends the hang.
        deadline = time.monotonic() + self.hang_s
        stopping = self._stopping
        while time.monotonic() < deadline:
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            if stopping is not None and stopping.is_set():
                return
            await asyncio.sleep(0.05)


class LineRequest:
    """What ``_answer`` reads of a request, for a batch line: the batch's headers and no
    connection (a "hang" script ends at once)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers
        self.transport = None
