"""The response cache (SPEC §12): a run's paid answers kept in one SQLite database, keyed by
the request as sent, so a rerun pays only for what changed.

By role: ``store`` (``ResponseCache``: the connections, lookups in bulk, writes in a
worker thread, ``cache_dir``), ``keys`` (``entry_key``, ``KeyTemplate``, ``HOLE``),
``layout`` (the file's tables and queries, the rows as Python sees them). The names this
was known by as one module are exported here.
"""

from genwire.providers.response_cache.keys import FORMAT_VERSION, HOLE, KeyTemplate, entry_key
from genwire.providers.response_cache.layout import DB_NAME, CachedAnswer, CacheInfo, Entry, Hits, Stored
from genwire.providers.response_cache.store import ResponseCache, cache_dir

__all__ = [
    "DB_NAME",
    "FORMAT_VERSION",
    "HOLE",
    "CacheInfo",
    "CachedAnswer",
    "Entry",
    "Hits",
    "KeyTemplate",
    "ResponseCache",
    "Stored",
    "cache_dir",
    "entry_key",
]
