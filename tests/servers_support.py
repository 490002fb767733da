"""Shared pieces of the managed-server tests (SPEC §23): a config around genwire's own
stand-in server, the genwire command in a process, and the checks that nothing of a
server is left (by PID, with psutil) and its port is free."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from genwire.testing.managed_server import command

WAIT_S = 120.0  # generous: the machine is shared and loaded


def marker() -> str:
    """A model name no other test uses: every process of its server carries it in its argv."""
    return f"m-{uuid.uuid4().hex[:10]}"


def server_block(name: str, model: str, *options: str, **keys: Any) -> str:
    """A ``servers:`` entry running the stand-in with ``options`` (its command-line options)."""
    argv = [*command(model), *options]
    extra = "".join(f"    {k}: {json.dumps(v)}\n" for k, v in keys.items())
    return f"  {name}:\n    kind: command\n    command: {json.dumps(argv)}\n    model: {model}\n{extra}"


def pipeline(model_alias: str = "m", rows: int = 4, output: str = "out/data.jsonl") -> str:
    return (
        f"pipeline:\n  num_records: {rows}\n  batch_size: 8\n  output: {output}\n  columns:\n"
        "    - {name: id, generator: sampler, params: {kind: uuid}}\n"  # a prompt per row: one request each
        f"    - {{name: a, generator: llm-text, resources: {{model: {model_alias}}}, "
        'params: {prompt: "row {{ id }} says hi"}}\n'
    )


def one_server_config(model: str, *options: str, provider: str = "", **keys: Any) -> str:
    return (
        "servers:\n"
        + server_block("stand_in", model, *options, **keys)
        + f"providers:\n  p: {{kind: openai, server: stand_in{provider}}}\n"
        + f"models:\n  m: {{provider: p, model: {model}, kind: chat}}\n"
        + pipeline()
    )


def genwire(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = WAIT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def processes_of(model: str) -> list[psutil.Process]:
    """Every live process whose argv names ``model`` (a server of it, or its child)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(model in part for part in process.info["cmdline"] or ()):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_gone(model: str, timeout: float = 30.0) -> list[psutil.Process]:
    """Wait until no process of ``model``'s server is alive; what is left at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_of(model)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def ports_in(log: Path) -> list[int]:
    """The ports the log says its server was started on."""
    return [int(p) for p in re.findall(r"\(port (\d+)\)", log.read_text())]


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def starts_in(log: Path) -> int:
    return log.read_text().count("[genwire] starting ")
