"""The probe cache: ``ok`` results of model probes, on disk, for ``preflight.cache_ttl_s``.

Keyed by a hash of everything that decides the probe request and its verdict: provider
kind, base URL, a hash of the API key, model, kind, params, the request shape and the
expected ``dimensions`` (``endpoint_identity`` plus shape and dimensions). A file holds
the verdict's message and when it was stored, never a key or a request. Failures are
never stored. Each entry is written atomically; a file that cannot be read is ignored
with a warning (the probe simply runs), never an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.config.paths import user_cache_dir

log = logging.getLogger("genwire.preflight")

FORMAT_VERSION = 1


def default_cache_dir() -> Path:
    """The probe cache's directory: the user cache directory (``container.preflight(cache_dir=...)``
    overrides it)."""
    return user_cache_dir()


def cache_key(identity: Hashable, shape: Any, dimensions: int | None) -> str:
    text = json.dumps([repr(identity), shape, dimensions], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CachedResult:
    message: str
    age_s: float


class ProbeCache:
    def __init__(self, directory: Path, ttl_s: float) -> None:
        self.directory = directory / "probes"
        self.ttl_s = ttl_s

    def get(self, key: str) -> CachedResult | None:
        path = self.directory / f"{key}.json"
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            if entry["version"] != FORMAT_VERSION:
                return None
            stored, message = float(entry["stored_at"]), str(entry["message"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the unreadable probe cache file %s (%s)", path, exc)
            return None
        age = time.time() - stored
        if not 0 <= age <= self.ttl_s:
            return None
        return CachedResult(message, age)

    def put(self, key: str, message: str) -> None:
        entry = {"version": FORMAT_VERSION, "stored_at": time.time(), "message": message}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entry, handle)
            os.replace(tmp, self.directory / f"{key}.json")
        except OSError as exc:  # a cache that cannot be written costs a probe next time, nothing more
            log.warning("cannot write the probe cache in %s (%s)", self.directory, exc)
