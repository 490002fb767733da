"""Plugins discovered through the genwire.generators entry-point group, for real."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import genwire
from genwire.generators.discovery import discover
from genwire.testing import FakeEmbeddingModel

TOPIC_DEDUP = """
from pydantic import BaseModel
from genwire.generators import Generator, GeneratorMetadata, ResourceKind

class DedupParams(BaseModel):
    source_column: str
    threshold: float = 0.9

class TopicDedup(Generator[DedupParams]):
    metadata = GeneratorMetadata(
        name="topic-dedup",
        description="Drop near-duplicate items by cosine similarity.",
        required_resources={"embedder": ResourceKind.EMBEDDING_MODEL},
    )
    params_model = DedupParams

    @classmethod
    def reads(cls, params):
        return {params.source_column}

    async def generate(self, rows):
        vectors = await self.resources.embedder.embed([str(r[self.params.source_column]) for r in rows])
        return [len(v) for v in vectors]

class Greedy(TopicDedup):
    metadata = GeneratorMetadata(
        name="greedy", description="uses a chat model it never declared",
        required_resources={"embedder": ResourceKind.EMBEDDING_MODEL},
    )

    async def generate(self, rows):
        slot = "writer"  # a name known at run time only: the static check warns, the runtime guard stops it
        return [await getattr(self.resources, slot).complete("x") for _ in rows]
"""


def pipeline_yaml(generator: str) -> str:
    return f"""
providers:
  nim: {{kind: openai, base_url: "http://127.0.0.1:9/v1"}}
models:
  writer: {{provider: nim, model: w, kind: chat}}
  embedder: {{provider: nim, model: e, kind: embedding, dimensions: 16}}
pipeline:
  num_records: 2
  columns:
    - name: topic
      generator: sampler
      params: {{kind: category, values: [a, b]}}
    - name: dedup
      generator: {generator}
      resources: {{embedder: embedder}}
      params: {{source_column: topic}}
"""


async def test_installed_plugin_is_wired_planned_and_confined(
    install_plugin: Callable[..., None], write_config: Callable[[str], Path]
) -> None:
    install_plugin(
        "topic-plugin",
        "topic_plugin",
        TOPIC_DEDUP,
        {"topic-dedup": "topic_plugin:TopicDedup", "greedy": "topic_plugin:Greedy"},
    )
    found = discover()
    assert "topic-dedup" in found.generators and "topic-plugin" in found.origins["topic-dedup"]
    container = genwire.boot(write_config(pipeline_yaml("topic-dedup")))
    plan = container.plan()
    assert [(s.slot, s.resources) for s in plan.columns[1].slots] == [("embedder", ["embedder"])]
    assert [t.name for t in plan.targets] == ["embedder"]  # the unbound chat model is not probed
    async with container:
        with container.override("embedder", FakeEmbeddingModel(dimensions=16)):
            assert await container.generator("dedup").generate([{"topic": "a"}]) == [16]

    greedy = genwire.boot(write_config(pipeline_yaml("greedy")))
    async with greedy:
        with (
            greedy.override("embedder", FakeEmbeddingModel(dimensions=16)),
            pytest.raises(genwire.UndeclaredResourceError, match=r"'greedy'.*'writer'"),
        ):
            await greedy.generator("dedup").generate([{"topic": "a"}])


@pytest.mark.parametrize(
    ("source", "target", "cause"),
    [
        (
            "raise ImportError('no module named sklearn')",
            "broken:Gen",
            "failed to import: ImportError: no module named sklearn",
        ),
        ("class Gen: pass", "broken:Gen", "does not name a genwire Generator subclass"),
        (
            "from genwire.generators import Generator\n"
            "class Gen(Generator):\n    async def generate(self, rows): return rows",
            "broken:Gen",
            "has no metadata",
        ),
        (
            "from genwire.generators import Generator, GeneratorMetadata\n"
            "class Gen(Generator):\n    metadata = GeneratorMetadata(name='x', description='no resources declared')\n",
            "broken:Gen",
            "required_resources",
        ),
        (
            "from genwire.generators import Generator, GeneratorMetadata\n"
            "class Gen(Generator):\n"
            "    metadata = GeneratorMetadata(name='llm-text', description='clash', required_resources={})\n"
            "    async def generate(self, rows): return rows\n",
            "broken:Gen",
            "'llm-text' is already provided by entry point 'llm-text'",
        ),
        (
            "from genwire.generators import Generator, GeneratorMetadata\n"
            "class Gen(Generator):\n"
            "    metadata = GeneratorMetadata(name='sync-gen', description='x', required_resources={})\n"
            "    def generate(self, rows): return rows\n",
            "broken:Gen",
            "must be an async method",
        ),
    ],
)
def test_broken_plugins_are_reported_with_entry_point_and_cause(
    install_plugin: Callable[..., None], write_config: Callable[[str], Path], source: str, target: str, cause: str
) -> None:
    install_plugin("broken-plugin", "broken", source, {"my-plugin": target})
    with pytest.raises(genwire.PluginError) as info:  # a config that names it imports it
        genwire.boot(write_config("pipeline: {columns: [{name: s, generator: my-plugin}]}"))
    text = str(info.value)
    assert "entry point 'my-plugin' (broken:Gen from broken-plugin)" in text
    assert cause in text, text


def test_a_config_imports_only_the_plugins_it_names(
    install_plugin: Callable[..., None], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    """Entry points are resolved by name: a plugin the config does not name is never
    imported, and a broken one does not stop it; ``genwire plugins`` still reports it."""
    imported = tmp_path / "imported"  # the plugin's import leaves this behind, then fails
    source = f"import pathlib\npathlib.Path({str(imported)!r}).touch()\nraise ImportError('no GPU here')"
    install_plugin("broken-plugin", "broken_on_import", source, {"my-plugin": "broken_on_import:Gen"})
    container = genwire.boot(write_config("pipeline: {columns: [{name: s, generator: sampler, params: {kind: uuid}}]}"))
    assert [c.generator_name for c in container.columns] == ["sampler"]
    assert not imported.exists()
    problems = discover().problems
    assert imported.exists()
    assert "entry point 'my-plugin' (broken_on_import:Gen from broken-plugin)" in " ".join(problems)


def test_a_plugin_whose_entry_point_is_named_apart_from_its_generator_is_still_found(
    install_plugin: Callable[..., None], write_config: Callable[[str], Path]
) -> None:
    install_plugin("topic-plugin", "topic_plugin", TOPIC_DEDUP, {"dedup-entry": "topic_plugin:TopicDedup"})
    container = genwire.boot(write_config(pipeline_yaml("topic-dedup")))
    assert [c.generator_name for c in container.columns] == ["sampler", "topic-dedup"]


def test_plugin_constructor_failure_names_plugin() -> None:
    from genwire.generators import Generator, GeneratorMetadata

    class Boom(Generator):  # type: ignore[type-arg]
        metadata = GeneratorMetadata(name="boom", description="x", required_resources={})

        def __init__(self, **kwargs: object) -> None:
            raise RuntimeError("no GPU")

        async def generate(self, rows: list[dict[str, object]]) -> list[object]:
            return []

    container = genwire.boot({"pipeline": {"columns": [{"name": "b", "generator": "boom"}]}}, generators=[Boom])
    with pytest.raises(
        genwire.PluginError, match=r"generator 'boom' \(column 'b'\) failed to construct: RuntimeError: no GPU"
    ):
        container.generator("b")
