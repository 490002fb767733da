"""The six built-in generators, driven directly with fakes (no container, no network)."""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from genwire.errors import DatasetError
from genwire.generators.base import Generator
from genwire.generators.builtin.common import derive_seed
from genwire.generators.builtin.embedding import Embedding
from genwire.generators.builtin.embedding_dedup import EmbeddingDedup
from genwire.generators.builtin.hard_negatives import HardNegatives
from genwire.generators.builtin.llm_text import LLMText
from genwire.generators.builtin.sampler import Sampler
from genwire.generators.builtin.seed_dataset import SeedDataset
from genwire.generators.outcome import RowFailure, gather_rows
from genwire.generators.resources import Resources
from genwire.testing.fakes import FakeChatModel, FakeEmbeddingModel
from genwire.testing.vectors import hash_vector


class MemoryDataset:
    """A dataset held in a list: the Dataset protocol plus ``row(i)`` and ``load()``."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows
        self.loads = 0

    @property
    def columns(self) -> list[str]:
        return sorted({key for row in self._rows for key in row})

    def __len__(self) -> int:
        return len(self._rows)

    async def rows(self) -> AsyncIterator[dict[str, Any]]:
        for row in self._rows:
            yield dict(row)

    def sample(self, n: int, seed: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows[:n]]

    def row(self, i: int) -> dict[str, Any]:
        return dict(self._rows[i])

    def load(self) -> None:
        self.loads += 1


class StreamOnlyDataset(MemoryDataset):
    """No random access: seed-dataset must fall back to reading rows()."""

    row = None  # type: ignore[assignment]


class VectorEmbedder:
    """Embeds texts to hand-picked vectors, for threshold tests."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.calls: list[list[str]] = []

    @property
    def dimensions(self) -> int:
        return len(next(iter(self.table.values())))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.table[t] for t in texts]


def make(cls: type[Generator[Any]], params: dict[str, Any], seed: int = 7, **slots: Any) -> Any:
    validated: BaseModel = cls.params_model.model_validate(params)
    return cls(
        column="c",
        params=validated,
        resources=Resources(cls.metadata.name, "c", slots),
        seed=seed,
    )


def indexed(n: int, start: int = 0, **fields: Any) -> list[dict[str, Any]]:
    return [dict(fields) for _ in range(start, start + n)]


async def at_rows(gen: Generator[Any], n: int, start: int = 0, **fields: Any) -> list[Any]:
    """What the engine does: rows of user columns only, their run indices beside them."""
    return await gen.generate_batch(indexed(n, start, **fields), list(range(start, start + n)))


