"""One BLAS thread for a gate's matrix products (keep-novel's comparisons, its index).

A gate judges on a worker thread beside the event loop, on a machine whose cores the run
already uses (the loop, the cache's writer, often the model server). OpenBLAS's own
threads split each 64-row product and then spin waiting for the next: on a 2-core machine
that cost a 20,000-candidate keep-novel run 10 s of CPU (20.3 -> 10.5 s user, 15.0 ->
11.8 s wall), taken from the loop that sends the requests. ``threadpoolctl`` sets the
thread count of every BLAS library loaded (numpy's and faiss's own) and puts it back after.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_controllers: dict[frozenset[str], Any] = {}


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with every loaded BLAS library on one thread."""
    with _controller().limit(limits=1, user_api="blas"):
        yield


def _controller() -> Any:
    # A controller knows the libraries loaded when it was made (1.6 ms to look): one per
    # set of the libraries that bring their own BLAS, made again once faiss is imported.
    loaded = frozenset(name for name in ("numpy", "faiss") if name in sys.modules)
    controller = _controllers.get(loaded)
    if controller is None:
        from threadpoolctl import ThreadpoolController

        controller = _controllers[loaded] = ThreadpoolController()
    return controller
