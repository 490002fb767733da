"""The OpenAI-compatible client against a real HTTP server (FakeOpenAIServer), no mocks."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import time
import traceback
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr

from genwire.config.schema import ModelConfig, OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers.base import Attempts, attempt_log, endpoint_key
from genwire.providers.factory import endpoint_identity
from genwire.providers.failures import MAX_RETRY_WAIT_S
from genwire.providers.openai import (
    OpenAIChatModel,
    OpenAIEmbeddingModel,
    OpenAIProvider,
    _parse_retry_after,
)
from genwire.providers.vectors import Vectors
from genwire.testing.fake_server import FakeOpenAIServer, FakeResponse, fake_vector

KEY = "sk-CANARY-123"
CHAT = "meta/llama-test"
EMBED = "nv-embed-test"


def make_provider(base_url: str, **overrides: Any) -> OpenAIProvider:
    settings: dict[str, Any] = {
        "kind": "openai",
        "base_url": base_url,
        "api_key": KEY,
        "timeout_s": 5.0,
        "max_concurrency": 8,
        "retries": 2,
        "backoff_s": 0.01,
    }
    settings.update(overrides)
    return OpenAIProvider("nim", OpenAIProviderConfig.model_validate(settings))


def chat_config(**params: Any) -> ModelConfig:
    return ModelConfig(provider="nim", model=CHAT, kind="chat", params=params)


def embed_config(dimensions: int | None = None, **params: Any) -> ModelConfig:
    return ModelConfig(provider="nim", model=EMBED, kind="embedding", dimensions=dimensions, params=params)


@pytest.fixture
async def provider(fake_openai_server: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    fake_openai_server.require_api_key(KEY)
    p = make_provider(fake_openai_server.url)
    try:
        yield p
    finally:
        await p.aclose()


@pytest.fixture
def chat(provider: OpenAIProvider) -> OpenAIChatModel:
    return provider.chat_model("writer", chat_config())


@pytest.fixture
def embedder(provider: OpenAIProvider) -> OpenAIEmbeddingModel:
    return provider.embedding_model("embedder", embed_config())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens here any more: connecting is refused


# --- happy paths -------------------------------------------------------------------------


async def test_chat_sends_model_messages_and_merged_params(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    model = provider.chat_model("writer", chat_config(temperature=0.7, max_tokens=256))
    text = await model.complete("What is genwire?", system="Be brief.", max_tokens=8)
    assert text == "answer to: What is genwire?"
    body = fake_openai_server.last_body[CHAT]
    assert body["model"] == CHAT
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is genwire?"},
    ]
    assert body["temperature"] == 0.7
    assert body["max_tokens"] == 8  # call params win over config params
    assert provider.requests == {"writer": 1}


async def test_embed_returns_one_vector_per_text_in_order(
    fake_openai_server: FakeOpenAIServer, embedder: OpenAIEmbeddingModel
) -> None:
    vectors = await embedder.embed(["alpha", "beta", "alpha"])
    assert len(vectors) == 3
    assert all(len(v) == 384 for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    # asked as base64 (the default): the server's numbers as float32, exactly
    assert vectors[0] == np.asarray(fake_vector("alpha", 384), dtype=np.float32).tolist()
    sent = fake_openai_server.last_body[EMBED]
    assert sent == {"model": EMBED, "encoding_format": "base64", "input": ["alpha", "beta", "alpha"]}
    assert embedder.dimensions is None


async def test_embed_of_nothing_sends_no_request(
    fake_openai_server: FakeOpenAIServer, embedder: OpenAIEmbeddingModel
) -> None:
    assert await embedder.embed([]) == []
    assert fake_openai_server.total_requests == 0


async def test_embed_dimensions_not_sent_unless_params_ask(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    fake_openai_server.set_dimensions(EMBED, 1024)
    plain = provider.embedding_model("e1", embed_config(dimensions=1024))
    assert plain.dimensions == 1024
    assert len((await plain.embed(["x"]))[0]) == 1024
    assert "dimensions" not in fake_openai_server.last_body[EMBED]
    # params go into the request as they are: this is how a user asks for "dimensions".
    shortened = provider.embedding_model(
        "e2",
        ModelConfig(
            provider="nim",
            model=EMBED,
            kind="embedding",
            dimensions=256,
            params={"dimensions": 256, "input_type": "query"},
        ),
    )
    assert len((await shortened.embed(["x"]))[0]) == 256
    assert fake_openai_server.last_body[EMBED]["input_type"] == "query"


async def test_embed_orders_vectors_by_index(
    fake_openai_server: FakeOpenAIServer, embedder: OpenAIEmbeddingModel
) -> None:
    shuffled = {
        "data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1, 0]},  # ints are numbers too
        ]
    }
    fake_openai_server.script(EMBED, [FakeResponse(200, json=shuffled)])
    assert await embedder.embed(["a", "b"]) == [[1.0, 0.0], [0.0, 1.0]]


async def test_embed_takes_floats_when_the_config_asks_for_them_and_refuses_broken_base64(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    floats = provider.embedding_model("floats", embed_config(encoding_format="float"))
    assert await floats.embed(["alpha"]) == [fake_vector("alpha", 384)]  # the JSON numbers, exactly
    assert fake_openai_server.last_body[EMBED]["encoding_format"] == "float"

    embedder = provider.embedding_model("embedder", embed_config())
    for broken in ["not base64!", "AAA", "AAAAAAA="]:  # bad characters; padding; 5 bytes (not float32s)
        fake_openai_server.script(EMBED, [FakeResponse(200, json={"data": [{"index": 0, "embedding": broken}]})])
        with pytest.raises(ModelError) as caught:
            await embedder.embed(["a"])
        assert caught.value.error_class is ErrorClass.BAD_RESPONSE
        assert "data[0].embedding is not base64 of float32 numbers" in str(caught.value)
    fake_openai_server.script(EMBED, [FakeResponse(200, json={"data": [{"index": 0, "embedding": "AADAfw=="}]})])
    with pytest.raises(ModelError, match="NaN or infinity"):  # base64 of a float32 NaN: checked as numbers are
        await embedder.embed(["a"])


async def test_an_embedding_answer_is_a_list_of_float_lists_that_carries_its_checked_matrix(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    embedder = provider.embedding_model("embedder", embed_config())
    vectors = await embedder.embed(["alpha", "beta"])
    expected = [np.float32(x).item() for x in fake_vector("alpha", 384)]  # base64 carries float32
    assert vectors[0] == expected and type(vectors[0]) is list and type(vectors[0][0]) is float
    assert isinstance(vectors, Vectors) and vectors.matrix.shape == (2, 384) and vectors.matrix.dtype == np.float64
    assert vectors.matrix.tolist() == vectors
    with pytest.raises(ValueError):  # read-only: a plugin changing the lists cannot reach the gates' matrix
        vectors.matrix[0, 0] = 1.0
    again = pickle.loads(pickle.dumps(vectors))  # crosses to Ray workers as what it is
    assert isinstance(again, Vectors) and again == vectors and again.matrix.tolist() == vectors.matrix.tolist()
    vectors[0][0] = 9.0
    assert vectors.matrix[0, 0] != 9.0
    # Mixed encodings in one answer, and an integer no float holds
    mixed = {"data": [{"index": 0, "embedding": [1, 0.5]}, {"index": 1, "embedding": "AACAPwAAAD8="}]}
    fake_openai_server.script(EMBED, [FakeResponse(200, json=mixed)])
    assert await embedder.embed(["a", "b"]) == [[1.0, 0.5], [1.0, 0.5]]
    huge = {"data": [{"index": 0, "embedding": [10**400, 1]}]}
    fake_openai_server.script(EMBED, [FakeResponse(200, body=json.dumps(huge))])
    with pytest.raises(ModelError) as caught:
        await embedder.embed(["a"])
    assert caught.value.error_class is ErrorClass.BAD_RESPONSE and "too large for a float" in str(caught.value)


async def test_endpoint_identity_covers_everything_that_changes_the_request(
    provider: OpenAIProvider,
) -> None:
    cfg = provider.config
    other_key = cfg.model_copy(update={"api_key": SecretStr("a-different-key-123456")})
    same = endpoint_identity(cfg, chat_config())
    assert same == endpoint_identity(cfg, chat_config())
    assert same != endpoint_identity(cfg, chat_config(temperature=0))  # params change the request
    assert same != endpoint_identity(other_key, chat_config())  # so does the key
    assert same != endpoint_identity(cfg, embed_config())
    assert "a-different-key-123456" not in repr(endpoint_identity(other_key, chat_config()))
    # The handle itself carries none of it: the container reads identities from config.
    handle = provider.chat_model("a", chat_config())
    assert not hasattr(handle, "endpoint_key") and endpoint_key(handle)[0] == "object"


async def test_attempts_are_counted_per_http_attempt(
    fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel
) -> None:
    fake_openai_server.script(CHAT, [503, 502])
    counter = Attempts()
    token = attempt_log.set(counter)
    try:
        await chat.complete("hi")
    finally:
        attempt_log.reset(token)
    assert counter.count == 3


# --- error classes -----------------------------------------------------------------------

MISSING_MODEL_400 = FakeResponse(
    400, json={"error": {"message": "The model `nope` does not exist.", "type": "invalid"}}
)
OTHER_400 = FakeResponse(400, json={"error": {"message": "max_tokens must be positive"}})


@pytest.mark.parametrize(
    ("scripted", "error_class", "requests"),
    [
        (401, ErrorClass.AUTH, 1),
        (403, ErrorClass.AUTH, 1),
        (404, ErrorClass.NOT_FOUND, 1),
        (MISSING_MODEL_400, ErrorClass.NOT_FOUND, 1),
        (OTHER_400, ErrorClass.BAD_RESPONSE, 1),
        (500, ErrorClass.SERVER_ERROR, 1),  # not in the retried set (502/503/504)
        (502, ErrorClass.SERVER_ERROR, 3),
        (503, ErrorClass.SERVER_ERROR, 3),
        (504, ErrorClass.SERVER_ERROR, 3),
        ("malformed", ErrorClass.BAD_RESPONSE, 1),
        ("reset", ErrorClass.UNREACHABLE, 3),
    ],
    ids=str,
)
async def test_failures_are_classified_and_retried_only_when_transient(
    fake_openai_server: FakeOpenAIServer,
    chat: OpenAIChatModel,
    scripted: Any,
    error_class: ErrorClass,
    requests: int,
) -> None:
    fake_openai_server.script(CHAT, [scripted] * 5)
    with pytest.raises(ModelError) as caught:
        await chat.complete("hi")
    err = caught.value
    assert err.error_class is error_class
    assert err.transient == (error_class in {ErrorClass.SERVER_ERROR, ErrorClass.RATE_LIMITED, ErrorClass.UNREACHABLE})
    assert err.target == "writer"
    assert err.attempts == requests
    assert fake_openai_server.requests[CHAT] == requests
    assert str(err).startswith(f"writer: {error_class.value}: ")


async def test_wrong_api_key_fails_after_exactly_one_request(
    fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel
) -> None:
    fake_openai_server.require_api_key("sk-someone-else")
    with pytest.raises(ModelError) as caught:
        await chat.complete("hi")
    assert caught.value.error_class is ErrorClass.AUTH
    assert "api_key" in caught.value.message
    assert fake_openai_server.requests[CHAT] == 1


async def test_unknown_model_is_not_found(fake_openai_server: FakeOpenAIServer, embedder: OpenAIEmbeddingModel) -> None:
    fake_openai_server.known_models = {CHAT}
    with pytest.raises(ModelError) as caught:
        await embedder.embed(["x"])
    assert caught.value.error_class is ErrorClass.NOT_FOUND
    assert EMBED in caught.value.message
    assert fake_openai_server.requests[EMBED] == 1


async def test_503_then_200_succeeds_in_exactly_two_requests(
    fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel
) -> None:
    fake_openai_server.script(CHAT, [503])
    assert await chat.complete("hello") == "answer to: hello"
    assert fake_openai_server.requests[CHAT] == 2


async def test_reset_then_200_succeeds(fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel) -> None:
    fake_openai_server.script(CHAT, ["reset"])
    assert await chat.complete("hello") == "answer to: hello"
    assert fake_openai_server.requests[CHAT] == 2


async def test_retry_after_is_honoured(fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel) -> None:
    fake_openai_server.script(CHAT, [FakeResponse(429, headers={"Retry-After": "0.4"})])
    start = time.monotonic()
    assert await chat.complete("hello") == "answer to: hello"
    assert time.monotonic() - start >= 0.38  # backoff_s is 0.01: the wait is the header's
    assert fake_openai_server.requests[CHAT] == 2


async def test_rate_limited_error_carries_retry_after(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    limited = make_provider(fake_openai_server.url, rate_limit_wait_s=1)  # a 7 s wait is past it
    model = limited.chat_model("w", chat_config())
    fake_openai_server.script(CHAT, [FakeResponse(429, headers={"Retry-After": "7"})])
    try:
        with pytest.raises(ModelError) as caught:
            await model.complete("hi")
    finally:
        await limited.aclose()
    assert caught.value.error_class is ErrorClass.RATE_LIMITED
    assert caught.value.retry_after == 7.0


def test_retry_after_parsing_is_capped_and_tolerant() -> None:
    assert _parse_retry_after("2") == 2.0
    assert _parse_retry_after("3600") == MAX_RETRY_WAIT_S
    assert _parse_retry_after("-5") == 0.0
    assert _parse_retry_after("soon") is None
    assert _parse_retry_after(None) is None
    assert _parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


async def test_hang_times_out_with_timeout_class(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    p = make_provider(fake_openai_server.url, timeout_s=0.3, retries=0)
    try:
        fake_openai_server.script(CHAT, ["hang"])
        start = time.monotonic()
        with pytest.raises(ModelError) as caught:
            await p.chat_model("writer", chat_config()).complete("hi")
        assert time.monotonic() - start < 10  # the 0.3 s timeout, not the 1 h hang (generous: a loaded machine)
    finally:
        await p.aclose()
    assert caught.value.error_class is ErrorClass.TIMEOUT
    assert "timeout_s" in caught.value.message
    # The client hung up, so the server's handler ends too.
    for _ in range(100):
        if fake_openai_server.in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert fake_openai_server.in_flight == 0


async def test_hang_is_retried(fake_openai_server: FakeOpenAIServer) -> None:
    p = make_provider(fake_openai_server.url, timeout_s=0.3, retries=1)
    try:
        fake_openai_server.script(CHAT, ["hang"])
        assert await p.chat_model("writer", chat_config()).complete("hi") == "answer to: hi"
    finally:
        await p.aclose()
    assert fake_openai_server.requests[CHAT] == 2


async def test_connection_refused_is_unreachable_and_retried() -> None:
    p = make_provider(f"http://127.0.0.1:{closed_port()}/v1", retries=2)
    try:
        with pytest.raises(ModelError) as caught:
            await p.embedding_model("embedder", embed_config()).embed(["x"])
    finally:
        await p.aclose()
    assert caught.value.error_class is ErrorClass.UNREACHABLE
    assert caught.value.attempts == 3
    assert p.requests == {"embedder": 3}
    assert "127.0.0.1" in caught.value.message


# --- bad response shapes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {"choices": []},
        {"choices": [{"message": {"role": "assistant"}}]},
        {"choices": [{"message": {"content": None}, "finish_reason": "length"}]},
        {"choices": [{"message": {"content": ["not", "text"]}}]},
    ],
    ids=["list", "no-choices", "no-content", "null-content", "list-content"],
)
async def test_chat_bad_shapes_are_bad_response(
    fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel, body: Any
) -> None:
    fake_openai_server.script(CHAT, [FakeResponse(200, json=body)])
    with pytest.raises(ModelError) as caught:
        await chat.complete("hi")
    assert caught.value.error_class is ErrorClass.BAD_RESPONSE
    assert fake_openai_server.requests[CHAT] == 1


async def test_chat_empty_text_is_returned_for_the_preflight_to_judge(
    fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel
) -> None:
    fake_openai_server.script(CHAT, ["empty_text"])
    assert await chat.complete("hi") == ""


@pytest.mark.parametrize(
    "body",
    [
        {"data": "nope"},
        {"data": [{"index": 0, "embedding": [0.1]}]},  # one vector for two texts
        {"data": [{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}]},
        {"data": [{"index": 0, "embedding": [0.1]}, {"index": 5, "embedding": [0.2]}]},
        {"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": [0.2]}]},
        {"data": [{"index": 0, "embedding": [0.1, "x"]}, {"index": 1, "embedding": [0.2]}]},
        {"data": [{"index": 0, "embedding": [True]}, {"index": 1, "embedding": [0.2]}]},
        {"data": [None, {"index": 1, "embedding": [0.2]}]},
    ],
    ids=["not-list", "count", "dup-index", "bad-index", "base64", "string", "bool", "null"],
)
async def test_embedding_bad_shapes_are_bad_response(
    fake_openai_server: FakeOpenAIServer, embedder: OpenAIEmbeddingModel, body: Any
) -> None:
    fake_openai_server.script(EMBED, [FakeResponse(200, json=body)])
    with pytest.raises(ModelError) as caught:
        await embedder.embed(["a", "b"])
    assert caught.value.error_class is ErrorClass.BAD_RESPONSE
    assert fake_openai_server.requests[EMBED] == 1


@pytest.mark.parametrize(
    ("symbol", "dimensions", "problem"),
    [
        ("empty_vector", None, "data[0].embedding is empty"),
        ("nan", None, "data[0].embedding holds nan (NaN or infinity)"),
        ("wrong_dimensions", 384, "data[0].embedding has 385 dimensions, but dimensions is set to 384"),
        ("one_wrong_dimension", None, "data[1].embedding has 385 dimensions, but data[0] has 384"),
    ],
)
async def test_an_embedding_answer_of_bad_values_is_bad_response_before_anything_uses_it(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider, symbol: str, dimensions: int | None, problem: str
) -> None:
    # The one check every answer passes (issue 49 item 22): a generator never gets it,
    # the response cache never keeps it.
    embedder = provider.embedding_model("embedder", embed_config(dimensions=dimensions))
    fake_openai_server.script(EMBED, [symbol])
    with pytest.raises(ModelError) as caught:
        await embedder.embed(["a", "b"])
    assert caught.value.error_class is ErrorClass.BAD_RESPONSE
    assert problem in caught.value.message


async def test_an_embedding_answer_of_another_length_passes_when_dimensions_is_not_set(
    fake_openai_server: FakeOpenAIServer, embedder: OpenAIEmbeddingModel
) -> None:
    fake_openai_server.script(EMBED, ["wrong_dimensions"])  # 385 for each text: one length, no expectation
    assert [len(v) for v in await embedder.embed(["a", "b"])] == [385, 385]


# --- concurrency and the shared session --------------------------------------------------


async def test_max_concurrency_is_enforced(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.set_latency(CHAT, 0.05)
    p = make_provider(fake_openai_server.url, max_concurrency=4)
    try:
        model = p.chat_model("writer", chat_config())
        answers = await asyncio.gather(*(model.complete(f"q{i}") for i in range(50)))
    finally:
        await p.aclose()
    assert answers == [f"answer to: q{i}" for i in range(50)]
    assert fake_openai_server.peak_in_flight == 4
    assert p.peak_in_flight == 4
    assert fake_openai_server.requests[CHAT] == 50


async def test_models_of_a_provider_share_one_cap_and_one_session(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    fake_openai_server.set_latency(CHAT, 0.03)
    fake_openai_server.set_latency(EMBED, 0.03)
    p = make_provider(fake_openai_server.url, max_concurrency=3)
    try:
        chat = p.chat_model("writer", chat_config())
        other = p.chat_model("critic", chat_config(temperature=0))
        embedder = p.embedding_model("embedder", embed_config())
        assert p.client is None  # created lazily, inside the running loop
        await chat.complete("first")
        session = p.client
        assert session is not None
        await asyncio.gather(
            *(chat.complete(f"c{i}") for i in range(10)),
            *(other.complete(f"o{i}") for i in range(10)),
            *(embedder.embed([f"e{i}"]) for i in range(10)),
        )
        assert p.client is session
    finally:
        await p.aclose()
    assert fake_openai_server.peak_in_flight == 3
    assert p.requests == {"writer": 11, "critic": 10, "embedder": 10}


async def test_aclose_closes_the_session_and_is_idempotent(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    p = make_provider(fake_openai_server.url)
    await p.chat_model("writer", chat_config()).complete("hi")
    client = p.client
    assert client is not None and not client.closed
    await p.aclose()
    assert client.closed and p.client is None
    await p.aclose()


def test_provider_can_be_used_again_from_a_new_loop_after_aclose(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    p = make_provider(fake_openai_server.url)
    model = p.chat_model("writer", chat_config())

    async def use() -> str:
        try:
            return await model.complete("again")
        finally:
            await p.aclose()

    assert asyncio.run(use()) == "answer to: again"
    assert asyncio.run(use()) == "answer to: again"  # e.g. a container entered twice
    assert fake_openai_server.requests[CHAT] == 2


# --- secrets -----------------------------------------------------------------------------

ECHOES = [
    "echo_auth",
    FakeResponse(400, echo_auth=True),
    FakeResponse(401, json={"error": {"message": "bad"}}, echo_auth=True),
    FakeResponse(500, body=f"upstream said: Authorization: Bearer {KEY}"),
    FakeResponse(400, body="x" * 190 + KEY),  # the key straddles the truncation point
    FakeResponse(200, body=f"<html>proxy login for {KEY}</html>"),
    FakeResponse(503, json={"detail": f"token {KEY} throttled"}),
]


@pytest.mark.parametrize("scripted", ECHOES, ids=range(len(ECHOES)))
async def test_api_key_never_appears_in_errors(
    fake_openai_server: FakeOpenAIServer, provider: OpenAIProvider, scripted: Any
) -> None:
    model = provider.chat_model("writer", chat_config())
    fake_openai_server.script(CHAT, [scripted] * 3)
    with pytest.raises(ModelError) as caught:
        await model.complete("hi")
    err = caught.value
    texts = [
        str(err),
        repr(err),
        err.message,
        "".join(traceback.format_exception(err)),
        repr(provider),
        repr(model),
        repr(provider.config),
        repr(provider.embedding_model("e", embed_config())),
    ]
    for text in texts:
        assert "CANARY" not in text


async def test_api_key_is_sent_as_bearer_header_only(
    fake_openai_server: FakeOpenAIServer, chat: OpenAIChatModel
) -> None:
    # require_api_key(KEY) is set by the fixture: success proves the header is right.
    assert await chat.complete("hi") == "answer to: hi"
    assert KEY not in str(fake_openai_server.last_body[CHAT])


async def test_no_api_key_sends_no_authorization(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.require_api_key("needed")
    p = make_provider(fake_openai_server.url, api_key=None)
    try:
        with pytest.raises(ModelError) as caught:
            await p.chat_model("writer", chat_config()).complete("hi")
    finally:
        await p.aclose()
    assert caught.value.error_class is ErrorClass.AUTH


def test_api_key_config_is_a_secret() -> None:
    p = make_provider("http://127.0.0.1:1/v1")
    assert isinstance(p.config.api_key, SecretStr)
    assert "CANARY" not in repr(p) + repr(vars(p))


async def test_a_placeholder_key_does_not_mangle_messages(fake_openai_server: FakeOpenAIServer) -> None:
    from genwire.providers.openai import MIN_SECRET_CHARS

    placeholder = make_provider(fake_openai_server.url, retries=0, api_key="1")
    assert len("1") < MIN_SECRET_CHARS
    fake_openai_server.script(CHAT, [404])
    try:
        with pytest.raises(ModelError) as caught:
            await placeholder.chat_model("w", chat_config()).complete("hi")
    finally:
        await placeholder.aclose()
    assert "HTTP 404 from POST http://127.0.0.1:" in caught.value.message and "***" not in caught.value.message
