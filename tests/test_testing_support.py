"""The pytest plugin's fixtures, as a user's test suite would use them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from genwire.testing import FakeEmbeddingModel, FakeOpenAIServer, hash_vector


async def test_genwire_container_fixture_boots_dict_and_path(
    genwire_container: Callable[..., Any], fake_openai_server: FakeOpenAIServer, write_config: Callable[[str], Path]
) -> None:
    fake_openai_server.script("e5", [503])
    container = genwire_container(
        {
            "providers": {"srv": {"kind": "openai", "base_url": fake_openai_server.url, "backoff_s": 0.01}},
            "models": {"embedder": {"provider": "srv", "model": "e5", "kind": "embedding", "dimensions": 384}},
            "pipeline": {
                "columns": [
                    {"name": "t", "generator": "sampler", "params": {"kind": "uuid"}},
                    {
                        "name": "v",
                        "generator": "embedding",
                        "resources": {"model": "embedder"},
                        "params": {"column": "t"},
                    },
                ]
            },
        }
    )
    report = await container.preflight()  # not closed by the test: the fixture closes it
    assert report.ok and report.check("embedder").attempts == 2
    from_path = genwire_container(
        write_config("pipeline: {columns: [{name: s, generator: sampler, params: {kind: uuid}}]}")
    )
    assert [c.name for c in from_path.plan().columns] == ["s"]


async def test_fake_embedding_model_is_deterministic() -> None:
    fake = FakeEmbeddingModel(dimensions=16)
    a, b, c = await fake.embed(["same", "same", "other"])
    assert a == b != c and len(a) == 16 and abs(sum(v * v for v in a) - 1) < 1e-9
    assert a == hash_vector("same", 16) and fake.calls == [["same", "same", "other"]]
