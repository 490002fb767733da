"""Shared helpers: small configs written to tmp_path, and a plugin installer that puts a
real .dist-info with an entry point on sys.path (what pip does, minus the copy).

The suite runs on every core (scripts/test.sh: pytest-xdist, ``--dist loadgroup``): each
worker process has its own user cache directory, and the modules in ``ONE_WORKER`` run
together on one worker (see there).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

# Test modules whose tests must not run beside each other on two workers, by xdist group.
# test_ray.py: its module fixture starts a local two-CPU Ray instance, and every test waits
# for that instance's CPUs to be free again; two instances (or two modules' tests sharing
# one) on a two-core machine would fight over the same cores and the same /tmp/ray.
ONE_WORKER = {"test_ray.py": "ray"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The grouped tests get their ``xdist_group`` and go first: a group is one long unit
    of work for one worker, and started first it runs beside the rest, not after it.
    First of the hooks: xdist's own (on each worker) reads the marks to put the group in
    the test ids ``--dist loadgroup`` schedules by; run after it, the marks came too late
    and the group's tests were spread over both workers."""
    grouped: list[pytest.Item] = []
    for item in items:
        group = ONE_WORKER.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            grouped.append(item)
    if grouped:
        chosen = set(map(id, grouped))
        items[:] = grouped + [item for item in items if id(item) not in chosen]


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported so far (the test modules, genwire, their libraries) lives until
    # the end: frozen, the collector skips it, so the full collection after every test
    # (_nothing_left_behind) walks only what tests made (10x cheaper, ~80 ms a test).
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _own_user_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The probe cache and the static check's scans go to this test process's own user
    cache directory (XDG_CACHE_HOME, inherited by the genwire processes tests start), not
    to the user's, which other workers and other runs share."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str, name: str = "genwire.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def install_plugin(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Install a plugin distribution: a module plus dist-info declaring entry points in
    the ``genwire.generators`` group, importable from a fresh sys.path entry (returned: a
    genwire process started with it on PYTHONPATH sees the plugin too)."""
    added: list[str] = []
    modules: list[str] = []

    def install(dist: str, module: str, source: str, entry_points: dict[str, str]) -> Path:
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
        return root

    yield install
    for entry in added:
        sys.path.remove(entry)
    for module in modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()


class _AsyncioTrouble(logging.Handler):
    """Collects what asyncio and aiohttp report through the ``asyncio`` logger when
    something is left behind: pending tasks destroyed, unclosed sessions or connectors."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


_TROUBLE = _AsyncioTrouble()


def pytest_configure(config: pytest.Config) -> None:
    logging.getLogger("asyncio").addHandler(_TROUBLE)


@pytest.fixture(autouse=True)
def _nothing_left_behind() -> Iterator[None]:
    """Resource hygiene across the whole suite: a test that leaves pending tasks or
    unclosed HTTP clients behind fails (ResourceWarnings are errors via pyproject)."""
    _TROUBLE.records.clear()
    yield
    gc.collect()  # surface "unclosed" reports of objects the test dropped
    leftovers, _TROUBLE.records[:] = list(_TROUBLE.records), []
    assert not leftovers, f"left behind: {leftovers}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gc.collect()
    if _TROUBLE.records:
        print(f"\nasyncio reported resources left behind after the last test: {_TROUBLE.records}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest_asyncio.fixture(autouse=True)
async def _no_pending_tasks() -> AsyncIterator[None]:
    """An async test must not leave tasks running on its loop (pytest-asyncio would
    cancel them quietly at loop close)."""
    yield
    await asyncio.sleep(0)  # let finished tasks' callbacks run
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    for task in pending:
        task.cancel()
    assert not pending, f"tasks left pending: {pending}"
