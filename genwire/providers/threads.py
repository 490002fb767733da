"""Blocking reads off the event loop, in threads that can be abandoned."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if future.done():  # the awaiting task gave up (a deadline): nobody wants the result
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


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
        result: T | None = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:  # delivered to the awaiting task, not lost in the thread
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
            loop.call_soon_threadsafe(_settle, future, result, error)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await future
