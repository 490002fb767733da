"""Build provider clients and models from config. Imports implementations lazily so that
``genwire validate`` never pays for aiohttp or onnxruntime."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Protocol

from genwire.config.schema import (
    DatasetConfig,
    LocalProviderConfig,
    ModelConfig,
    OpenAIProviderConfig,
    ProviderConfig,
)
from genwire.providers.usage import Concurrency, ModelUsage


class ProviderClient(Protocol):
    """What every provider kind offers: models by kind, usage per alias, and a close."""

    name: str
    usage: dict[str, ModelUsage]

    def concurrency(self) -> Concurrency: ...

    def chat_model(self, alias: str, config: ModelConfig) -> Any: ...

    def embedding_model(self, alias: str, config: ModelConfig) -> Any: ...

    async def aclose(self) -> None: ...


def make_provider(name: str, config: ProviderConfig) -> ProviderClient:
    if isinstance(config, OpenAIProviderConfig):
        from genwire.providers.openai.provider import OpenAIProvider

        return OpenAIProvider(name, config)
    if isinstance(config, LocalProviderConfig):
        from genwire.providers.local import LocalProvider

        return LocalProvider(name, config)
    raise TypeError(f"unknown provider config {type(config).__name__}")  # unreachable: schema is closed


def make_model(client: ProviderClient, alias: str, config: ModelConfig) -> Any:
    if config.kind == "chat":
        return client.chat_model(alias, config)
    return client.embedding_model(alias, config)


def make_dataset(name: str, config: DatasetConfig, path: Path) -> Any:
    from genwire.providers.datasets import open_dataset

    return open_dataset(name, config, path)


def endpoint_identity(provider: ProviderConfig, model: ModelConfig) -> Hashable:
    """What decides a model's requests: aliases with equal identities share one probe.

    Everything that changes the request is in it (provider kind, base URL, API key,
    headers, model, kind, params); the key and headers only as a hash, so the identity is
    safe to keep.
    """
    params = json.dumps(model.params, sort_keys=True, default=str)
    if isinstance(provider, OpenAIProviderConfig):
        key = provider.api_key.get_secret_value() if provider.api_key is not None else ""
        key_hash = hashlib.sha256(key.encode()).hexdigest()
        # A managed server (SPEC §23) by its name: its port is not known before it starts.
        where = provider.base_url.rstrip("/") if provider.base_url else f"server:{provider.server}"
        identity: tuple[str, ...] = ("openai", where, key_hash, model.model, model.kind, params)
        if provider.headers:  # only when set: identities (and cache keys) without headers stay as they were
            sent = json.dumps({k: v.get_secret_value() for k, v in provider.headers.items()}, sort_keys=True)
            identity += (hashlib.sha256(sent.encode()).hexdigest(),)
        return identity
    from genwire.providers.local import canonical_model_name

    return ("local", canonical_model_name(model.model), model.kind, params)
