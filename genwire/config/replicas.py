"""``replicas: N`` of a managed server (SPEC §23) as an endpoint pool (SPEC §17): the
provider ``p`` of such a server becomes ``p-1`` ... ``p-N`` (one per replica), and every
model served by ``p`` a pool over them. Rewritten once, when the config is loaded, so the
container, the pre-flight, the accounting and the report all see the same pool."""

from __future__ import annotations

from genwire.config.schema import EndpointConfig, GenwireConfig, ModelConfig, OpenAIProviderConfig


def replica_provider(provider: str, index: int) -> str:
    return f"{provider}-{index + 1}"


def expand_replicas(config: GenwireConfig) -> GenwireConfig:
    replicated = {
        name: config.servers[provider.server].replicas
        for name, provider in config.providers.items()
        if isinstance(provider, OpenAIProviderConfig)
        and provider.server in config.servers
        and config.servers[provider.server].replicas > 1
    }
    if not replicated:
        return config
    providers: dict[str, object] = {}
    for name, provider in config.providers.items():
        if name in replicated and isinstance(provider, OpenAIProviderConfig):
            for index in range(replicated[name]):
                providers[replica_provider(name, index)] = provider.for_replica(index)
        else:
            providers[name] = provider
    models = {alias: _pooled(model, replicated) for alias, model in config.models.items()}
    return config.model_copy(update={"providers": providers, "models": models})


def _pooled(model: ModelConfig, replicated: dict[str, int]) -> ModelConfig:
    """``model`` with each endpoint on a replicated provider split into one per replica."""
    endpoints = model.endpoints or [EndpointConfig(provider=model.endpoint_list[0].provider)]
    if not any(e.provider in replicated for e in endpoints):
        return model
    split = [
        e.model_copy(update={"provider": replica_provider(e.provider, index)})
        for e in endpoints
        for index in range(replicated.get(e.provider, 0))
    ] + [e for e in endpoints if e.provider not in replicated]
    return model.model_copy(update={"provider": None, "endpoints": split})
