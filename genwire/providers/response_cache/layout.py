"""What the response cache's database holds: its file name, tables and queries, the move
from the layout before, the rows as Python sees them (``Entry``, ``CachedAnswer``,
``Stored``, ``CacheInfo``) and an answer's JSON as stored and read back.
"""

from __future__ import annotations

import binascii
import itertools
import json
import math
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from json.decoder import scanstring as _scan_text  # type: ignore[attr-defined]  # json.loads's own (C) string scanner, untyped in typeshed
from json.encoder import encode_basestring as text_json
from pathlib import Path
from typing import Any, NamedTuple

from genwire.providers.packed_floats import packed, unpacked_bytes
from genwire.providers.vectors import is_matrix

__all__ = ["DB_NAME", "CacheInfo", "CachedAnswer", "Entry", "Hits", "Stored"]

DB_NAME = "responses.sqlite3"

# The table is clustered by (column, first row, key): a run stores its rows in order, so a
# write appends to the end of the tree, and a batch's bulk lookup reads one contiguous
# range. (Keyed by the sha256 alone, every write landed in a random page of two indices
# and a first run wrote 5-8x slower as the cache grew.) A key fixes its column and first
# row, so the triple is as unique as the key.
LAYOUT = 3  # PRAGMA user_version; 0: the layout before, keyed by the sha256 (migrated once)
_TABLES = (
    """CREATE TABLE IF NOT EXISTS answers (
    key TEXT NOT NULL,
    col TEXT NOT NULL,
    row INTEGER NOT NULL,
    answer TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    stored_at REAL NOT NULL,
    PRIMARY KEY (col, row, key)
) WITHOUT ROWID""",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)
_OLD_TABLE = "answers_before_layout_3"
COLUMNS = "key, col, row, answer, prompt_tokens, completion_tokens, stored_at"
_SELECT = "SELECT key, answer, prompt_tokens, completion_tokens FROM answers WHERE col = ? AND row"
BY_RANGE = f"{_SELECT} BETWEEN ? AND ?"
BY_ROWS = f"{_SELECT} IN"
BY_KEY = f"{_SELECT} = ? AND key = ?"


def ensure_layout(conn: sqlite3.Connection) -> None:
    """Create the tables, or move a cache of the layout before into them (its entries are
    paid answers: they are kept). Once, whichever connection comes first."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= LAYOUT:
        return
    conn.execute("BEGIN IMMEDIATE")  # the other connection (or run) waits, then sees it done
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < LAYOUT:
            old = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'answers'").fetchone()
            if old:
                conn.execute(f"ALTER TABLE answers RENAME TO {_OLD_TABLE}")
            for table in _TABLES:
                conn.execute(table)
            if old:
                conn.execute(f"INSERT OR REPLACE INTO answers ({COLUMNS}) SELECT {COLUMNS} FROM {_OLD_TABLE}")
                conn.execute(f"DROP TABLE {_OLD_TABLE}")  # its index goes with it
            conn.execute(f"PRAGMA user_version = {LAYOUT}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def use_wal(conn: sqlite3.Connection, wait_s: float) -> None:
    """Put the cache in WAL mode (a property of the file: once set, every later opening
    finds it). SQLite answers a switch that races another connection's with "database is
    locked" at once, without its busy handler (seen: 1 in 12 of three runs opening a new
    cache together, one of which then ran without it), so the switch is tried again for up
    to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def cannot_write(exc: sqlite3.Error) -> bool:
    """A lock held too long, a read-only file or a full disk: the cache can still be read."""
    text = str(exc).lower()
    return any(p in text for p in ("locked", "busy", "readonly", "read-only", "full", "disk i/o"))


def read_only(directory: Path, path: Path) -> bool:
    """Whether this process cannot write the cache: its directory (where WAL mode keeps
    its -wal and -shm files) or its file is not writable. ``os.access`` asks the kernel,
    so a read-only mount counts for root too (root passes mode bits, not a ro mount)."""
    if path.exists():
        return not (os.access(path, os.W_OK) and os.access(directory, os.W_OK))
    return directory.is_dir() and not os.access(directory, os.W_OK)


