"""The event loop `genwire run` generates on: uvloop's when installed (``genwire[fast]``),
asyncio's otherwise; the commands that only check never import it."""

from __future__ import annotations

import asyncio
import sys
import types
from typing import Any

import pytest

from genwire.cli.signals import new_event_loop, run_interruptibly


class _Marked(asyncio.SelectorEventLoop):
    """Stands for uvloop's loop: a working loop that says where it came from."""


def _fake_uvloop(made: list[asyncio.AbstractEventLoop]) -> types.ModuleType:
    module = types.ModuleType("uvloop")

    def new() -> asyncio.AbstractEventLoop:
        loop = _Marked()
        made.append(loop)
        return loop

    module.new_event_loop = new  # type: ignore[attr-defined]
    return module


def test_a_run_generates_on_uvloop_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[asyncio.AbstractEventLoop] = []
    monkeypatch.setitem(sys.modules, "uvloop", _fake_uvloop(made))

    async def where() -> Any:
        return type(asyncio.get_running_loop())

    assert run_interruptibly(where(), fast_loop=True) is _Marked
    assert made and made[0].is_closed()  # closed after, as asyncio's is
    assert run_interruptibly(where()) is not _Marked  # the checking commands: asyncio's own


def test_without_uvloop_a_run_uses_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    loop = new_event_loop(fast=True)
    try:
        assert not isinstance(loop, _Marked)
        assert loop.run_until_complete(asyncio.sleep(0, "ok")) == "ok"
    finally:
        loop.close()
