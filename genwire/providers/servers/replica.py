"""One server process (a replica of a server spec): started in a process group of its own
under the tool servers' reaper, its output copied to its log, polled until ready, and
stopped with SIGTERM then SIGKILL of its whole group.

Ready means ready (SPEC §23): the readiness path (``/health``) answers 200, then
``/v1/models`` lists the served model. A process that exits meanwhile is ``start_failed``
at once, with its exit code and the last lines of its log (every declared env value
scrubbed); one never ready is ``timeout`` at ``startup_timeout_s``; a port held by another
process is ``port_in_use``; a server that does not list the model is ``not_found``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.config.servers import ServerConfig
from genwire.errors import ErrorClass
from genwire.providers.servers.commands import HOST, argv, environment, secrets_of
from genwire.providers.servers.logs import ServerLog, last_lines
from genwire.providers.tools import launcher
from genwire.scrub import scrub

POLL_S = (0.1, 1.0)  # readiness polls: from this often, growing to this
_EXIT_LINE = re.compile(r"\[genwire\] the server exited with code (-?\d+)")
_KILL_WAIT_S = 5.0  # after SIGKILL of the group: the reaper is gone within this


@dataclass(frozen=True)
class Started:
    """How a start ended: ``error_class`` None when the replica is ready."""

    error_class: ErrorClass | None
    message: str
    seconds: float


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use"
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


async def poll_ready(session: Any, port: int, config: ServerConfig) -> tuple[ErrorClass | None, str] | None:
    """One look at the server on ``port`` (an aiohttp session): None while it loads;
    (None, message) when ready; (class, message) when it serves another model."""
    import aiohttp

    root = f"http://{HOST}:{port}"
    try:
        async with session.get(root + config.health_path) as health:
            if health.status != 200:
                return None  # loading (vLLM, SGLang, llama.cpp answer 503 meanwhile)
        async with session.get(root + "/v1/models") as listing:
            if listing.status != 200:
                return None
            body = await listing.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    served = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)] if isinstance(body, dict) else []
    if config.model in served:
        return (None, f"ready at {root}/v1")
    shown = ", ".join(str(s) for s in served[:5]) or "none"
    return (ErrorClass.NOT_FOUND, f"the server does not serve {config.model!r} (it lists: {shown})")


async def is_ready(port: int, config: ServerConfig) -> bool:
    """Whether the server on ``port`` is ready now (one look)."""
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as session:
        verdict = await poll_ready(session, port, config)
    return verdict is not None and verdict[0] is None


class Replica:
    """One process of server ``name`` (``label`` says which replica) on a fixed port."""

    def __init__(
        self,
        name: str,
        label: str,
        index: int,
        config: ServerConfig,
        port: int,
        log_path: Path,
        model_path: Path | None,
    ) -> None:
        self.name, self.label, self.index, self.config, self.port = name, label, index, config, port
        self.log_path = log_path
        self.model_path = model_path
        self.process: asyncio.subprocess.Process | None = None
        self.generation = 0  # bumped by every start: a request sent before knows it was restarted
        self.exited = asyncio.Event()
        self._log: ServerLog | None = None
        self._copy: asyncio.Task[None] | None = None
        self._waiter: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and not self.exited.is_set()

    async def start(self) -> Started:
        """Start the process and wait until it is ready (or why it is not)."""
        began = time.monotonic()
        if not port_is_free(self.port):
            message = f"port {self.port} on {HOST} is in use by another process; free it or choose another port"
            return Started(ErrorClass.PORT_IN_USE, message, 0.0)
        env = environment(self.config, self.index)
        command = argv(self.config, self.port, self.model_path)
        self._log = log = ServerLog(self.log_path, secrets=secrets_of(self.config))
        log.note(f"starting {self.label}: {' '.join(command)} (port {self.port})")
        self.exited = asyncio.Event()
        self.generation += 1
        try:
            self.process = await asyncio.create_subprocess_exec(
                *launcher.command(os.getpid(), list(env), command, grace_s=self.config.stop_timeout_s),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            log.close()
            return Started(ErrorClass.START_FAILED, f"could not start {command[0]!r}: {exc.strerror or exc}", 0.0)
        assert self.process.stdout is not None
        self._copy = asyncio.create_task(log.copy(self.process.stdout))
        self._waiter = asyncio.create_task(self._wait_exit())
        return await self._until_ready(began)

    async def _wait_exit(self) -> None:
        assert self.process is not None
        await self.process.wait()
        if self._copy is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._copy), 2.0)
        self.exited.set()

    async def _until_ready(self, began: float) -> Started:
        import aiohttp

        deadline = began + self.config.startup_timeout_s
        wait = POLL_S[0]
        timeout = aiohttp.ClientTimeout(total=5.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                if self.exited.is_set():
                    return self._start_failed(began)
                verdict = await self._poll(session)
                if verdict is not None:
                    return Started(verdict[0], verdict[1], time.monotonic() - began)
                if time.monotonic() >= deadline:
                    await self.stop()
                    message = (
                        f"not ready within startup_timeout_s {self.config.startup_timeout_s:g} s "
                        f"({self.config.health_path} never answered 200); stopped it. Its log: {self.log_path}"
                    )
                    return Started(ErrorClass.TIMEOUT, message, time.monotonic() - began)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exited.wait(), min(wait, max(0.0, deadline - time.monotonic())))
                wait = min(wait * 1.5, POLL_S[1])

    async def _poll(self, session: Any) -> tuple[ErrorClass | None, str] | None:
        return await poll_ready(session, self.port, self.config)

    def _start_failed(self, began: float) -> Started:
        tail = last_lines(self.log_path)
        code = None
        with contextlib.suppress(OSError):
            found = _EXIT_LINE.findall(self.log_path.read_text("utf-8", "replace")[-4096:])
            code = found[-1] if found else None
        lines = scrub(tail, secrets_of(self.config)) or "(nothing)"
        exited = f"exited with code {code}" if code is not None else "exited"
        message = f"the server {exited} before it was ready; the last lines of {self.log_path}:\n{lines}"
        return Started(ErrorClass.START_FAILED, message, time.monotonic() - began)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``, of the whole group; reaped."""
        process = self.process
        if process is None:
            return
        if not self.exited.is_set():
            launcher.stop_group(process.pid)  # the reaper: SIGTERM to the group, SIGKILL after its grace
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), self.config.stop_timeout_s + _KILL_WAIT_S)
        if not self.exited.is_set():  # a reaper that did not end its group: end it from here
            launcher.kill_group(process.pid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), _KILL_WAIT_S)
        for task in (self._copy, self._waiter):
            if task is not None and not task.done():
                task.cancel()
        if self._log is not None:
            self._log.note(f"stopped {self.label}")
            self._log.close()
            self._log = None
        self.process = None