def params_error(cls: type[Generator[Any]], params: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        cls.params_model.model_validate(params)
    return str(info.value)


# ---------------------------------------------------------------- outcome


async def test_gather_rows_turns_exceptions_into_row_failures() -> None:
    async def ok(v: int) -> int:
        return v

    async def bad() -> int:
        raise RuntimeError("boom")

    out = await gather_rows([ok(1), bad(), ok(3)])
    assert out[0] == 1 and out[2] == 3
    assert isinstance(out[1], RowFailure)
    assert isinstance(out[1].error, RuntimeError)
    assert out[1].message == "RuntimeError: boom"


async def test_gather_rows_propagates_cancellation() -> None:
    async def cancelled() -> int:
        raise asyncio.CancelledError

    async def ok() -> int:
        return 1

    with pytest.raises(asyncio.CancelledError):
        await gather_rows([ok(), cancelled()])


async def test_gather_rows_starts_one_row_per_turn_of_the_event_loop() -> None:
    """Answers arriving meanwhile are read between two rows' first steps, not after a
    whole batch of them (SPEC: speed; the rows still start, and end, in order)."""
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    started: list[int] = []

    async def row(v: int) -> int:
        started.append(turns)
        await asyncio.sleep(0)
        return v

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        out = await gather_rows([row(v) for v in range(8)])
    finally:
        ticking.cancel()
    assert out == list(range(8))
    assert started == sorted(started) and len(set(started)) == 8, started


async def test_gather_rows_cancelled_while_starting_stops_the_started_rows_and_never_starts_the_rest() -> None:
    began: list[int] = []
    ended: list[int] = []

    async def row(v: int) -> int:
        began.append(v)
        try:
            await asyncio.sleep(60)
        finally:
            ended.append(v)
        return v

    rows = [row(v) for v in range(50)]
    gathering = asyncio.create_task(gather_rows(rows))
    while len(began) < 3:
        await asyncio.sleep(0)
    gathering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathering
    for _ in range(3):
        await asyncio.sleep(0)
    assert 3 <= len(began) < 50
    assert sorted(ended) == sorted(began)  # every started row was cancelled
    assert all(r.cr_frame is None for r in rows)  # the rest closed: never started, no warning


# ---------------------------------------------------------------- sampler


async def test_sampler_category_weights_distribution() -> None:
    gen = make(Sampler, {"kind": "category", "values": ["a", "b", "c"], "weights": [1, 2, 7]})
    values = await at_rows(gen, 2000)
    counts = Counter(values)
    assert set(counts) == {"a", "b", "c"}
    for value, expected in {"a": 0.1, "b": 0.2, "c": 0.7}.items():
        assert abs(counts[value] / 2000 - expected) < 0.04


async def test_sampler_is_seeded_reproducible_and_batch_independent() -> None:
    params = {"kind": "category", "values": list(range(10))}
    one = await at_rows(make(Sampler, params), 50)
    again = await at_rows(make(Sampler, params), 50)
    other = await at_rows(make(Sampler, params, seed=8), 50)
    assert one == again
    assert one != other
    # Same values whatever the batching, even with batches run out of order.
    gen = make(Sampler, params)
    second = await at_rows(gen, 30, start=20)
    first = await at_rows(gen, 20)
    assert first + second == one
    # The column name is part of the seed: two sampler columns do not mirror each other.
    other_col = Sampler(
        column="d",
        params=Sampler.params_model.model_validate(params),
        resources=Resources("sampler", "d", {}),
        seed=7,
    )
    assert await at_rows(other_col, 50) != one


async def test_sampler_uniform_integer_bounds_inclusive() -> None:
    gen = make(Sampler, {"kind": "uniform", "low": 1, "high": 3, "integer": True})
    values = await at_rows(gen, 300)
    assert all(type(v) is int for v in values)
    assert set(values) == {1, 2, 3}


async def test_sampler_uniform_float_bounds() -> None:
    gen = make(Sampler, {"kind": "uniform", "low": -0.5, "high": 0.5})
    values = await at_rows(gen, 500)
    assert all(isinstance(v, float) and -0.5 <= v <= 0.5 for v in values)
    assert len(set(values)) == 500


async def test_sampler_uuid_format_and_reproducible() -> None:
    values = await at_rows(make(Sampler, {"kind": "uuid"}), 100)
    assert len(set(values)) == 100
    for v in values:
        parsed = uuid.UUID(v)
        assert parsed.version == 4 and str(parsed) == v
        assert parsed.variant == uuid.RFC_4122
    assert await at_rows(make(Sampler, {"kind": "uuid"}), 100) == values
    assert await at_rows(make(Sampler, {"kind": "uuid"}, seed=1), 100) != values


async def test_sampler_draws_what_a_generator_seeded_per_row_draws() -> None:
    """The values stay those of one ``random.Random(derive_seed(seed, column, row))`` per
    row (earlier versions' values: a rerun's prompts, and so its cache keys, unchanged),
    however the sampler gets there."""

    def rng(i: int) -> random.Random:
        return random.Random(derive_seed(7, "c", i))

    rows = range(5000, 5300)
    values = await at_rows(make(Sampler, {"kind": "uuid"}), 300, start=5000)
    assert values == [str(uuid.UUID(int=rng(i).getrandbits(128), version=4)) for i in rows]
    values = await at_rows(make(Sampler, {"kind": "category", "values": list("abcde")}), 300, start=5000)
    assert values == [rng(i).choice(list("abcde")) for i in rows]
    weighted = {"kind": "category", "values": [1, 2, 3], "weights": [1.0, 2.0, 3.0]}
    values = await at_rows(make(Sampler, weighted), 300, start=5000)
    assert values == [rng(i).choices([1, 2, 3], weights=[1.0, 2.0, 3.0])[0] for i in rows]
    values = await at_rows(make(Sampler, {"kind": "uniform", "low": -1, "high": 1}), 300, start=5000)
    assert values == [rng(i).uniform(-1, 1) for i in rows]
    values = await at_rows(make(Sampler, {"kind": "uniform", "low": 0, "high": 9, "integer": True}), 300, start=5000)
    assert values == [rng(i).randint(0, 9) for i in rows]


async def test_sampler_rows_without_index_continue_a_cursor() -> None:
    params = {"kind": "uuid"}
    gen = make(Sampler, params)
    values = await gen.generate([{}, {}]) + await gen.generate([{}])
    assert values == await at_rows(make(Sampler, params), 3)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kind": "category", "values": ["a", "b"], "weights": [1]}, "weights has 1 entries"),
        ({"kind": "category", "values": ["a"], "weights": [-1]}, "greater than or equal to 0"),
        ({"kind": "category", "values": ["a", "b"], "weights": [0, 0]}, "all zero"),
        ({"kind": "category", "values": []}, "at least 1 item"),
        ({"kind": "uniform", "low": 3, "high": 3}, "low (3) must be less than high (3)"),
        ({"kind": "uniform", "low": 5, "high": 1}, "must be less than high"),
        ({"kind": "uniform", "low": 0.5, "high": 2, "integer": True}, "whole-number bounds"),
        ({"kind": "gaussian"}, "unknown sampler kind 'gaussian'"),
        ({"values": ["a"]}, "need 'kind'"),
        ({"kind": "uuid", "values": ["a"]}, "Extra inputs are not permitted"),
    ],
)
def test_sampler_bad_params(params: dict[str, Any], message: str) -> None:
    assert message in params_error(Sampler, params)


