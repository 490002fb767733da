"""The managed servers of one config (SPEC §23): started on demand, concurrently; watched
and restarted when one dies mid-run (``restarts``); stopped together.

A server held by ``genwire serve`` in the config's directory with the same spec is used
as it is (checked ready, never restarted nor stopped from here). The providers of a
server reach it through a ``ServerWatch``: its URL, and ``came_back``, which a request
that failed on a dead server awaits while the server restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from genwire.config.schema import GenwireConfig, OpenAIProviderConfig
from genwire.config.servers import ServerConfig
from genwire.errors import ErrorClass, ModelError
from genwire.providers.servers.held import Held, drop_held, read_held, write_held
from genwire.providers.servers.replica import Replica, free_port, is_ready
from genwire.providers.servers.stops import check_stopped

_DEATH_WAIT_S = 2.0  # a refused connection before the crash is reaped: how long to look for it
_RESTART_POLL_S = 0.1


@dataclass(frozen=True)
class ServerStart:
    """One replica's start: ``error_class`` None when it is ready (or a held one is)."""

    name: str
    label: str  # the replica ("qwen", or "qwen-2" of several)
    error_class: ErrorClass | None
    message: str
    seconds: float
    held: bool = False  # held by ``genwire serve``: used, not started


class ServerWatch:
    """What a provider knows of its server replica: the URL, and whether it came back."""

    def __init__(self, fleet: ServerFleet, name: str, index: int) -> None:
        self.fleet, self.name, self.index = fleet, name, index

    @property
    def url(self) -> str:
        return self.fleet.url(self.name, self.index)

    @property
    def generation(self) -> int:
        replica = self.fleet.replica(self.name, self.index)
        return replica.generation if replica is not None else 0

    async def came_back(self, generation: int) -> bool:
        """After a failed request sent at ``generation``: True once the server was
        restarted and is ready (send it again, no retry spent), False when it did not
        die (an ordinary failure). Raises ``ModelError(unreachable)`` when it died for good."""
        replica = self.fleet.replica(self.name, self.index)
        if replica is None:
            return False  # held by genwire serve: not ours to restart
        if replica.generation == generation and replica.running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(replica.exited.wait(), _DEATH_WAIT_S)
            if replica.generation == generation and replica.running:
                return False
        while True:
            failure = self.fleet.failure
            if failure is not None:
                raise ModelError(ErrorClass.UNREACHABLE, failure)
            if replica.generation != generation and replica.running and self.fleet.ready(replica):
                return True
            await asyncio.sleep(_RESTART_POLL_S)


