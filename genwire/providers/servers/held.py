"""Servers held by ``genwire serve`` (SPEC §23): ``.genwire/servers.json`` beside the config
says, per server name, the PID of the ``genwire serve`` that holds it, its ports and the
hash of its spec. A run of the same spec in the same directory uses them, no restart."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_FILE = Path(".genwire") / "servers.json"


@dataclass(frozen=True)
class Held:
    pid: int  # the genwire serve process
    ports: list[int]
    spec: str  # ServerConfig.spec_hash()


def state_path(base_dir: Path) -> Path:
    return base_dir / STATE_FILE


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, though not ours to signal
    return True


def read_held(base_dir: Path) -> dict[str, Held]:
    """The servers held now (entries of a dead ``genwire serve`` left out)."""
    try:
        raw: Any = json.loads(state_path(base_dir).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    found: dict[str, Held] = {}
    for name, entry in (raw.get("servers", {}) if isinstance(raw, dict) else {}).items():
        with contextlib.suppress(KeyError, TypeError, ValueError):
            held = Held(int(entry["pid"]), [int(p) for p in entry["ports"]], str(entry["spec"]))
            if _alive(held.pid):
                found[name] = held
    return found


def write_held(base_dir: Path, servers: dict[str, Held]) -> None:
    """Add ``servers`` to the state file (written whole, then renamed into place)."""
    _rewrite(base_dir, lambda current: {**current, **servers})


def drop_held(base_dir: Path, names: list[str], pid: int) -> None:
    """Remove the entries of ``names`` that process ``pid`` wrote."""
    _rewrite(base_dir, lambda current: {n: h for n, h in current.items() if not (n in names and h.pid == pid)})


def _rewrite(base_dir: Path, change: Any) -> None:
    path = state_path(base_dir)
    servers = change(read_held(base_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"servers": {n: {"pid": h.pid, "ports": h.ports, "spec": h.spec} for n, h in servers.items()}}
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
    os.replace(temporary, path)