# ---------------------------------------------------------------- seed-dataset

ROWS = [{"id": i, "text": f"passage {i}"} for i in range(10)]


async def test_seed_dataset_in_order_cycles() -> None:
    dataset = MemoryDataset(ROWS[:4])
    gen = make(SeedDataset, {}, dataset=dataset)
    out = await at_rows(gen, 10)
    assert [r["id"] for r in out] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert out[0] == {"id": 0, "text": "passage 0"}
    assert dataset.loads == 1
    await at_rows(gen, 3, start=10)
    assert dataset.loads == 1


async def test_seed_dataset_shuffle_permutes_each_cycle() -> None:
    gen = make(SeedDataset, {"shuffle": True}, dataset=MemoryDataset(ROWS))
    ids = [r["id"] for r in await at_rows(gen, 30)]
    cycles = [ids[0:10], ids[10:20], ids[20:30]]
    assert all(sorted(c) == list(range(10)) for c in cycles)
    assert cycles[0] != list(range(10))
    assert len({tuple(c) for c in cycles}) == 3  # reshuffled every cycle
    again = make(SeedDataset, {"shuffle": True}, dataset=MemoryDataset(ROWS))
    assert [r["id"] for r in await at_rows(again, 30)] == ids
    other = make(SeedDataset, {"shuffle": True}, seed=99, dataset=MemoryDataset(ROWS))
    assert [r["id"] for r in await at_rows(other, 30)] != ids


@pytest.mark.parametrize("shuffle", [False, True])
async def test_seed_dataset_batch_size_and_order_independent(shuffle: bool) -> None:
    whole = make(SeedDataset, {"shuffle": shuffle}, dataset=MemoryDataset(ROWS))
    expected = await at_rows(whole, 25)
    batched = make(SeedDataset, {"shuffle": shuffle}, dataset=MemoryDataset(ROWS))
    starts = list(range(0, 25, 3))
    results = await asyncio.gather(*(at_rows(batched, min(3, 25 - s), start=s) for s in reversed(starts)))
    assert [row for batch in reversed(results) for row in batch] == expected


