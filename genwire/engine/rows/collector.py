"""The garbage collector while rows are generated: the objects that outlive the run (the
libraries' modules and classes, the container) left out of its collections.

A run allocates a few container objects per request; CPython collects its youngest
generation every 700 of them and its oldest every ~100 of those, and each oldest
collection walked every object of every imported library (pydantic, aiohttp, jinja2...):
25-30 ms during which no answer was read. Measured on 20,000 rows against a 5-20 ms
server: 13 such pauses and ~1,700 younger collections, 0.6 s of an 11 s run, and every
round trip ~0.5 ms longer on average. During the generation the objects made before it
are frozen (``gc.freeze``: never walked, never freed while frozen) and the youngest
generation is collected every ``YOUNG_THRESHOLD`` allocations; both are put back when
the rows are done, so the caller's process is left as it was.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_for_rows"]

YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation (CPython: 700)


class _State:
    # Runs that overlap in one process (two containers, one event loop): the first to begin
    # keeps what it found, the last to end puts it back, whichever order they end in.
    depth = 0
    threshold: tuple[int, int, int] = (700, 10, 10)  # what the first found
    froze = False  # whether the first froze (only that is unfrozen)


@contextlib.contextmanager
def collector_for_rows() -> Iterator[None]:
    """Inside: what exists now is frozen, the youngest generation collected less often.
    A process that turned the collector off keeps it off and untouched; one that froze
    objects itself (a server before it forks) keeps its own freeze."""
    if not gc.isenabled():
        yield
        return
    if _State.depth == 0:
        _State.threshold = gc.get_threshold()
        _State.froze = gc.get_freeze_count() == 0
        if _State.froze:
            gc.freeze()
        first, *older = _State.threshold
        gc.set_threshold(max(first, YOUNG_THRESHOLD), *older)
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        if _State.depth == 0:
            gc.set_threshold(*_State.threshold)
            if _State.froze:
                _State.froze = False
                gc.unfreeze()  # back to the oldest generation: collected as before
