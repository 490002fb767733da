"""The dependency-injector provider graph: clients, models, datasets, registry views and
one generator provider per column that depends only on its bound resources' providers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dependency_injector import providers as di

from genwire.config.loader import LoadedConfig
from genwire.container.wiring import ColumnWiring
from genwire.errors import PluginError, exception_text
from genwire.generators.base import Generator
from genwire.generators.metadata import ResourceKind, model_resource_kind
from genwire.generators.resources import Resources
from genwire.providers.factory import ProviderClient, make_dataset, make_model, make_provider
from genwire.providers.probes import Probe, ProbeRequest, ProbeResult, probe_chat, probe_dataset, probe_embedding
from genwire.providers.registry import ModelRegistryView
from genwire.providers.tools import make_tool_server

if TYPE_CHECKING:
    from genwire.providers.pool.endpoints import EndpointPool
    from genwire.providers.routes import Route
    from genwire.providers.servers.fleet import ServerFleet


# Endpoint pools and tool servers are imported when a config has one: `validate` of the
# others compiles neither (a cold start's cost is mostly compiling what is imported).
def _pool_model(*args: Any) -> Any:
    from genwire.providers.pool.handles import make_pool_model

    return make_pool_model(*args)


def _tools_handle(server: Any) -> Any:
    from genwire.providers.tools.handle import make_tools_handle

    return make_tools_handle(server)


async def _probe_tools(handle: Any, request: ProbeRequest) -> ProbeResult:
    from genwire.providers.tools.handle import probe_tools

    return await probe_tools(handle, request)


@dataclass(frozen=True)
class Target:
    """A model alias or dataset: something the pre-flight may check."""

    name: str
    kind: ResourceKind
    provider: di.Singleton[Any]
    probe: Probe  # registered beside the factory: the runner never dispatches on kind


@dataclass
class ProviderGraph:
    clients: dict[str, di.Singleton[Any]] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    generators: dict[str, di.Singleton[Any]] = field(default_factory=dict)
    registries: list[di.Singleton[Any]] = field(default_factory=list)
    live_clients: list[ProviderClient] = field(default_factory=list)
    tool_servers: dict[str, di.Singleton[Any]] = field(default_factory=dict)
    live_tool_servers: list[Any] = field(default_factory=list)  # built MCP server clients: closed with the container
    pools: dict[str, EndpointPool] = field(default_factory=dict)  # pooled aliases, once built
    pool_routes: list[Route[EndpointPool]] = field(default_factory=list)  # keeps their routes alive
    servers: ServerFleet | None = None  # the managed inference servers (SPEC §23), when the config has any

    def reachable(self, column: str) -> list[str]:
        """Names of the targets the column's generator provider can reach, read from the
        graph itself (so an override or a registry slot is accounted for structurally)."""
        by_provider = {id(t.provider): t.name for t in self.targets.values()}
        found: dict[str, None] = {}
        sub: di.Provider[Any]
        for sub in self.generators[column].traverse():
            name = by_provider.get(id(sub))
            if name is not None:
                found[name] = None
        return list(found)

    def reset_singletons(self) -> None:
        """Drop built generators and registry views so the next use rebuilds them with the
        current (possibly overridden) dependencies."""
        for provider in (*self.generators.values(), *self.registries):
            provider.reset()


def construct_generator(
    cls: type[Generator[Any]], column: str, params: Any, seed: int, bound: Mapping[str, Any]
) -> Generator[Any]:
    resources = Resources(cls.metadata.name, column, bound)
    try:
        return cls(column=column, params=params, resources=resources, seed=seed)
    except Exception as exc:  # plugin constructor code; name the plugin, keep the cause
        raise PluginError(
            f"generator {cls.metadata.name!r} (column {column!r}) failed to construct: {exception_text(exc)}"
        ) from exc


def _client_factory(graph: ProviderGraph, name: str, config: Any) -> ProviderClient:
    server = getattr(config, "server", None)
    if server is not None and graph.servers is not None:  # a managed server's URL: known once it started
        index = config.replica
        config = config.with_url(graph.servers.url(server, index))
        client = make_provider(name, config)
        setattr(client, "server", graph.servers.watch(server, index))  # noqa: B010  # an OpenAIProvider
    else:
        client = make_provider(name, config)
    graph.live_clients.append(client)  # closed with the container, whatever created it
    return client


def _server_fleet(loaded: LoadedConfig) -> ServerFleet:
    from genwire.providers.servers.fleet import ServerFleet

    output = loaded.resolve_path(loaded.config.pipeline.output)
    return ServerFleet(loaded.config.servers, loaded.base_dir, output.with_name(output.name + ".servers"))


def _tool_server_factory(graph: ProviderGraph, name: str, config: Any, cwd: Path | None) -> Any:
    server = make_tool_server(name, config, cwd)
    graph.live_tool_servers.append(server)
    return server


def build_graph(loaded: LoadedConfig, wirings: list[ColumnWiring]) -> ProviderGraph:
    cfg = loaded.config
    graph = ProviderGraph()
    if cfg.servers:
        graph.servers = _server_fleet(loaded)
    for name, pcfg in cfg.providers.items():
        graph.clients[name] = di.Singleton(_client_factory, graph, name, pcfg)
    for alias, mcfg in cfg.models.items():
        if mcfg.endpoints is not None:
            members = [graph.clients[e.provider] for e in mcfg.endpoint_list]
            model = di.Singleton(_pool_model, graph.pools, graph.pool_routes, alias, mcfg, *members)
        else:
            model = di.Singleton(make_model, graph.clients[mcfg.endpoint_list[0].provider], alias, mcfg)
        probe = probe_chat if mcfg.kind == "chat" else probe_embedding
        graph.targets[alias] = Target(alias, model_resource_kind(mcfg.kind), model, probe)
    for name, dcfg in cfg.datasets.items():
        dataset = di.Singleton(make_dataset, name, dcfg, loaded.resolve_path(dcfg.path))
        graph.targets[name] = Target(name, ResourceKind.DATASET, dataset, probe_dataset)
    for name, tcfg in cfg.tools.items():
        # One server client per tools entry, shared by every column bound to it; each
        # column's handle comes from it (the handle leads to nothing else).
        # A stdio server runs in its cwd resolved against the config's directory (default: that directory).
        cwd = loaded.resolve_path(tcfg.cwd or ".") if tcfg.transport == "stdio" else None
        server = graph.tool_servers[name] = di.Singleton(_tool_server_factory, graph, name, tcfg, cwd)
        graph.targets[name] = Target(name, ResourceKind.TOOLS, di.Singleton(_tools_handle, server), _probe_tools)
    for w in wirings:
        bound: dict[str, Any] = {}
        for slot, sw in w.slots.items():
            if sw.kind is ResourceKind.MODEL_REGISTRY:
                view = di.Singleton(ModelRegistryView, di.Dict({a: graph.targets[a].provider for a in sw.resources}))
                graph.registries.append(view)
                bound[slot] = view
            else:
                bound[slot] = graph.targets[sw.resources[0]].provider
        graph.generators[w.name] = di.Singleton(
            construct_generator, w.generator_cls, w.name, w.params, cfg.pipeline.seed, di.Dict(bound)
        )
    return graph