async def test_seed_dataset_rows_are_independent_copies() -> None:
    gen = make(SeedDataset, {}, dataset=MemoryDataset([{"tags": ["a"]}]))
    first, second = await at_rows(gen, 2)
    first["tags"].append("b")
    assert second == {"tags": ["a"]}


async def test_seed_dataset_without_random_access_reads_rows() -> None:
    gen = make(SeedDataset, {}, dataset=StreamOnlyDataset(ROWS[:3]))
    assert [r["id"] for r in await at_rows(gen, 5)] == [0, 1, 2, 0, 1]


async def test_seed_dataset_empty_raises() -> None:
    gen = make(SeedDataset, {}, dataset=MemoryDataset([]))
    with pytest.raises(ValueError, match="dataset is empty"):
        await at_rows(gen, 1)


def test_seed_dataset_bad_params() -> None:
    assert "Extra inputs are not permitted" in params_error(SeedDataset, {"shufle": True})


# ---------------------------------------------------------------- llm-text


async def test_llm_text_renders_row_and_passes_model_params() -> None:
    model = FakeChatModel(lambda prompt: f"Q about: {prompt}")
    gen = make(
        LLMText,
        {
            "prompt": "Ask about: {{ passage.text }}",
            "system": "You write {{ style }} questions.",
            "temperature": 0.2,
            "max_tokens": 64,
        },
        model=model,
    )
    rows = [{"passage": {"text": f"t{i}"}, "style": "short"} for i in range(3)]
    out = await gen.generate(rows)
    assert out == [f"Q about: Ask about: t{i}" for i in range(3)]
    assert model.calls[0] == {
        "prompt": "Ask about: t0",
        "system": "You write short questions.",
        "temperature": 0.2,
        "max_tokens": 64,
    }


async def test_llm_text_without_system_sends_none() -> None:
    model = FakeChatModel("ok")
    gen = make(LLMText, {"prompt": "hi {{ name }}"}, model=model)
    assert await gen.generate([{"name": "x"}]) == ["ok"]
    assert model.calls == [{"prompt": "hi x", "system": None}]


def test_llm_text_reads_template_variables() -> None:
    params = LLMText.params_model.model_validate(
        {
            "prompt": "{% for i in range(2) %}{{ passage.text }}{{ loop.index }}{% endfor %}",
            "system": "{% set tone = 'dry' %}{{ persona.name }} {{ tone }}",
        }
    )
    assert LLMText.reads(params) == {"passage.text", "persona.name"}


async def test_llm_text_missing_field_fails_only_that_row() -> None:
    gen = make(LLMText, {"prompt": "{{ passage.text }}"}, model=FakeChatModel("ok"))
    rows = [
        {"passage": {"text": "a"}},
        {"passage": {"title": "no text"}},
        {},
    ]
    out = await gen.generate(rows)
    assert out[0] == "ok"
    for failure in out[1:]:
        assert isinstance(failure, RowFailure)
        assert "prompt template" in str(failure.error)
    assert "text" in str(out[1].error)
    assert "passage" in str(out[2].error)


async def test_llm_text_mapping_keys_win_over_dict_methods() -> None:
    model = FakeChatModel(lambda p: p)
    gen = make(LLMText, {"prompt": "{{ row.items }}/{{ row.keys }}"}, model=model)
    assert await gen.generate([{"row": {"items": "A", "keys": "B"}}]) == ["A/B"]


async def test_llm_text_empty_reply_is_row_failure() -> None:
    model = FakeChatModel(lambda p: "" if p == "2" else "  \n" if p == "3" else "fine")
    gen = make(LLMText, {"prompt": "{{ n }}"}, model=model)
    out = await gen.generate([{"n": i} for i in range(1, 4)])
    assert out[0] == "fine"
    for failure in out[1:]:
        assert isinstance(failure, RowFailure)
        assert str(failure.error) == "model returned empty text"


