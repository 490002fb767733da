"""WiredPipeline: genwire's small API over the dependency-injector graph.

One name per thing: this is the wired pipeline (graph, resources, overrides, lifecycle)
that the pre-flight and the engine work on; ``genwire.Container`` (``app.py``) is this
plus its two stages, one layer up so that the pre-flight and the engine never import
back from the class that calls them. The graph's objects are dependency-injector's,
imported as ``di`` so they are never confused with ``genwire.providers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self

from dependency_injector import providers as di

from genwire.config.loader import LoadedConfig
from genwire.config.schema import GenwireConfig, PoolEndpoint
from genwire.container.graph import ProviderGraph
from genwire.container.plan import WiringPlan, build_plan
from genwire.container.wiring import ColumnWiring
from genwire.errors import GenwireError
from genwire.generators.base import Generator
from genwire.providers.base import endpoint_key
from genwire.providers.factory import endpoint_identity
from genwire.providers.probes import Probe
from genwire.providers.usage import Concurrency, ModelUsage, merge_usage, requests_of

if TYPE_CHECKING:
    from genwire.providers.pool.endpoints import EndpointPool, EndpointStats
    from genwire.providers.servers.fleet import ServerFleet

log = logging.getLogger("genwire.servers")


class WiredPipeline:
    """Every model, dataset and column generator of one pipeline, wired and validated.

    Built by ``boot`` without touching the network. ``async with`` it to use it: clients
    are created lazily inside, and every one of them is closed on exit.
    """

    def __init__(self, loaded: LoadedConfig, wirings: list[ColumnWiring], graph: ProviderGraph) -> None:
        self._loaded = loaded
        self._wirings = wirings
        self._graph = graph
        self._plan: WiringPlan | None = None
        self._marked: dict[str, dict[str, str]] = {}  # mark_endpoints' verdicts, per pooled alias

    # --- what it is ------------------------------------------------------------------

    @property
    def config(self) -> GenwireConfig:
        return self._loaded.config

    @property
    def loaded(self) -> LoadedConfig:
        return self._loaded

    @property
    def columns(self) -> list[ColumnWiring]:
        return list(self._wirings)

    def plan(self) -> WiringPlan:
        """Columns, slots and bindings, and the pre-flight targets read from the graph."""
        if self._plan is None:
            self._plan = build_plan(self._loaded, self._wirings, self._graph)
        return self._plan

    # --- resolving ---------------------------------------------------------------------

    def resource(self, name: str) -> Any:
        """The live object behind a model alias or dataset name (overrides applied)."""
        return self._target(name).provider()

    def generator(self, column: str) -> Generator[Any]:
        try:
            provider = self._graph.generators[column]
        except KeyError:
            raise GenwireError(f"no column named {column!r}") from None
        generator: Generator[Any] = provider()
        return generator

    def probe(self, name: str) -> Probe:
        """The pre-flight probe registered with ``name``'s factory."""
        probe: Probe = self._target(name).probe
        return probe

    def endpoint_identity(self, name: str) -> Hashable:
        """Targets with equal identities send identical requests and share one probe.

        Read from the config, not from the handle (handles expose nothing of their
        provider); an overridden target is an object of its own.
        """
        target = self._target(name)
        model = self.config.models.get(name)
        if model is not None and not target.provider.overridden:
            if model.endpoints is not None:  # a pool: its members' identities
                return ("pool", *(identity for _, _, identity in self.pool_members(name) or ()))
            return endpoint_identity(self.config.providers[model.endpoint_list[0].provider], model)
        return endpoint_key(target.provider())

    def pool_members(self, name: str) -> list[tuple[PoolEndpoint, Any, Hashable]] | None:
        """A pooled alias's endpoints, each with its member model and endpoint identity
        (the pre-flight probes each); None for an alias of one endpoint or an override."""
        model = self.config.models.get(name)
        target = self._target(name)
        if model is None or model.endpoints is None or target.provider.overridden:
            return None
        target.provider()  # builds the pool
        pool = self._graph.pools[name]
        members = []
        for endpoint, member in zip(model.endpoint_list, pool.members, strict=True):
            provider = self.config.providers[endpoint.provider]
            members.append((endpoint, member.handle, endpoint_identity(provider, model.for_endpoint(endpoint))))
        return members

    def mark_endpoints(self, verdicts: Mapping[str, Mapping[str, str]]) -> None:
        """Tell pooled aliases (built so far) what is known of their endpoints, per alias
        ``{endpoint: error class}`` (the pre-flight's failures): those start cooled down,
        or out for ``auth`` / ``not_found``."""
        for alias, found in verdicts.items():
            self._marked.setdefault(alias, {}).update(found)
            pool = self._graph.pools.get(alias)
            if pool is not None:
                pool.mark(found)

    def endpoint_verdicts(self) -> dict[str, dict[str, str]]:
        """What is known of the pooled aliases' endpoints (``mark_endpoints``'s input): what
        was marked, and the members out for the run now; another process (a Ray worker)
        starts from it."""
        found = {alias: dict(verdicts) for alias, verdicts in self._marked.items()}
        for alias, pool in self._graph.pools.items():
            found.setdefault(alias, {}).update(pool.verdicts())
        return {alias: verdicts for alias, verdicts in found.items() if verdicts}

    def endpoint_pools(self) -> dict[str, EndpointPool]:
        """Every pooled alias's pool (built now if not yet)."""
        for alias, model in self.config.models.items():
            if model.endpoints is not None:
                self.pool_members(alias)
        return dict(self._graph.pools)

    def endpoint_stats(self) -> dict[str, dict[str, EndpointStats]]:
        """Per pooled alias built so far, per endpoint: requests, failures, latencies."""
        return {alias: pool.stats() for alias, pool in sorted(self._graph.pools.items())}

    def overridden_names(self) -> list[str]:
        """Names of the model aliases and datasets replaced by ``override`` right now."""
        return sorted(name for name, target in self._graph.targets.items() if target.provider.overridden)

    def cacheable(self, name: str) -> bool:
        """Whether ``name``'s probe verdict may be cached: a configured model, not an
        override (an override is an object of this process, with no stable identity)."""
        return name in self.config.models and not self._target(name).provider.overridden

    def client(self, provider: str) -> Any:
        """The client of provider ``provider`` (built on first use): the run's batch mode
        switches it over after the pre-flight."""
        return self._graph.clients[provider]()

    def reset_generators(self) -> None:
        """Fresh generator instances for the next run (generators may keep per-run state)."""
        self._graph.reset_singletons()

    def usage_by_model(self) -> dict[str, ModelUsage]:
        """Requests, retries, 429s and tokens of this process's clients, per model alias."""
        return merge_usage(client.usage for client in self._graph.live_clients)

    def reported_models(self) -> dict[str, str]:
        """Per model alias, the model id a server named in its first answer to this
        process (HTTP providers; an embedded model names none)."""
        found: dict[str, str] = {}
        for client in self._graph.live_clients:
            found.update(getattr(client, "reported", {}))
        return dict(sorted(found.items()))

    def concurrency(self) -> dict[str, Concurrency]:
        """In flight against the current and configured limit, per provider in use. A
        pool's queue counts as waiting for each of its members' providers (its requests
        wait in the pool, not at a provider's gate)."""
        found = {client.name: client.concurrency() for client in self._graph.live_clients}
        for pool in self._graph.pools.values():
            for name in {m.provider for m in pool.members} & found.keys():
                found[name] = dataclasses.replace(found[name], waiting=found[name].waiting + pool.waiting)
        return found

    @property
    def servers(self) -> ServerFleet | None:
        """The managed inference servers (SPEC §23); None when the config has none."""
        return self._graph.servers

    def reachable_servers(self) -> dict[str, list[str]]:
        """The servers some wired model reaches, each with the columns that use it (read
        from the plan, the same graph as the pre-flight's targets: started = reachable)."""
        return {server.name: server.used_by for server in self.plan().servers if server.started}

    def requests_by_model(self) -> dict[str, int]:
        return requests_of(self.usage_by_model())

    def _target(self, name: str) -> Any:
        try:
            return self._graph.targets[name]
        except KeyError:
            known = ", ".join(sorted(self._graph.targets)) or "none"
            raise GenwireError(f"no model alias or dataset named {name!r} (defined: {known})") from None

    # --- overrides -------------------------------------------------------------------

    @contextlib.contextmanager
    def override(self, name: str, obj: Any) -> Iterator[Any]:
        """Replace a model alias or dataset with ``obj`` inside the block.

        Generators and registry views built before are dropped on entry and on exit, so
        nothing keeps the old (or the fake) dependency; the pre-flight probes ``obj``.
        """
        target = self._target(name)
        # di.Object keeps a sync object sync: no async-mode flip on the target.
        target.provider.override(di.Object(obj))
        self._graph.reset_singletons()
        try:
            yield obj
        finally:
            target.provider.reset_last_overriding()
            self._graph.reset_singletons()

    # --- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every client this container created, then forget every singleton.

        The one place lifecycles end. Not dependency-injector's
        ``shutdown_resources()``: it walks the whole graph once per resource, quadratic
        in their number (1.2 s for 400 resources when measured), while this is one pass.
        """
        clients, self._graph.live_clients[:] = list(self._graph.live_clients), []
        servers, self._graph.live_tool_servers[:] = list(self._graph.live_tool_servers), []
        results = await asyncio.gather(*(c.aclose() for c in [*clients, *servers]), return_exceptions=True)
        for provider in (*self._graph.clients.values(), *self._graph.tool_servers.values()):
            provider.reset()
        for target in self._graph.targets.values():
            target.provider.reset()  # every target is a Singleton (see build_graph)
        self._graph.reset_singletons()
        if self._graph.servers is not None:  # after the clients: nothing is sent to a stopping server
            for warning in await self._graph.servers.stop():
                log.warning(warning)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._loaded.source!r}: {len(self._wirings)} columns, "
            f"{len(self._graph.targets)} resources>"
        )