class ServerFleet:
    """The servers under ``servers:``; logs go to ``log_dir/<replica>.log``."""

    def __init__(self, configs: Mapping[str, ServerConfig], base_dir: Path, log_dir: Path) -> None:
        self.configs = dict(configs)
        self.base_dir = base_dir
        self.log_dir = log_dir
        self.restarts: dict[str, int] = {}  # per server: restarts so far
        self.failure: str | None = None  # a server that died for good: why, naming its log
        self._replicas: dict[str, list[Replica]] = {}
        self._held: dict[str, list[int]] = {}  # name -> ports of a server genwire serve holds
        self._ports: dict[str, list[int]] = {}  # name -> each replica's port (``ports``)
        self._holders: dict[str, Held] = {}  # name -> the genwire serve that holds it, when one does
        self._ready: set[int] = set()  # id() of replicas ready at their current generation
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        self._starting: dict[str, asyncio.Task[list[ServerStart]]] = {}

    # --- what a provider reads ---------------------------------------------------------

    def started(self, name: str) -> bool:
        return name in self._replicas or name in self._held

    def url(self, name: str, index: int = 0) -> str:
        """The base URL of replica ``index``: known before it starts (its port is chosen
        first), so the clients of a run can be built before the pre-flight starts it."""
        return f"http://127.0.0.1:{self.ports(name)[index]}/v1"

    def ports(self, name: str) -> list[int]:
        """Each replica's port, chosen once: a held server's, the configured ones, or free ones."""
        found = self._ports.get(name)
        if found is None:
            config = self.configs[name]
            held = read_held(self.base_dir).get(name)
            if held is not None and held.spec == config.spec_hash() and len(held.ports) == config.replicas:
                self._holders[name] = held
                found = list(held.ports)
            elif config.port == "auto":
                found = [free_port() for _ in range(config.replicas)]
            else:
                found = [config.port + index for index in range(config.replicas)]
            self._ports[name] = found
        return found

    def replica(self, name: str, index: int) -> Replica | None:
        replicas = self._replicas.get(name)
        return replicas[index] if replicas else None

    def ready(self, replica: Replica) -> bool:
        return id(replica) in self._ready

    def resolved(self, config: GenwireConfig) -> GenwireConfig:
        """``config`` for another process that uses these servers without managing them
        (a Ray worker): each server's provider pointed at its URL, no ``servers:``."""
        providers = {
            name: provider.with_url(self.url(provider.server, provider.replica))
            if isinstance(provider, OpenAIProviderConfig) and provider.server is not None
            else provider
            for name, provider in config.providers.items()
        }
        return config.model_copy(update={"providers": providers, "servers": {}})

    def watch(self, name: str, index: int = 0) -> ServerWatch:
        return ServerWatch(self, name, index)

    def log_paths(self, name: str) -> list[Path]:
        return [r.log_path for r in self._replicas.get(name, [])]

    def pids(self) -> list[int]:
        """The reapers (process group leaders) of every replica running now."""
        return [r.pid for replicas in self._replicas.values() for r in replicas if r.pid is not None and r.running]

    # --- starting ----------------------------------------------------------------------

    async def start(self, names: Iterable[str]) -> list[ServerStart]:
        """Start (or find held) each server named, concurrently; every replica's outcome.
        A server started before is not started again (its first outcome is returned)."""
        self._stopping = False
        tasks = []
        for name in dict.fromkeys(names):
            if name not in self._starting:
                self._starting[name] = asyncio.ensure_future(self._start_server(name))
            tasks.append(self._starting[name])
        results = await asyncio.gather(*tasks)
        return [start for found in results for start in found]

    async def _start_server(self, name: str) -> list[ServerStart]:
        config = self.configs[name]
        ports = self.ports(name)
        held = self._holders.get(name)
        if held is not None:
            began = time.monotonic()
            ready = all([await is_ready(port, config) for port in ports])
            seconds = time.monotonic() - began
            urls = ", ".join(f"http://127.0.0.1:{p}/v1" for p in ports)
            if not ready:
                message = f"held by genwire serve (pid {held.pid}) at {urls}, but not ready; restart genwire serve"
                return [ServerStart(name, name, ErrorClass.UNREACHABLE, message, seconds)]
            self._held[name] = ports
            message = f"held by genwire serve (pid {held.pid}) at {urls}: no start"
            return [ServerStart(name, name, None, message, seconds, held=True)]
        try:
            model_path = _model_path(config, self.base_dir)
        except ModelError as exc:
            return [ServerStart(name, name, exc.error_class, exc.message, 0.0)]
        replicas = []
        for index in range(config.replicas):
            label = name if config.replicas == 1 else f"{name}-{index + 1}"
            log = self.log_dir / f"{label}.log"
            replicas.append(Replica(name, label, index, config, ports[index], log, model_path))
        self._replicas[name] = replicas
        outcomes = await asyncio.gather(*(r.start() for r in replicas))
        starts = []
        for replica, outcome in zip(replicas, outcomes, strict=True):
            if outcome.error_class is None:
                self._ready.add(id(replica))
                self._watchers.append(asyncio.ensure_future(self._watch(replica)))
            message = (
                outcome.message
                if outcome.error_class is not None
                else f"started in {outcome.seconds:.1f} s, {outcome.message}; log {replica.log_path}"
            )
            starts.append(ServerStart(name, replica.label, outcome.error_class, message, outcome.seconds))
        return starts

    async def _watch(self, replica: Replica) -> None:
        """Restart ``replica`` each time it dies, while ``restarts`` allows."""
        config = replica.config
        while True:
            await replica.exited.wait()
            self._ready.discard(id(replica))
            if self._stopping:
                return
            used = self.restarts.get(replica.name, 0)
            if used >= config.restarts:
                self.failure = (
                    f"server {replica.label!r} died mid-run and restarts: {config.restarts} allows no more "
                    f"restarts; its log: {replica.log_path}"
                )
                return
            self.restarts[replica.name] = used + 1
            await replica.stop()  # the rest of its group, the log closed
            outcome = await replica.start()
            if outcome.error_class is not None:
                self.failure = f"server {replica.label!r} died mid-run and did not come back: {outcome.message}"
                return
            self._ready.add(id(replica))

    # --- held by genwire serve ---------------------------------------------------------

    def hold(self) -> None:
        """Say in the state file that this process holds its started servers."""
        entries = {
            name: Held(os.getpid(), [r.port for r in replicas], self.configs[name].spec_hash())
            for name, replicas in self._replicas.items()
            if all(self.ready(r) for r in replicas)
        }
        write_held(self.base_dir, entries)

    # --- stopping ----------------------------------------------------------------------

    async def stop(self) -> list[str]:
        """Stop every replica this fleet started (never a held one); warnings, if any
        (a port still in use, GPU memory still held)."""
        self._stopping = True
        for task in self._starting.values():
            task.cancel()
        await asyncio.gather(*self._starting.values(), return_exceptions=True)
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        replicas = [r for found in self._replicas.values() for r in found]
        groups = [r.pid for r in replicas if r.pid is not None]
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        drop_held(self.base_dir, list(self._replicas), os.getpid())
        warnings = await check_stopped([(r.label, r.port) for r in replicas], groups)
        self._replicas.clear()
        self._ready.clear()
        self._starting.clear()
        return warnings


def _model_path(config: ServerConfig, base_dir: Path) -> Path | None:
    """llama.cpp's GGUF: a file (relative to the config's directory), or the local catalog's."""
    if config.kind != "llama.cpp":
        return None
    path = Path(os.path.expanduser(config.model))
    path = path if path.is_absolute() else base_dir / path
    if path.is_file():
        return path
    from genwire.providers.local.catalog import CHAT_SPEC, model_files

    if config.model.lower() in {n.lower() for n in (CHAT_SPEC.name, *CHAT_SPEC.aliases)}:
        return model_files(CHAT_SPEC)["weights"]
    raise ModelError(
        ErrorClass.NOT_FOUND,
        f"{config.model!r} is neither a GGUF file (looked for {path}) nor {CHAT_SPEC.name} (the local package)",
    )