async def test_llm_text_model_error_is_row_failure() -> None:
    class Flaky:
        async def complete(self, prompt: str, *, system: str | None = None, **kw: Any) -> str:
            if prompt == "bad":
                raise ConnectionError("reset by peer")
            return "good"

    gen = make(LLMText, {"prompt": "{{ p }}"}, model=Flaky())
    out = await gen.generate([{"p": "ok"}, {"p": "bad"}])
    assert out[0] == "good"
    assert isinstance(out[1], RowFailure) and isinstance(out[1].error, ConnectionError)


def test_llm_text_template_syntax_error_names_template_and_line() -> None:
    message = params_error(LLMText, {"prompt": "line one\n{{ passage.text }\n"})
    assert "prompt template: syntax error on line 2" in message
    message = params_error(LLMText, {"prompt": "ok", "system": "{% if x %}never closed"})
    assert "system template: syntax error on line 1" in message


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "prompt\n  Field required"),
        ({"prompt": "   "}, "prompt must be a non-empty template"),
        ({"prompt": 5}, "valid string"),
        ({"prompt": "x", "sytem": "y"}, "did you mean 'system'"),
        ({"prompt": "{{ x | no_such_filter }}"}, "prompt template"),
    ],
)
def test_llm_text_bad_params(params: dict[str, Any], message: str) -> None:
    assert message in params_error(LLMText, params)


# ---------------------------------------------------------------- embedding


async def test_embedding_one_call_per_batch_and_row_failures() -> None:
    model = FakeEmbeddingModel(dimensions=8)
    gen = make(Embedding, {"column": "passage.text"}, model=model)
    rows = [
        {"passage": {"text": "alpha"}},
        {"passage": {"text": 42}},
        {"passage": {}},
        {"passage": {"text": "beta"}},
    ]
    out = await gen.generate(rows)
    assert model.calls == [["alpha", "beta"]]
    assert out[0] == pytest.approx(hash_vector("alpha", 8))
    assert out[3] == pytest.approx(hash_vector("beta", 8))
    assert all(isinstance(x, float) for x in out[0])
    assert isinstance(out[1], RowFailure) and "not a string" in str(out[1].error)
    assert isinstance(out[2], RowFailure) and "no 'text'" in str(out[2].error)
    await gen.generate([{"passage": {"text": "gamma"}}])
    assert len(model.calls) == 2


async def test_embedding_model_failure_fails_embedded_rows() -> None:
    class Broken:
        dimensions = 4

        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[math.nan] * 4 for _ in texts]

    gen = make(Embedding, {"column": "q"}, model=Broken())
    out = await gen.generate([{"q": "a"}])
    assert isinstance(out[0], RowFailure) and "non-finite" in str(out[0].error)


def test_embedding_reads_and_bad_params() -> None:
    params = Embedding.params_model.model_validate({"column": "passage.text"})
    assert Embedding.reads(params) == {"passage.text"}
    assert "expected a column name or 'column.field'" in params_error(Embedding, {"column": ""})
    assert "column.field" in params_error(Embedding, {"column": "a..b"})
    assert "Extra inputs" in params_error(Embedding, {"column": "a", "model": "x"})


# ---------------------------------------------------------------- embedding-dedup


async def test_dedup_removes_exact_duplicates_keeps_distinct() -> None:
    model = FakeEmbeddingModel(dimensions=64)
    gen = make(EmbeddingDedup, {"column": "qs"}, embedder=model)
    rows = [
        {"qs": ["what is x?", "what is y?", "what is x?", "why z?"]},
        {"qs": []},
        {"qs": ["why z?", "  ", "why z?"]},
    ]
    out = await gen.generate(rows)
    assert out == [["what is x?", "what is y?", "why z?"], [], ["why z?"]]
    # One call for the batch, each distinct text once, blanks never sent.
    assert model.calls == [["what is x?", "what is y?", "why z?"]]


