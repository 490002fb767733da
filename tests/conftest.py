"""Shared helpers: small configs written to tmp_path, and a plugin installer that puts a
real .dist-info with an entry point on sys.path (what pip does, minus the copy)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str, name: str = "genwire.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def install_plugin(tmp_path: Path) -> Iterator[Callable[..., None]]:
    """Install a plugin distribution: a module plus dist-info declaring entry points in
    the ``genwire.generators`` group, importable from a fresh sys.path entry."""
    added: list[str] = []
    modules: list[str] = []

    def install(dist: str, module: str, source: str, entry_points: dict[str, str]) -> None:
        root = tmp_path / f"site-{dist}"
        root.mkdir()
        (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text(f"[genwire.generators]\n{lines}\n")
        sys.path.insert(0, str(root))
        added.append(str(root))
        modules.append(module)
        importlib.invalidate_caches()

    yield install
    for entry in added:
        sys.path.remove(entry)
    for module in modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
