"""Benchmark of the local provider's embedded models, on this machine's CPU.

    python benchmarks/local_models.py [--sentences 256] [--chat-runs 5]

Prints load times, embedding throughput through ``LocalEmbeddingModel.embed`` (one batched
call) against the baseline of one call per sentence, and chat reply latency / generation
speed for a 32-token reply, also with two calls in flight against one at a time. Numbers
vary with other load on the box; run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from genwire.config.schema import LocalProviderConfig, ModelConfig
from genwire.providers import local
from genwire.providers.local import runtime as local_runtime

SUBJECTS = ["The cat", "A young engineer", "The old bridge", "Our team", "The river", "A small robot"]
VERBS = ["quietly watches", "carefully repairs", "slowly crosses", "happily explains", "rarely visits"]
OBJECTS = ["the busy market.", "a broken clock.", "the frozen lake.", "an unfinished poem.", "the city."]


def sentences(n: int) -> list[str]:
    """Distinct, realistic-length sentences (8-12 tokens), deterministic."""
    out = []
    for i in range(n):
        s, v, o = SUBJECTS[i % 6], VERBS[(i // 6) % 5], OBJECTS[(i // 30) % 5]
        out.append(f"{s} {v} {o} (#{i})")
    return out


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await fn()
    return time.perf_counter() - start, result


async def main(n_sentences: int, chat_runs: int) -> None:
    provider = local.LocalProvider("local", LocalProviderConfig(kind="local", max_concurrency=2))
    embed_config = ModelConfig(provider="local", model="all-MiniLM-L6-v2", kind="embedding")
    chat_config = ModelConfig(provider="local", model="SmolLM2-135M-Instruct", kind="chat")
    embedder = provider.embedding_model("embedder", embed_config)
    chat = provider.chat_model("writer", chat_config)

    print(f"CPUs: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f} (other load skews all numbers)")
    print("\n== load (cold, in this process) ==")
    load_embed, _ = await timed(embedder.load)
    load_chat, _ = await timed(chat.load)
    print(f"embedding model  {load_embed:6.2f} s")
    print(f"chat model       {load_chat:6.2f} s")

    print(f"\n== embedding: {n_sentences} sentences ==")
    texts = sentences(n_sentences)
    await embedder.embed(texts[:8])  # warm-up: first runs allocate buffers
    batched = []
    for _ in range(3):
        seconds, vectors = await timed(lambda: embedder.embed(texts))
        batched.append(seconds)
    assert len(vectors) == n_sentences and len(vectors[0]) == 384
    best = min(batched)
    print(f"batched, one embed() call     {n_sentences / best:7.0f} sentences/s  ({best:.2f} s, best of 3)")
    singles = texts[:64]
    seconds, _ = await timed(lambda: asyncio.gather(*(embedder.embed([t]) for t in singles)))
    print(
        f"baseline, one call per text   {len(singles) / seconds:7.0f} sentences/s  "
        f"({seconds / len(singles) * 1000:.1f} ms/sentence, 64 calls, 2 in flight)"
    )
    long_texts = [" ".join(texts[i : i + 24]) for i in range(32)]  # ~256 tokens each
    seconds, _ = await timed(lambda: embedder.embed(long_texts))
    print(f"batched, 256-token passages   {len(long_texts) / seconds:7.1f} passages/s")

    print("\n== chat: 32-token replies ==")
    runtime = local.load_model(local.CHAT_SPEC)
    assert isinstance(runtime, local_runtime.SmolLMRuntime)
    prompt = "Write a short paragraph about the sea."
    # ignore_eos keeps every reply exactly 32 tokens, so runs are comparable.
    params: dict[str, Any] = {"max_tokens": 32, "temperature": 0.7, "ignore_eos": True}
    request = chat.build_request(prompt, None, params)
    latencies: list[float] = []
    gen_speeds: list[float] = []
    prompt_speeds: list[float] = []
    for seed in range(chat_runs):
        call = functools.partial(asyncio.to_thread, runtime.complete, {**request, "seed": seed})
        seconds, response = await timed(call)
        latencies.append(seconds)
        timings = response["timings"]  # llama.cpp's own measurements
        gen_speeds.append(timings["predicted_per_second"])
        prompt_speeds.append(timings["prompt_per_second"])
    print(f"reply latency (median of {chat_runs})  {statistics.median(latencies):6.2f} s")
    print(f"generation                  {statistics.median(gen_speeds):6.1f} tokens/s")
    print(f"prompt processing           {statistics.median(prompt_speeds):6.1f} tokens/s")

    seconds, _ = await timed(lambda: chat.complete(prompt, **params))
    print(f"via LocalChatModel.complete {seconds:6.2f} s per reply")
    for label, in_flight in (("one at a time", 1), ("two in flight", 2)):
        replies = 4
        start = time.perf_counter()
        for _ in range(replies // in_flight):
            await asyncio.gather(*(chat.complete(prompt, **params) for _ in range(in_flight)))
        seconds = time.perf_counter() - start
        print(f"{label:<16}            {replies * 32 / seconds:6.1f} tokens/s overall ({replies} replies)")

    print("\n== mixed: 4 chat replies + 4 embed() calls of the sentences, all at once ==")
    wide = local.LocalProvider("wide", LocalProviderConfig(kind="local", max_concurrency=8))
    wide_chat = wide.chat_model("writer", chat_config)
    wide_embed = wide.embedding_model("embedder", embed_config)

    async def one_reply() -> float:
        seconds, _ = await timed(lambda: wide_chat.complete(prompt, **params))
        return seconds

    async def mixed() -> tuple[float, list[float]]:
        start = time.perf_counter()
        results = await asyncio.gather(*(one_reply() for _ in range(4)), *(wide_embed.embed(texts) for _ in range(4)))
        chat_latencies = [r for r in results if isinstance(r, float)]
        return time.perf_counter() - start, chat_latencies

    gate = local_runtime._cpu_gate
    results: dict[str, list[tuple[float, list[float]]]] = {"gate": [], "none": []}
    try:
        for _ in range(2):  # alternated, so a burst of outside load hits both variants
            for variant in ("gate", "none"):
                # Baseline: every call runs side by side, as the threads would without it.
                local_runtime._cpu_gate = gate if variant == "gate" else threading.BoundedSemaphore(64)
                results[variant].append(await mixed())
    finally:
        local_runtime._cpu_gate = gate
    for variant, label in (("gate", "CPU gate (default)"), ("none", "no gate (baseline)")):
        total, chat_latencies = min(results[variant])
        print(
            f"{label:<20} {total:5.2f} s total, chat reply latency median "
            f"{statistics.median(chat_latencies):.2f} s, max {max(chat_latencies):.2f} s (best of 2)"
        )

    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    await provider.aclose()
    await wide.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--chat-runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.sentences, args.chat_runs))