async def test_dedup_text_field_returns_original_items() -> None:
    gen = make(EmbeddingDedup, {"column": "qs", "text_field": "q"}, embedder=FakeEmbeddingModel(16))
    a, b, a2 = {"q": "a", "n": 1}, {"q": "b", "n": 2}, {"q": "a", "n": 3}
    (kept,) = await gen.generate([{"qs": [a, b, a2]}])
    assert kept == [a, b] and kept[0] is a


async def test_dedup_threshold_on_near_duplicates() -> None:
    table = {"cat": [1.0, 0.0], "kitten": [0.95, 0.31], "car": [0.0, 1.0]}
    rows = [{"qs": ["cat", "kitten", "car"]}]
    loose = make(EmbeddingDedup, {"column": "qs"}, embedder=VectorEmbedder(table))
    assert await loose.generate(rows) == [["cat", "car"]]
    strict = make(EmbeddingDedup, {"column": "qs", "threshold": 0.99}, embedder=VectorEmbedder(table))
    assert await strict.generate(rows) == [["cat", "kitten", "car"]]


async def test_dedup_bad_rows_fail_alone() -> None:
    model = FakeEmbeddingModel(8)
    gen = make(EmbeddingDedup, {"column": "qs"}, embedder=model)
    out = await gen.generate(
        [
            {"qs": "not a list"},
            {"qs": [{"q": "mapping"}]},
            {"qs": ["ok", "ok"]},
        ]
    )
    assert isinstance(out[0], RowFailure) and "not a list" in str(out[0].error)
    assert isinstance(out[1], RowFailure) and "set text_field" in str(out[1].error)
    assert out[2] == ["ok"]


async def test_dedup_non_finite_vectors_fail_the_rows() -> None:
    table = {"a": [1.0, 0.0], "b": [math.nan, 1.0]}
    gen = make(EmbeddingDedup, {"column": "qs"}, embedder=VectorEmbedder(table))
    out = await gen.generate([{"qs": ["a", "b"]}, {"qs": []}])
    assert isinstance(out[0], RowFailure) and "non-finite" in str(out[0].error)
    assert out[1] == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"column": "qs", "threshold": 0}, "greater than 0"),
        ({"column": "qs", "threshold": 1.5}, "less than or equal to 1"),
        ({"threshold": 0.5}, "column\n  Field required"),
    ],
)
def test_dedup_bad_params(params: dict[str, Any], message: str) -> None:
    assert message in params_error(EmbeddingDedup, params)


# ---------------------------------------------------------------- hard-negatives

CORPUS = [{"id": f"p{i}", "text": f"passage number {i}", "source": "doc"} for i in range(70)]


def hard_negatives(
    params: dict[str, Any], corpus: list[dict[str, Any]] = CORPUS, dims: int = 32
) -> tuple[Any, FakeEmbeddingModel]:
    model = FakeEmbeddingModel(dims)
    gen = make(
        HardNegatives,
        {"column": "q", "positive": "passage", **params},
        embedder=model,
        corpus=MemoryDataset(corpus),
    )
    return gen, model


async def test_hard_negatives_top_k_excludes_positive() -> None:
    gen, _ = hard_negatives({"k": 4})
    # Query text equal to a passage makes that passage the nearest one: it is the positive.
    rows: list[dict[str, Any]] = [
        {"q": "passage number 5", "passage": CORPUS[5]},
        {"q": "passage number 9", "passage": "p9"},
    ]
    out = await gen.generate(rows)
    matrix = np.array([hash_vector(p["text"], 32) for p in CORPUS])
    for row, negatives, positive in zip(rows, out, ["p5", "p9"], strict=True):
        assert len(negatives) == 4
        assert all(set(n) == {"id", "text", "score"} for n in negatives)
        ids = [n["id"] for n in negatives]
        assert positive not in ids
        assert set(ids) <= {p["id"] for p in CORPUS}
        scores = [n["score"] for n in negatives]
        assert scores == sorted(scores, reverse=True)
        # They are the best of the rest, with cosine scores.
        sims = matrix @ np.array(hash_vector(row["q"], 32))
        sims[int(positive[1:])] = -np.inf
        best = [f"p{i}" for i in np.argsort(-sims)[:4]]
        assert ids == best
        assert scores[0] == round(float(sims.max()), 4)
        assert negatives[0]["text"] == CORPUS[int(ids[0][1:])]["text"]


