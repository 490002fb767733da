"""Where genwire keeps per-user files."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """The user cache directory, as the XDG spec places it: ``$XDG_CACHE_HOME/genwire``,
    else ``~/.cache/genwire`` (the probe cache; the static check's scans)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "genwire"
