"""``OpenAIProvider``: one configured OpenAI-compatible provider (NIM, vLLM, OpenAI, Ollama...)
and the model handles it builds. Its requests are ``endpoint.OpenAIEndpoint``'s, over the
clients of ``client.HttpClients``; the handles are ``handles``'.
"""

from __future__ import annotations

from genwire.config.schema import ModelConfig, OpenAIProviderConfig
from genwire.providers.openai.endpoint import OpenAIEndpoint
from genwire.providers.openai.handles import OpenAIChatModel, OpenAIEmbeddingModel
from genwire.providers.routes import Route, open_route

__all__ = ["OpenAIProvider"]


class OpenAIProvider(OpenAIEndpoint):
    """An OpenAI-compatible endpoint; builds the chat and embedding models that use it."""

    def __init__(self, name: str, config: OpenAIProviderConfig, *, lean_client: bool = True) -> None:
        """``lean_client=False``: aiohttp sends every request (``client.HttpClients``)."""
        super().__init__(name, config, lean_client=lean_client)
        self._routes: list[Route[OpenAIProvider]] = []  # keeps the handles' routes alive

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self._display_url!r})"

    # --- models ------------------------------------------------------------------------

    def chat_model(self, alias: str, config: ModelConfig, *, pool: str | None = None) -> OpenAIChatModel:
        """``pool``: the cache identity of the endpoint pool this model is a member of."""
        return OpenAIChatModel(open_route(self, alias, config.model, self._routes, pool), alias, config)

    def embedding_model(self, alias: str, config: ModelConfig, *, pool: str | None = None) -> OpenAIEmbeddingModel:
        return OpenAIEmbeddingModel(open_route(self, alias, config.model, self._routes, pool), alias, config)
