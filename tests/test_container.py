"""Wiring, the plan's pre-flight targets read from the graph, overrides, lifecycle."""

from __future__ import annotations

from typing import Any

import pytest
from support import RegistryUser

import genwire
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.testing import FakeChatModel, FakeEmbeddingModel, FakeOpenAIServer


class Sneaky(Generator[Any]):
    """Declares a chat model, then reaches for an embedder."""

    metadata = GeneratorMetadata(
        name="sneaky", description="undeclared use", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        slot = "embedder"  # a name known at run time only: the static check warns, the runtime guard stops it
        await getattr(self.resources, slot).embed(["x"])
        return [None for _ in rows]


def config(**pipeline: Any) -> dict[str, Any]:
    return {
        "providers": {"nim": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-CANARY-wire-1"}},
        "models": {
            "writer": {"provider": "nim", "model": "w", "kind": "chat"},
            "judge": {"provider": "nim", "model": "j", "kind": "chat"},
            "embedder": {"provider": "nim", "model": "e", "kind": "embedding", "dimensions": 8},
        },
        "datasets": {"people": {"kind": "jsonl", "path": "people.jsonl"}},
        "pipeline": {"num_records": 4, **pipeline},
    }


def test_four_wiring_error_kinds_reported_together() -> None:
    cfg = config(
        columns=[
            {"name": "a", "generator": "llm-text", "params": {"prompt": "x"}},  # unbound slot
            {
                "name": "b",
                "generator": "sampler",
                "resources": {"model": "writer"},  # undeclared slot
                "params": {"kind": "uuid"},
            },
            {
                "name": "c",
                "generator": "llm-text",
                "resources": {"model": "wrtier"},
                "params": {"prompt": "x"},
            },  # unknown
            {
                "name": "d",
                "generator": "llm-text",
                "resources": {"model": "embedder"},
                "params": {"prompt": "x"},
            },  # kind
        ]
    )
    with pytest.raises(genwire.WiringError) as info:
        genwire.boot(cfg)
    found = info.value.problems
    assert len(found) == 4, found
    assert "slot 'model' (chat_model) is not bound" in found[0]
    assert "binds slot 'model', but generator 'sampler' does not declare it" in found[1]
    assert "unknown resource 'wrtier' (did you mean 'writer'?)" in found[2]
    assert "needs a chat_model, but 'embedder' is a embedding_model" in found[3]
    assert all("pipeline.columns[" in p for p in found)


def test_reads_of_later_or_unknown_columns_are_wiring_errors() -> None:
    cfg = config(
        columns=[
            {
                "name": "q",
                "generator": "llm-text",
                "resources": {"model": "writer"},
                "params": {"prompt": "{{ a }} {{ nope }}"},
            },
            {"name": "a", "generator": "sampler", "params": {"kind": "uuid"}},
        ]
    )
    with pytest.raises(genwire.WiringError) as info:
        genwire.boot(cfg)
    text = str(info.value)
    assert "reads 'a', which is generated later" in text
    assert "reads 'nope', which is not a column" in text


def test_params_errors_name_the_column() -> None:
    cfg = config(columns=[{"name": "s", "generator": "sampler", "params": {"kind": "uniform", "low": 5, "high": 1}}])
    with pytest.raises(
        genwire.WiringError, match=r"pipeline\.columns\[0\] \(s\)\.params.*column 's' \(generator 'sampler'\)"
    ):
        genwire.boot(cfg)


def test_plan_targets_are_exactly_what_columns_reach() -> None:
    cfg = config(
        columns=[
            {"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}},
        ]
    )
    plan = genwire.boot(cfg).plan()
    assert [t.name for t in plan.targets] == ["writer"]
    assert set(plan.unreachable) == {"judge", "embedder", "people"}
    assert plan.target("writer").used_by == ["q"]


def test_star_registry_makes_every_model_a_target() -> None:
    cfg = config(
        columns=[{"name": "r", "generator": "registry-user", "resources": {"models": "*"}, "params": {"use": "judge"}}]
    )
    plan = genwire.boot(cfg, generators=[RegistryUser]).plan()
    assert {t.name for t in plan.targets} == {"writer", "judge", "embedder"}  # models, not the dataset
    cfg["pipeline"]["columns"][0]["resources"] = {"models": ["judge"]}
    plan = genwire.boot(cfg, generators=[RegistryUser]).plan()
    assert [t.name for t in plan.targets] == ["judge"]


def test_defaults_bind_unbound_slots_and_show_in_plan() -> None:
    cfg = config(columns=[{"name": "q", "generator": "llm-text", "params": {"prompt": "x"}}])
    cfg["defaults"] = {"chat_model": "judge"}
    plan = genwire.boot(cfg).plan()
    assert plan.columns[0].slots[0].resources == ["judge"] and plan.columns[0].slots[0].source == "defaults"
    cfg["defaults"] = {"chat_model": "embedder"}
    with pytest.raises(genwire.WiringError, match=r"defaults\.chat_model needs a chat_model"):
        genwire.boot(cfg)


async def test_registry_serves_only_bound_aliases() -> None:
    cfg = config(
        columns=[
            {"name": "r", "generator": "registry-user", "resources": {"models": ["judge"]}, "params": {"use": "writer"}}
        ]
    )
    container = genwire.boot(cfg, generators=[RegistryUser])
    async with container:
        with container.override("judge", FakeChatModel("j")), container.override("writer", FakeChatModel("w")):
            gen = container.generator("r")
            assert gen.resources.models.aliases == ["judge"]
            with pytest.raises(KeyError, match="not in this column's model registry"):
                await gen.generate([{}])
            # Nothing else is stored in the view to reach around it (no public API can say
            # what an object holds: this white-box check is the point).
            assert list(gen.resources.models._models) == ["judge"]


async def test_undeclared_access_raises_with_fix() -> None:
    cfg = config(columns=[{"name": "s", "generator": "sneaky", "resources": {"model": "writer"}}])
    container = genwire.boot(cfg, generators=[Sneaky])
    async with container:
        with container.override("writer", FakeChatModel()):
            gen = container.generator("s")
            with pytest.raises(genwire.UndeclaredResourceError) as info:
                await gen.generate([{}])
    msg = str(info.value)
    assert "'sneaky'" in msg and "'embedder'" in msg and "required_resources" in msg and "(declared: model)" in msg
    with pytest.raises(genwire.UndeclaredResourceError):
        gen.resources["embedder"]


async def test_override_restores_cleanly_twice_in_a_row() -> None:
    cfg = config(
        columns=[{"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}]
    )
    container = genwire.boot(cfg)
    async with container:
        original = container.resource("writer")
        before = container.generator("q")
        assert before.resources.model is original
        for reply in ("first", "second"):
            fake = FakeChatModel(reply)
            with container.override("writer", fake):
                gen = container.generator("q")
                assert gen is not before and gen.resources.model is fake  # singleton rebuilt
                assert await gen.generate([{}]) == [reply]
            after = container.generator("q")
            assert after.resources.model is original
            assert container.resource("writer") is original
        with (
            pytest.raises(genwire.GenwireError, match="no model alias or dataset named 'nope'"),
            container.override("nope", FakeChatModel()),
        ):
            pass


async def test_override_of_dataset_and_embedding() -> None:
    cfg = config(
        columns=[
            {"name": "e", "generator": "embedding", "resources": {"model": "embedder"}, "params": {"column": "t"}},
            {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["a"]}},
        ][::-1]
    )
    container = genwire.boot(cfg)
    async with container:
        with container.override("embedder", FakeEmbeddingModel(dimensions=8)):
            vectors = await container.generator("e").generate([{"t": "hello"}])
            assert len(vectors[0]) == 8


async def test_container_closes_clients_even_when_body_raises(fake_openai_server: FakeOpenAIServer) -> None:
    cfg = config(
        columns=[{"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}]
    )
    cfg["providers"]["nim"]["base_url"] = fake_openai_server.url
    container = genwire.boot(cfg)
    with pytest.raises(RuntimeError):
        async with container:
            await container.resource("writer").complete("hi")  # opens the provider's HTTP session
            assert list(container.concurrency()) == ["nim"]
            raise RuntimeError("boom")
    # Every client is closed and forgotten (an open session would also fail the test:
    # conftest turns unclosed aiohttp sessions into errors).
    assert container.concurrency() == {}


def test_no_secret_in_reprs_or_plan() -> None:
    cfg = config(
        columns=[{"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}]
    )
    container = genwire.boot(cfg)
    texts = [
        repr(container),
        container.plan().model_dump_json(),
        repr(container.config),
        repr(container.resource("writer")),
    ]
    assert not any("sk-CANARY-wire-1" in t for t in texts)
