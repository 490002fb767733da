"""Build provider clients and models from config. Imports implementations lazily so that
``genwire validate`` never pays for aiohttp or onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from genwire.config.schema import (
    DatasetConfig,
    LocalProviderConfig,
    ModelConfig,
    OpenAIProviderConfig,
    ProviderConfig,
)


class ProviderClient(Protocol):
    """What every provider kind offers: models by kind, a request count, and a close."""

    requests: dict[str, int]

    def chat_model(self, alias: str, config: ModelConfig) -> Any: ...

    def embedding_model(self, alias: str, config: ModelConfig) -> Any: ...

    async def aclose(self) -> None: ...


def make_provider(name: str, config: ProviderConfig) -> ProviderClient:
    if isinstance(config, OpenAIProviderConfig):
        from genwire.providers.openai import OpenAIProvider

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
