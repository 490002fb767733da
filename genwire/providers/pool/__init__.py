"""Endpoint pools (SPEC §17): one model alias served by several endpoints, routed and failed
over by the pool. By role: ``endpoints`` (the pool, its members, their figures) and
``handles`` (what a generator holds, and building a pooled alias). The names this was known
by as one module are exported here.
"""

from genwire.providers.pool.endpoints import COOLDOWN_S, MAX_COOLDOWN_S, EndpointPool, EndpointStats, PoolMember
from genwire.providers.pool.handles import (
    PooledChatModel,
    PooledEmbeddingModel,
    make_pool_model,
    open_pool,
    pool_identity,
)

__all__ = [
    "COOLDOWN_S",
    "MAX_COOLDOWN_S",
    "EndpointPool",
    "EndpointStats",
    "PoolMember",
    "PooledChatModel",
    "PooledEmbeddingModel",
    "make_pool_model",
    "open_pool",
    "pool_identity",
]
