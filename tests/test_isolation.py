"""Bad plugins cannot reach what they did not declare: not through attribute tricks,
``__dict__``, ``vars()``, private attributes, nor anything reachable by reference."""

from __future__ import annotations

import gc
import types
from typing import Any

import pytest

import genwire
from genwire.container.core import WiredContainer
from genwire.container.graph import ProviderGraph
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.testing import FakeChatModel, FakeEmbeddingModel


class Prober(Generator[Any]):
    """Declares one chat model and a registry; tries every trick to find more."""

    metadata = GeneratorMetadata(
        name="prober",
        description="x",
        required_resources={"model": ResourceKind.CHAT_MODEL, "models": ResourceKind.MODEL_REGISTRY},
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [None for _ in rows]


def cfg() -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-CANARY-iso"}},
        "models": {
            "mine": {"provider": "srv", "model": "a", "kind": "chat"},
            "listed": {"provider": "srv", "model": "b", "kind": "chat"},
            "secret_embedder": {"provider": "srv", "model": "c", "kind": "embedding"},
            "other_chat": {"provider": "srv", "model": "d", "kind": "chat"},
        },
        "pipeline": {
            "columns": [
                {"name": "p", "generator": "prober", "resources": {"model": "mine", "models": ["listed"]}},
                {"name": "q", "generator": "llm-text", "resources": {"model": "other_chat"}, "params": {"prompt": "x"}},
            ]
        },
    }


def reachable_from(root: object, limit: int = 200_000) -> list[object]:
    """Every object reachable from ``root`` by reference, not through modules, classes or
    functions (those reach the whole interpreter; a plugin must import to use them)."""
    seen: set[int] = set()
    out: list[object] = []
    stack = [root]
    skip = (
        types.ModuleType,
        type,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.MethodType,
        types.CodeType,
        types.FrameType,
    )
    while stack and len(out) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        out.append(obj)
        stack.extend(gc.get_referents(obj))
    return out


async def test_nothing_undeclared_is_reachable_from_a_generator() -> None:
    container = genwire.boot(cfg(), generators=[Prober])
    async with container:
        fakes = {
            a: FakeEmbeddingModel(4) if a == "secret_embedder" else FakeChatModel(a)
            for a in ("mine", "listed", "secret_embedder", "other_chat")
        }
        with (
            container.override("mine", fakes["mine"]),
            container.override("listed", fakes["listed"]),
            container.override("secret_embedder", fakes["secret_embedder"]),
            container.override("other_chat", fakes["other_chat"]),
        ):
            gen = container.generator("p")
            other = container.generator("q")
            found = {id(o) for o in reachable_from(gen)}
            assert id(fakes["mine"]) in found and id(fakes["listed"]) in found  # declared: reachable
            for name in ("secret_embedder", "other_chat"):
                assert id(fakes[name]) not in found, f"{name} is reachable from an undeclared generator"
            assert id(other) not in found
            assert not any(isinstance(o, WiredContainer | ProviderGraph) for o in reachable_from(gen))


async def test_attribute_tricks_fail_with_undeclared_error() -> None:
    container = genwire.boot(cfg(), generators=[Prober])
    async with container:
        with container.override("mine", FakeChatModel()), container.override("listed", FakeChatModel()):
            res = container.generator("p").resources
            for trick in (
                lambda: res.secret_embedder,
                lambda: res["other_chat"],
                lambda: res._container,
                lambda: res.container,
                lambda: res.__getattr__("x"),
            ):
                with pytest.raises(genwire.UndeclaredResourceError):
                    trick()
            with pytest.raises(TypeError):
                vars(res)
            with pytest.raises(AttributeError):
                res.__dict__  # noqa: B018
            with pytest.raises(AttributeError):
                res.model = FakeChatModel()  # resources are read-only
            assert sorted(object.__getattribute__(res, "_bound")) == ["model", "models"]
            registry = res.models
            assert registry.aliases == ["listed"]
            with pytest.raises(KeyError, match="not in this column's model registry"):
                registry.get("secret_embedder")
            with pytest.raises(AttributeError):
                registry.__dict__  # noqa: B018
            assert list(registry._models) == ["listed"]
