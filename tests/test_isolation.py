"""Bad plugins cannot reach what they did not declare: not through attribute tricks,
``__dict__``, ``vars()``, private attributes, nor anything reachable by reference."""

from __future__ import annotations

import gc
import types
from typing import Any

import pytest

import genwire
from genwire.container.core import WiredPipeline
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
            assert not any(isinstance(o, WiredPipeline | ProviderGraph) for o in reachable_from(gen))


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


# --- real handles (issue 10): nothing but the handle's own model is reachable -------------

CANARY_KEY = "sk-CANARY-real-handles-7f3a"
SECRET_MODEL = "secret-big-model"


def real_cfg(base_url: str) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {"kind": "openai", "base_url": base_url, "api_key": CANARY_KEY, "retries": 0},
            "local": {"kind": "local"},
        },
        "models": {
            "mine": {"provider": "srv", "model": "model-mine", "kind": "chat"},
            "listed": {"provider": "local", "model": "all-MiniLM-L6-v2", "kind": "embedding"},
            "local_chat": {"provider": "local", "model": "SmolLM2-135M-Instruct", "kind": "chat"},
            "secret": {"provider": "srv", "model": SECRET_MODEL, "kind": "chat"},
        },
        "pipeline": {
            "columns": [
                {
                    "name": "p",
                    "generator": "prober",
                    "resources": {"model": "mine", "models": ["listed", "local_chat"]},
                },
                {"name": "q", "generator": "llm-text", "resources": {"model": "secret"}, "params": {"prompt": "x"}},
            ]
        },
    }


def deep_reachable(root: object, limit: int = 200_000) -> list[object]:
    """Like ``reachable_from``, but also through bound methods (``__self__``, ``__func__``),
    functions' closures, defaults and ``__wrapped__``, the methods and properties of each
    object's class, and slot values. Module globals are not followed: reaching them takes
    an import, which no handle can prevent."""
    seen: set[int] = set()
    out: list[object] = []
    stack: list[object] = [root]
    opaque = (types.ModuleType, types.CodeType, types.FrameType, types.BuiltinFunctionType)
    while stack and len(out) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, opaque):
            continue
        seen.add(id(obj))
        out.append(obj)
        if isinstance(obj, types.MethodType):
            stack += [obj.__self__, obj.__func__]
            continue
        if isinstance(obj, types.FunctionType):
            stack += [c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not None]
            stack += [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is not None:
                stack.append(wrapped)
            continue
        if isinstance(obj, type):
            continue  # classes reach every instance's code, not other instances' data
        for klass in type(obj).__mro__:
            for name, member in vars(klass).items():
                if isinstance(member, property):
                    stack += [f for f in (member.fget, member.fset) if f is not None]
                elif isinstance(member, types.FunctionType | staticmethod | classmethod):
                    stack.append(getattr(obj, name, member))
            for slot in getattr(klass, "__slots__", ()):
                if slot != "__weakref__" and hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
        stack.extend(gc.get_referents(obj))
    return out


async def test_real_handles_reach_no_session_key_provider_or_other_model(
    fake_openai_server: genwire.testing.FakeOpenAIServer,
) -> None:
    import aiohttp

    from genwire.providers.local import LocalProvider
    from genwire.providers.openai.provider import OpenAIProvider

    container = genwire.boot(real_cfg(fake_openai_server.url), generators=[Prober])
    async with container:
        gen = container.generator("p")
        await gen.resources.model.complete("warm up")  # a live session exists now
        found = deep_reachable(gen)
        handles = [o for o in found if type(o).__name__.endswith(("ChatModel", "EmbeddingModel"))]
        assert sorted(h.alias for h in handles) == ["listed", "local_chat", "mine"]  # declared: reachable
        for obj in found:
            assert not isinstance(obj, aiohttp.ClientSession | aiohttp.BaseConnector), obj
            assert not isinstance(obj, OpenAIProvider | LocalProvider), obj
            assert not isinstance(obj, WiredPipeline | ProviderGraph), obj
            if isinstance(obj, str):
                assert CANARY_KEY not in obj and SECRET_MODEL not in obj, obj
            assert type(obj).__name__ != "SecretStr", obj


class Escaper(Generator[Any]):
    """The issue's plugin: bound to ``mine``, it tries to send for another model."""

    metadata = GeneratorMetadata(name="escaper", description="x", required_resources={"model": ResourceKind.CHAT_MODEL})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        model = self.resources.model
        attempts = [
            lambda: model.provider.post("mine", "/chat/completions", {"model": SECRET_MODEL, "messages": []}),
            lambda: model._provider,
            lambda: model.complete.__self__.provider,
        ]
        escaped = []
        for attempt in attempts:
            try:
                result = attempt()
                if hasattr(result, "__await__"):
                    await result
                escaped.append(True)
            except AttributeError:
                escaped.append(False)
        # Call params cannot redirect the request to another model either.
        text = await model.complete("hi", model=SECRET_MODEL)
        return [{"escaped": escaped, "text": text} for _ in rows]


async def test_a_plugin_cannot_send_for_another_model(
    fake_openai_server: genwire.testing.FakeOpenAIServer, tmp_path: Any
) -> None:
    cfg = real_cfg(fake_openai_server.url)
    cfg["models"] = {k: v for k, v in cfg["models"].items() if k in ("mine", "secret")}
    cfg["pipeline"]["columns"] = [{"name": "p", "generator": "escaper", "resources": {"model": "mine"}}]
    container = genwire.boot(cfg, generators=[Escaper])
    async with container:
        result = await container.run(num_records=2, output=tmp_path / "o.jsonl", skip_preflight=True)
    assert result.rows_written == 2
    row = (tmp_path / "o.jsonl").read_text().splitlines()[0]
    assert '"escaped": [false, false, false]' in row
    assert fake_openai_server.requests.get(SECRET_MODEL, 0) == 0
    assert fake_openai_server.requests["model-mine"] >= 1