async def test_hard_negatives_embeds_corpus_once_in_chunks() -> None:
    gen, model = hard_negatives({"k": 2})

    def batch(start: int) -> list[dict[str, Any]]:
        return [{"q": f"query {i}", "passage": f"p{i}"} for i in range(start, start + 3)]

    await asyncio.gather(gen.generate(batch(0)), gen.generate(batch(3)))
    await gen.generate(batch(6))
    corpus_calls = [c for c in model.calls if c[0].startswith("passage")]
    assert [len(c) for c in corpus_calls] == [64, 6]
    assert len(model.calls) == 2 + 3  # corpus chunks, then one call per batch of queries
    assert gen.resources.corpus.loads == 1


async def test_hard_negatives_excludes_same_text_and_caps_k() -> None:
    corpus = [
        {"id": 1, "text": "the answer"},
        {"id": 2, "text": "the answer"},  # a copy of the positive under another id
        {"id": 3, "text": "something else"},
        {"id": 4, "text": "   "},  # blank: never embedded, never returned
    ]
    gen, model = hard_negatives({"k": 5}, corpus=corpus)
    # Positive given as a string id while the corpus holds ints.
    (negatives,) = await gen.generate([{"q": "the question", "passage": "1"}])
    assert [n["id"] for n in negatives] == [3]
    assert model.calls[0] == ["the answer", "the answer", "something else"]


async def test_hard_negatives_corpus_embedding_failure_fails_batch_then_retries() -> None:
    class FailsOnce(FakeEmbeddingModel):
        failed = False

        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            if not self.failed:
                self.failed = True
                raise ConnectionError("server went away")
            return await super().embed(texts)

    model = FailsOnce(16)
    gen = make(
        HardNegatives,
        {"column": "q", "positive": "passage", "k": 1},
        embedder=model,
        corpus=MemoryDataset(CORPUS[:5]),
    )
    (first,) = await gen.generate([{"q": "x", "passage": "p0"}])
    assert isinstance(first, RowFailure) and isinstance(first.error, ConnectionError)
    (second,) = await gen.generate([{"q": "x", "passage": "p0"}])
    assert len(second) == 1 and second[0]["id"] != "p0"
    assert gen.resources.corpus.loads == 1  # the corpus is read once; only embedding retried


async def test_hard_negatives_bad_rows_fail_alone() -> None:
    gen, _ = hard_negatives({"k": 1})
    out = await gen.generate(
        [
            {"q": "", "passage": "p1"},
            {"q": "fine", "passage": None},
            {"q": "fine"},
            {"q": "fine", "passage": "p1"},
        ]
    )
    assert [type(o) for o in out[:3]] == [RowFailure] * 3
    assert "empty" in str(out[0].error)
    assert len(out[3]) == 1


async def test_hard_negatives_corpus_missing_field_raises_dataset_error() -> None:
    gen, model = hard_negatives({"text_field": "body"})
    with pytest.raises(DatasetError, match="no 'body' field"):
        await gen.generate([{"q": "x", "passage": "p1"}])
    with pytest.raises(DatasetError):
        await gen.generate([{"q": "x", "passage": "p1"}])
    assert model.calls == []


def test_hard_negatives_declarations_and_bad_params() -> None:
    params = HardNegatives.params_model.model_validate(
        {"column": "question", "positive": "passage.id", "text_field": "body", "id_field": "key"}
    )
    assert HardNegatives.reads(params) == {"question", "passage.id"}
    assert HardNegatives.dataset_columns(params) == {"corpus": {"key", "body"}}
    assert "greater than or equal to 1" in params_error(HardNegatives, {"column": "q", "positive": "p", "k": 0})
    assert "positive\n  Field required" in params_error(HardNegatives, {"column": "q"})
