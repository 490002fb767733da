"""``RunOptions``: how a run goes, in one object (``Container.run(options)``).

Two caches, two names: ``probe_cache`` is the pre-flight's (ok verdicts of probes,
``preflight.cache_ttl_s``), ``response_cache`` the run's (model answers, ``cache:``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

Engine = Literal["local", "ray"]

# The keywords ``Container.run`` took before ``RunOptions``: still accepted.
_OLD_NAMES = {"use_cache": "probe_cache", "cache_dir": "probe_cache_dir"}


@dataclass(frozen=True)
class RunOptions:
    """``num_records`` (default: ``pipeline.num_records``), ``output`` (default:
    ``pipeline.output``), ``skip_preflight``, ``resume`` (False: discard the checkpoint),
    ``engine`` (``local`` or ``ray``, with ``ray_address`` and ``ray_workers``),
    ``probe_cache`` (False: probe everything) and ``probe_cache_dir``, ``response_cache``
    (False: neither read nor write model answers) and ``batch`` (True: every ``openai``
    provider sends its model calls through the Batch API; SPEC §14); ``max_cost_usd``
    (a cost cap over ``pipeline.budget``'s; SPEC §16) and ``sample_rows`` (the estimate:
    generate at most this many pending rows, keep them, and leave the run unfinished); ``metrics`` (False:
    record no metrics and write no report page; for measuring their cost)."""

    num_records: int | None = None
    output: str | Path | None = None
    skip_preflight: bool = False
    resume: bool = True
    engine: Engine = "local"
    ray_address: str | None = None
    ray_workers: int | None = None
    probe_cache: bool = True
    probe_cache_dir: Path | None = None
    response_cache: bool = True
    batch: bool = False
    max_cost_usd: float | None = None
    sample_rows: int | None = None
    metrics: bool = True

    @classmethod
    def of(cls, base: RunOptions | None = None, **keywords: Any) -> RunOptions:
        """``base`` (or the defaults) with ``keywords`` changed; the old keyword names
        (``use_cache``, ``cache_dir``) are understood."""
        known = {f.name for f in fields(cls)}
        changes: dict[str, Any] = {}
        for name, value in keywords.items():
            field_name = _OLD_NAMES.get(name, name)
            if field_name not in known:
                raise TypeError(f"run() got an unexpected keyword argument {name!r}")
            changes[field_name] = value
        values = {f.name: getattr(base, f.name) for f in fields(cls)} if base is not None else {}
        return cls(**{**values, **changes})
