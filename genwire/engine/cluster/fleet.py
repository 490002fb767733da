"""The driver's dealings with its workers, around the dispatch: Ray imported, how many
workers and each one's share of the providers' slots, blocks sized, a Ray failure read as
the genwire error the user should see, a block's answers stored, the workers closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from genwire.config.loader import LoadedConfig
from genwire.engine.cluster.drain import Drains
from genwire.engine.cluster.wire import first_line, last_line
from genwire.engine.records.batch_result import BatchResult, batched
from genwire.engine.records.receipt import Receipt
from genwire.errors import GenwireError, RunError
from genwire.providers.response_cache import ResponseCache

INSTALL_HINT = "the ray engine needs Ray: pip install 'genwire[ray]'"
BATCHES_PER_BLOCK = 4  # a retried block re-runs at most this many batches
BLOCKS_PER_WORKER = 2  # running on a worker: one, and one queued behind it
MAX_RESTARTS = 3  # a worker process that dies is restarted this many times
MAX_TASK_RETRIES = 3  # a block whose worker died is re-run this many times
CLOSE_TIMEOUT_S = 30.0


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise RunError(INSTALL_HINT) from None
    return ray


def requested_workers(ray: ModuleType, workers: int | None) -> int:
    """``workers`` when given, else one per CPU of the cluster."""
    if workers is not None:
        return max(1, workers)
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def split_config(loaded: LoadedConfig, caps: dict[str, int], workers: int, index: int) -> LoadedConfig:
    """Worker ``index``'s share of every used provider's slots and ``rate_limit``; the
    shares sum to the provider's figures."""
    providers = dict(loaded.config.providers)
    for name, cap in caps.items():
        share = cap // workers + (1 if index < cap % workers else 0)
        update: dict[str, object] = {"max_concurrency": share}
        limit = getattr(providers[name], "rate_limit", None)
        if limit is not None:  # an exact share of the pacing too: the shares sum to the limit
            update["rate_limit"] = limit.model_copy(
                update={key: value / workers for key, value in limit.model_dump().items() if value is not None}
            )
        providers[name] = providers[name].model_copy(update=update)
    return dataclasses.replace(loaded, config=loaded.config.model_copy(update={"providers": providers}))


def driver_error(ray: ModuleType, exc: BaseException, start: int, stop: int) -> BaseException:
    """A Ray failure as the genwire error the user should see."""
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, GenwireError):
        return exc.cause
    if isinstance(exc, ray.exceptions.RayActorError) and getattr(exc, "actor_init_failed", False):
        return RunError(
            f"a Ray worker could not start ({last_line(exc)}); the pipeline's generator classes and their "
            "modules must be importable on every Ray node (install the plugins there too)"
        )
    if isinstance(exc, ray.exceptions.RayActorError):
        return RunError(
            f"a Ray worker process died running rows [{start}, {stop}) and the block could not be completed "
            f"within the retry budget ({MAX_RESTARTS} restarts per worker, {MAX_TASK_RETRIES} retries per "
            f"block): {first_line(exc)}"
        )
    return RunError(f"Ray failed running rows [{start}, {stop}): {type(exc).__name__}: {first_line(exc)}")


async def close_workers(
    ray: ModuleType, actors: list[Any], feed: Callable[[Receipt], None], drains: Drains | None = None
) -> None:
    """Close every worker's container (bounded wait) and free the actors' CPUs; ``feed``
    gets what the workers paid for since their last drain, ``drains`` their last drains
    (before the actors are killed)."""
    try:
        if drains is not None:
            drains.closing()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(drains.last(actors), CLOSE_TIMEOUT_S)
        if actors:
            closing = asyncio.gather(*(actor.close.remote() for actor in actors), return_exceptions=True)
            with contextlib.suppress(asyncio.TimeoutError):
                for receipt in await asyncio.wait_for(closing, CLOSE_TIMEOUT_S):
                    if isinstance(receipt, Receipt):
                        feed(receipt)
    finally:
        if drains is not None:
            await drains.close()
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)


def batch_keys(rows: list[int], batch_size: int) -> list[int]:
    """The keys of a block's batches (each one's first row), as its worker batches it."""
    return [batch[0] for batch in batched(rows, batch_size)]


async def store_worker_answers(cache: ResponseCache, results: list[BatchResult]) -> None:
    """Store the answers a block's workers paid for (one transaction, off the event loop)
    and count its hits as this process's: the workers only read the cache."""
    answers = [entry for result in results for entry in result.answers]
    for result in results:
        result.answers = []  # stored: the rows go on without them
        cache.hits += result.cached
    if answers and cache.writable:
        await asyncio.to_thread(cache.put_many, answers)


def per_block(n: int, batch_size: int, workers: int) -> int:
    """Batches per block: small enough that every worker gets blocks, large enough to
    amortise a round trip."""
    return max(1, min(BATCHES_PER_BLOCK, math.ceil(math.ceil(n / batch_size) / (workers * BLOCKS_PER_WORKER))))
