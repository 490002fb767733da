"""A read-only response cache is read (issue 33 item 15): on a read-only mount, or in
another user's directory, a rerun takes its answers from the cache, says "read-only"
once and never "unreadable", and writes nothing.

Really read-only, for root too: root passes file modes, so as root (CI runs as root) the
cache directory is bind-mounted read-only in a mount namespace of the command's own
(``unshare -m``); as any other user, its modes are cleared."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import cli, write

from genwire.testing import FakeOpenAIServer

N = 12
_READ_ONLY_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'


def _can_mount_read_only(directory: Path) -> bool:
    probe = directory / "probe"
    probe.mkdir()
    try:
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", _READ_ONLY_MOUNT, "sh", str(probe), "touch", str(probe / "x")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return proc.returncode != 0 and "Read-only file system" in proc.stderr
    except OSError:
        return False
    finally:
        shutil.rmtree(probe)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Any]:
    """``read_only(directory, *genwire_args)``: run genwire with ``directory`` read-only."""
    cleared: list[tuple[Path, int]] = []
    if os.geteuid() == 0:
        if not shutil.which("unshare") or not _can_mount_read_only(tmp_path):
            pytest.skip("running as root without the right to mount: no way to make a directory read-only for root")

        def run(directory: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "genwire.cli.main", *map(str, args)]
            command = ["unshare", "-m", "sh", "-c", _READ_ONLY_MOUNT, "sh", str(directory), *argv]
            return subprocess.run(command, capture_output=True, text=True, timeout=120)

    else:

        def run(directory: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
            for path in [directory, *directory.rglob("*")]:
                mode = path.stat().st_mode
                cleared.append((path, mode))
                path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
            try:
                return cli(*args)
            finally:
                for path, mode in reversed(cleared):
                    path.chmod(mode)
                cleared.clear()

    yield run


def config(server: FakeOpenAIServer, root: Path) -> Path:
    cfg = {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "retries": 0}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "cache": {"dir": str(root / "cache")},
        "pipeline": {
            "num_records": N,
            "batch_size": 4,
            "output": str(root / "out" / "data.jsonl"),
            "columns": [
                {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
                {
                    "name": "text",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "{{ topic }}"},
                },
            ],
        },
    }
    return write(cfg, root / "genwire.yaml")


def test_a_read_only_cache_serves_its_answers_and_says_read_only(tmp_path: Path, read_only: Any) -> None:
    with FakeOpenAIServer() as server:
        path = config(server, tmp_path)
        first = cli("run", path, "--json", "--skip-preflight")
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout)["models"]["writer"]["requests"] == N
        before = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in (tmp_path / "cache").iterdir())

        server.reset_stats()
        again = read_only(tmp_path / "cache", "run", path, "--json", "--skip-preflight", "--fresh")
        assert again.returncode == 0, again.stderr
        summary = json.loads(again.stdout)
        assert summary["models"]["writer"]["cached"] == N  # every answer from the cache
        assert server.total_requests == 0  # nothing asked again
        assert again.stderr.count("read-only") == 1, again.stderr
        assert "unreadable" not in again.stderr and "running without it" not in again.stderr
        after = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in (tmp_path / "cache").iterdir())
        assert after == before  # nothing written, not even the hit count


def test_cache_info_of_a_read_only_cache_reads_it(tmp_path: Path, read_only: Any) -> None:
    with FakeOpenAIServer() as server:
        path = config(server, tmp_path)
        assert cli("run", path, "--json", "--skip-preflight").returncode == 0
        info = read_only(tmp_path / "cache", "cache", "info", path, "--json")
        assert info.returncode == 0, info.stderr
        assert json.loads(info.stdout)["entries"] == N
