"""One BLAS thread for the process, once a gate does matrix products (keep-novel's
comparisons and its index).

A gate judges on a worker thread beside the event loop, on a machine whose cores the run
already uses (the loop, the cache's writer, often the model server). OpenBLAS's own
threads split each 64-row product and then spin waiting for the next: on a 2-core machine
that cost a 20,000-candidate keep-novel run 10 s of CPU (20.3 -> 10.5 s user, 15.0 ->
11.8 s wall), taken from the loop that sends the requests. The limit is set for good, not
around each call: keep-novel's index trains in a thread of its own while the gate judges,
and a training's numbers must not depend on how many threads BLAS had at the time (a
resumed run retrains to the same index). ``threadpoolctl`` sets it in every BLAS library
loaded (numpy's, faiss's own), again when a new one was loaded.
"""

from __future__ import annotations

import sys
import threading

_limited: set[frozenset[str]] = set()
_lock = threading.Lock()


def use_one_blas_thread() -> None:
    """Every BLAS library loaded runs on one thread from now on (cheap when already so)."""
    loaded = frozenset(name for name in ("numpy", "faiss") if name in sys.modules)
    if loaded in _limited:
        return
    with _lock:
        if loaded not in _limited:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=1, user_api="blas")
            _limited.add(loaded)
