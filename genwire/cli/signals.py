"""Run a coroutine so that Ctrl-C and SIGTERM end it the same way: its task is cancelled
(clients close, the checkpoint is kept), then ``Interrupted`` says which signal it was.
Python's default SIGTERM would kill the process on the spot, with files half written."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


def new_event_loop(*, fast: bool = False) -> asyncio.AbstractEventLoop:
    """An event loop; with ``fast``, uvloop's when it is installed (``pip install
    genwire[fast]``): against a fast endpoint a run's CPU per request is its limit, and
    uvloop's loop and sockets take 5-10 % less of it. Its import (~0.1 s) is paid
    only by the commands that generate."""
    if fast:
        try:
            uvloop: Any = importlib.import_module("uvloop")
        except ImportError:
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


def run_interruptibly(main: Coroutine[Any, Any, T], *, fast_loop: bool = False) -> T:
    """``main`` to its end; ``fast_loop``: on uvloop when installed (``new_event_loop``)."""
    loop = new_event_loop(fast=fast_loop)
    task = loop.create_task(main)
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        task.cancel()

    signums = (signal.SIGINT, signal.SIGTERM)
    before = {signum: signal.getsignal(signum) for signum in signums}
    for signum in signums:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0]) from None
        raise
    finally:
        for signum in signums:
            loop.remove_signal_handler(signum)
            # asyncio puts Python's defaults back; the command line's own handlers (entry.py)
            # must stay: SIGTERM's default would kill on the spot.
            handler = before[signum]
            if handler is not None:
                signal.signal(signum, handler)
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        # Not shutdown_default_executor(): a thread stuck in a read (a FIFO, a stalled
        # mount) would hold the command past its deadline; such threads are daemons.
        loop.close()
