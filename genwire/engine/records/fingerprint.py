"""What decides a row's content, as a flat map of the user's key paths to short hashes.

A checkpoint stores it; a resumed run compares it key by key, so a mismatch names what
changed (``pipeline.columns[1] (question).params.prompt changed``) instead of saying
"something changed". Provider settings (URL, key, timeouts, concurrency, retries) are
left out on purpose: they change how rows are fetched, not what they are, so moving to
another endpoint for the same model resumes. ``num_records`` is not in it either: the
checkpoint compares it on its own (more rows extend a run, fewer are a mismatch).
"""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from genwire.config.loader import LoadedConfig, format_path
from genwire.container.wiring import ColumnWiring

Fingerprint = dict[str, str]

# Files read per dataset directory before giving up on listing it (a corpus of documents).
_MAX_LISTED_FILES = 100_000
_CHUNK = 1 << 20  # bytes read at a time while hashing a dataset file


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """Mappings are walked key by key so a change names the key; other values are leaves."""
    if isinstance(value, Mapping) and value:
        for key in sorted(value, key=str):
            yield from _flatten(f"{prefix}.{key}", value[key])
    else:
        yield prefix, value


def _content_hash(path: Path) -> str:
    """SHA-256 of a regular file, streamed (flat memory). Always read, never cached by
    size, mtime or inode: ``cp -p`` over a file keeps all three and changes the content.
    About 0.7-1.4 s per GB on a 2-core machine, file in the page cache (SHA-256 uses the
    CPU's SHA instructions and beats BLAKE2b there); see benchmarks/dataset_fingerprint.py."""
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def _file_state(path: Path) -> Any:
    """The content hash of a file, or of every file below a directory (with its relative
    path); a missing path is a state too (it will fail the pre-flight, and must not match
    a present file). A FIFO or device is never opened (reading it could block or never
    end): its kind stands in for its content."""
    try:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())[:_MAX_LISTED_FILES]
            return [[str(p.relative_to(path)), _content_hash(p)] for p in files]
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            return f"not a regular file (mode {stat.S_IFMT(mode):o})"
        return _content_hash(path)
    except OSError:
        return "missing"


def fingerprint(loaded: LoadedConfig, columns: list[ColumnWiring]) -> Fingerprint:
    cfg = loaded.config
    entries: dict[str, Any] = {"pipeline.seed": cfg.pipeline.seed, "pipeline.columns": [c.name for c in columns]}
    used: set[str] = set()
    for column in columns:
        head = f"{format_path(('pipeline', 'columns', column.index))} ({column.name})"
        entries[f"{head}.generator"] = column.generator_name
        # The validated params (defaults filled in): a default a plugin changes counts too.
        entries.update(_flatten(f"{head}.params", column.params.model_dump(mode="json")))
        for slot in column.slots.values():
            entries[f"{head}.resources.{slot.slot}"] = list(slot.resources)
            used.update(slot.resources)
    for alias in sorted(used & set(cfg.models)):
        model = cfg.models[alias]
        entries[f"models.{alias}.model"] = model.model
        served = sorted({e.model for e in model.endpoint_list})
        if served != [model.model]:  # a pool's other model names (which endpoints serve it is not in it)
            entries[f"models.{alias}.endpoints.model"] = served
        entries[f"models.{alias}.kind"] = model.kind
        entries[f"models.{alias}.dimensions"] = model.dimensions
        entries.update(_flatten(f"models.{alias}.params", model.params))
    for name in sorted(used & set(cfg.datasets)):
        dataset = cfg.datasets[name]
        entries.update(_flatten(f"datasets.{name}", dataset.model_dump(mode="json")))
        content = _file_state(loaded.resolve_path(dataset.path))
        entries[f"datasets.{name}.path (the content of {dataset.path})"] = content
    for name in sorted(used & set(cfg.tools)):  # what answers (command or URL) and what may be called
        entries[f"tools.{name}.server"] = cfg.tools[name].display()  # never env or headers (secrets)
        entries[f"tools.{name}.allow"] = cfg.tools[name].allow
    return {path: _digest(value) for path, value in entries.items()}


def changes(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """``<path> changed`` / ``added`` / ``removed``, in a stable order."""
    out = [f"{p} changed" for p in new if p in old and old[p] != new[p]]
    out += [f"{p} added" for p in new if p not in old]
    out += [f"{p} removed" for p in old if p not in new]
    return out