# A JSON string with no escape in it: its text is exactly what is between the quotes.
PLAIN_STRING = re.compile(r'"[^"\\\x00-\x1f]*"')


def stored_answer(text: str) -> Any:
    """An entry's answer as json.loads gives it. A text with nothing to unescape is taken
    as written; one with escapes (a newline, a quote: most of a model's answers) goes to
    json's C string scanner alone (json.loads around it cost 5.5 us a hit, more than the
    rest of a cached row's lookup); anything else is decoded whole."""
    if text[:1] == '"':
        if PLAIN_STRING.fullmatch(text):
            return text[1:-1]
        answer, end = _scan_text(text, 1)
        if end == len(text):
            return answer
    if text.startswith(VECTORS):
        return _vectors_of(text)
    return json.loads(text)


# Answers as stored: strict JSON (no NaN: the output could not hold it), UTF-8 as is.
ANSWER_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

# Embedding answers (equal-length lists of finite floats) are stored as the base64 of their
# float64 bytes behind this prefix, which no JSON text starts with: lossless, and written
# in C (as JSON numbers, float by float, they were a quarter of a keep-novel run's time).
VECTORS = "~f8:"
_FLOATS = frozenset({float})


def stored_text(answer: Any) -> str:
    """What an entry stores for ``answer``; ValueError/TypeError when it cannot be stored
    (NaN, a value JSON cannot hold)."""
    if type(answer) is str:
        return text_json(answer)
    if is_matrix(answer):  # an embedding answer, checked (providers.vectors): its bytes
        data = binascii.b2a_base64(answer.astype("<f8").tobytes(), newline=False).decode()
        return f"{VECTORS}{answer.shape[1]}:{data}"
    if _is_vectors(answer):
        return f"{VECTORS}{len(answer[0])}:{packed(itertools.chain.from_iterable(answer), 'd')}"
    return ANSWER_ENCODER.encode(answer)


def _is_vectors(answer: Any) -> bool:
    if type(answer) is not list or not answer or type(answer[0]) is not list or not answer[0]:
        return False
    length = len(answer[0])
    # math.fsum would say the same; a sum that overflows only sends the answer to the JSON path
    return all(
        type(v) is list and len(v) == length and set(map(type, v)) <= _FLOATS and math.isfinite(sum(v))
        for v in answer
    )


def _vectors_of(text: str) -> Any:
    """The float64 matrix of stored vectors (``providers.vectors``), checked as a fresh answer is."""
    import numpy as np

    length_text, _, data = text[len(VECTORS) :].partition(":")
    length = int(length_text)
    raw = unpacked_bytes(data, 8 * length) if length > 0 else None
    if raw is None:
        raise ValueError("stored vectors are not whole float64 vectors of their length")
    return np.frombuffer(raw, dtype="<f8").reshape(-1, length).astype(np.float64)


class CachedAnswer(NamedTuple):  # a tuple: built once per hit, on the hot path
    answer: Any
    prompt_tokens: int
    completion_tokens: int


class Hits(NamedTuple):
    """A batch's lookups: the usable answers (None: a miss), how many, what they were paid
    with, and whether an entry failed the checks of a fresh answer."""

    answers: list[Any | None]
    hits: int
    prompt_tokens: int
    completion_tokens: int
    unusable: bool


class Entry(NamedTuple):  # a tuple: one per answer received
    key: str
    column: str
    row: int
    answer: Any
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    bytes: int
    oldest: float | None
    newest: float | None
    hits: int
    columns: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "entries": self.entries,
            "bytes": self.bytes,
            "oldest": self.oldest,
            "newest": self.newest,
            "hits": self.hits,
            "columns": self.columns,
        }


# (key, answer JSON text, prompt tokens, completion tokens), by key, as read in bulk (the
# row as SQLite gives it, not repacked): decoded on a hit only.
Stored = tuple[str, str, int, int]
