"""After a stop: each replica's port free, and, where ``nvidia-smi`` exists, no process of
its group holding GPU memory (SPEC §23); a warning for whatever is not so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess

from genwire.providers.servers.replica import port_is_free

PORT_WAIT_S = 5.0


async def check_stopped(ports: list[tuple[str, int]], groups: list[int]) -> list[str]:
    warnings = []
    for label, port in ports:
        for _ in range(int(PORT_WAIT_S / 0.1)):
            if port_is_free(port):
                break
            await asyncio.sleep(0.1)
        else:
            warnings.append(f"warning: server {label!r} was stopped but port {port} is still in use")
    if groups and shutil.which("nvidia-smi"):
        holding = await asyncio.to_thread(_gpu_holders, set(groups))
        warnings += [f"warning: process {pid} of a stopped server still holds GPU memory" for pid in holding]
    return warnings


def _gpu_holders(groups: set[int]) -> list[int]:
    """PIDs that hold GPU memory (nvidia-smi) and belong to one of the process ``groups``."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in listed.split():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            pid = int(line)
            if os.getpgid(pid) in groups:
                found.append(pid)
    return found
