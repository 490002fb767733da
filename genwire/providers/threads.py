"""Blocking reads off the event loop, in threads that can be abandoned."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _succeed(future: asyncio.Future[T], result: T) -> None:
    if not future.done():  # done: the awaiting task gave up (a deadline), nobody wants it
        future.set_result(result)


def _fail(future: asyncio.Future[T], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


async def in_daemon_thread(fn: Callable[[], T], name: str = "genwire-read") -> T:
    """``fn()`` in a daemon thread of its own.

    Unlike ``asyncio.to_thread``, a call that never returns (a FIFO given as a dataset,
    a stalled network mount) cannot hold the command past its deadline: the awaiting
    task can be cancelled, ``asyncio.run`` does not wait for the thread, and the
    interpreter does not join it at exit (the default executor's threads are joined).
    The abandoned thread ends with the process.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            result = fn()
        except BaseException as exc:  # delivered to the awaiting task, not lost in the thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                loop.call_soon_threadsafe(_fail, future, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_succeed, future, result)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await future
