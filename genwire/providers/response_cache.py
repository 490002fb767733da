"""The response cache's store (SPEC §12): one SQLite database in WAL mode.

Why SQLite: the standard library has it; a run writes many small entries; WAL lets two
runs (or Ray workers) read while one writes; every batch of writes is one atomic
transaction, so a killed run leaves either the whole batch or none of it. ``busy_timeout``
makes concurrent writers wait for each other (their transactions last milliseconds).

A run keeps one reading connection (on the event loop: a lookup is a dict lookup in the
entries fetched in bulk for a batch and column, ``get_many``) and one writing connection
(used from a worker thread, one transaction per column and batch) open until ``close``.
A cache that cannot be written (another process holds it locked past ``WRITE_WAIT_S``, a
read-only file, a full disk) is one warning, then the run goes on without writing to it;
reads may still hit. A directory or file this process cannot write (a read-only mount,
another user's cache) is opened read-only from the start (SQLite ``mode=ro``, else
``immutable``): one warning saying "read-only", and every hit served.

An entry is keyed by a sha256 (``entry_key``) and holds the answer as JSON plus the
tokens it was paid with, the column and first row (for ``genwire cache info``) and when it
was stored. Never a key, a request or a header. A database that cannot be opened or read
is a warning and every lookup a miss; an entry that does not decode is a warning and a
miss (the next answer replaces it). Files get the user's umask (SQLite's default).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.decoder import scanstring as _scan_text  # type: ignore[attr-defined]  # json.loads's own (C) string scanner, untyped in typeshed
from json.encoder import encode_basestring as _text_json  # what _ANSWER_ENCODER writes for a str
from json.encoder import encode_basestring_ascii as _escape  # what _KEY_ENCODER escapes strings with
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from genwire.providers.base import chat_messages

if TYPE_CHECKING:  # the loader (yaml) is not needed to use a cache
    from genwire.config.loader import LoadedConfig

log = logging.getLogger("genwire.cache")

Role = Literal["read", "write"]

# 2: the key holds the non-credential headers' hash (not the API key's) and the pipeline
# seed. Entries of another version are never matched: they are simply misses.
FORMAT_VERSION = 2
DB_NAME = "responses.sqlite3"
# Another run's write transaction lasts milliseconds; a lock held longer than this is a
# cache we cannot write to (one warning, then the run goes on without writing).
WRITE_WAIT_S = 2.0
# Opening (WAL mode, the tables) waits longer: another run may be setting up the same file,
# and a cache given up at the start is a whole run paid again (seen: over 2 s on a loaded machine).
OPEN_WAIT_S = 10.0
# Rows per bulk lookup query (SQLite's variable limit is 999 on old builds).
LOOKUP_CHUNK = 900

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
_COLUMNS = "key, col, row, answer, prompt_tokens, completion_tokens, stored_at"
_SELECT = "SELECT key, answer, prompt_tokens, completion_tokens FROM answers WHERE col = ? AND row"
_BY_RANGE = f"{_SELECT} BETWEEN ? AND ?"
_BY_ROWS = f"{_SELECT} IN"
_BY_KEY = f"{_SELECT} = ? AND key = ?"
# A batch's entries in one statement per chunk (``INSERT ... VALUES (...), (...)``): one
# parse of the parameters, bound in C, and SQLite lets go of the GIL once per statement (a
# worker thread taking it back once per row, executemany, waited on the busy event loop
# each time). A chunk's 7 parameters a row stay under SQLite's oldest variable limit (999);
# a JSON array read back by json_each cost 3x the CPU per entry.
INSERT_ROWS = 128
_PLACES = "(?, ?, ?, ?, ?, ?, ?)"


@functools.lru_cache(maxsize=INSERT_ROWS)
def _insert(rows: int) -> str:
    return f"INSERT OR REPLACE INTO answers ({_COLUMNS}) VALUES " + ", ".join([_PLACES] * rows)


def _ensure_layout(conn: sqlite3.Connection) -> None:
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
                conn.execute(f"INSERT OR REPLACE INTO answers ({_COLUMNS}) SELECT {_COLUMNS} FROM {_OLD_TABLE}")
                conn.execute(f"DROP TABLE {_OLD_TABLE}")  # its index goes with it
            conn.execute(f"PRAGMA user_version = {LAYOUT}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _cannot_write(exc: sqlite3.Error) -> bool:
    """A lock held too long, a read-only file or a full disk: the cache can still be read."""
    text = str(exc).lower()
    return any(p in text for p in ("locked", "busy", "readonly", "read-only", "full", "disk i/o"))


def _read_only(directory: Path, path: Path) -> bool:
    """Whether this process cannot write the cache: its directory (where WAL mode keeps
    its -wal and -shm files) or its file is not writable. ``os.access`` asks the kernel,
    so a read-only mount counts for root too (root passes mode bits, not a ro mount)."""
    if path.exists():
        return not (os.access(path, os.W_OK) and os.access(directory, os.W_OK))
    return directory.is_dir() and not os.access(directory, os.W_OK)


# One encoder for every key: ``json.dumps`` with options builds a new one per call. ASCII
# output (non-ASCII as \u escapes) is as canonical and a third faster to make.
_KEY_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    default=repr,  # a plugin's odd param still gets a key; sending it fails as it always did
)


# A JSON string with no escape in it: its text is exactly what is between the quotes.
_PLAIN_STRING = re.compile(r'"[^"\\\x00-\x1f]*"')


def _stored_answer(text: str) -> Any:
    """An entry's answer as json.loads gives it. A text with nothing to unescape is taken
    as written; one with escapes (a newline, a quote: most of a model's answers) goes to
    json's C string scanner alone (json.loads around it cost 5.5 us a hit, more than the
    rest of a cached row's lookup); anything else is decoded whole."""
    if text[:1] == '"':
        if _PLAIN_STRING.fullmatch(text):
            return text[1:-1]
        answer, end = _scan_text(text, 1)
        if end == len(text):
            return answer
    return json.loads(text)


# Answers as stored: strict JSON (no NaN: the output could not hold it), UTF-8 as is.
_ANSWER_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def entry_key(endpoint: str, body: Any, column: str, rows: Sequence[int], seed: int = 0) -> str:
    """sha256 of the endpoint identity, the request body as sent (canonical JSON: sorted
    keys), the column, the row indices and the pipeline seed. ``endpoint`` holds only a
    hash of the provider's non-credential headers, never a header value or the API key."""
    text = _KEY_ENCODER.encode([FORMAT_VERSION, endpoint, body, column, list(rows), seed])
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# Where a request's varying part sits in its body as given to ``KeyTemplate``: random per
# process, so no request can hold it (the key never does: the part takes its place).
HOLE = f"\x00genwire:part:{os.urandom(12).hex()}\x00"
_HOLE_JSON = _KEY_ENCODER.encode(HOLE)


class KeyTemplate:
    """``entry_key`` for the requests of a column that differ only in their rows and in
    one part of the body (a chat request's messages, an embedding request's inputs): the
    rest is encoded once. The canonical JSON of a container is its parts' JSON joined, so
    ``key(part, rows)`` is ``entry_key`` of the body with ``part`` in the ``HOLE``, byte
    for byte (held equal by a test), at a third of the cost: on a cached rerun, encoding
    the key was a quarter of a hit's cost."""

    __slots__ = ("_body", "_column", "_endpoint", "_parts", "_seed")

    def __init__(self, endpoint: str, body: Any, column: str, seed: int) -> None:
        """``body``: the request's body with ``HOLE`` where its varying part goes."""
        self._endpoint, self._body, self._column, self._seed = endpoint, body, column, seed
        parts = _KEY_ENCODER.encode([FORMAT_VERSION, endpoint, body, column, HOLE, seed]).split(_HOLE_JSON)
        # Three parts unless HOLE's text also sat elsewhere (only a request built from
        # HOLE itself could): then each key is encoded whole.
        self._parts = parts if len(parts) == 3 else None

    def matches(self, endpoint: str, body: Any) -> bool:
        # Python's equality: a param of 1 in one request and 1.0 (or True) in the next of
        # the same column shares the first one's key. Servers read 1 and 1.0 alike; the
        # built-ins send a column's params unchanged from row to row.
        return endpoint == self._endpoint and body == self._body

    def key(self, part: Any, rows: tuple[int, ...]) -> str:
        if self._parts is None:
            return entry_key(self._endpoint, _filled(self._body, part), self._column, rows, self._seed)
        head, middle, tail = self._parts
        # Rows are ints: str() is their JSON.
        rows_json = str(rows[0]) if len(rows) == 1 else ",".join(map(str, rows))
        text = f"{head}{_part_json(part)}{middle}[{rows_json}]{tail}"
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    def chat_keys(self, prompts: Sequence[tuple[str, str | None] | None], rows: Sequence[int]) -> list[str | None]:
        """``key(chat_messages(*prompts[i]), (rows[i],))`` for each chat request made for one
        row (None for a prompt None): the messages' JSON written straight from the texts
        (the same bytes, held equal by a test), a batch's keys in one loop."""
        if self._parts is None:
            return [
                None if p is None else self.key(chat_messages(*p), (row,)) for p, row in zip(prompts, rows, strict=True)
            ]
        head, middle, tail = self._parts
        sha256, escape = hashlib.sha256, _escape
        keys: list[str | None] = []
        for prompt, row in zip(prompts, rows, strict=True):
            if prompt is None:
                keys.append(None)
                continue
            text, system = prompt
            user = f'{{"content":{escape(text)},"role":"user"}}'
            messages = user if system is None else f'{{"content":{escape(system)},"role":"system"}},{user}'
            keys.append(sha256(f"{head}[{messages}]{middle}[{row}]{tail}".encode("ascii")).hexdigest())
        return keys


def _part_json(part: Any) -> str:
    """``_KEY_ENCODER.encode(part)``; for the usual parts (a list of texts, a list of
    messages: dicts of texts) built from the C string escaper without the encoder's
    per-container cost."""
    if type(part) is not list:
        return _KEY_ENCODER.encode(part)
    items = []
    for item in part:
        if type(item) is str:
            items.append(_escape(item))
        elif type(item) is dict and len(item) == 2 and type(content := item.get("content")) is str:
            # A chat message ({"role", "content"}, texts): its sorted keys written directly.
            role = item.get("role")
            if type(role) is not str:
                return _KEY_ENCODER.encode(part)
            items.append(f'{{"content":{_escape(content)},"role":{_escape(role)}}}')
        elif type(item) is dict:
            fields = []
            for name in sorted(item):
                value = item[name]
                if type(name) is not str or type(value) is not str:
                    return _KEY_ENCODER.encode(part)
                fields.append(f"{_escape(name)}:{_escape(value)}")
            items.append("{" + ",".join(fields) + "}")
        else:
            return _KEY_ENCODER.encode(part)
    return "[" + ",".join(items) + "]"


def _filled(body: Any, part: Any) -> Any:
    """``body`` with ``part`` in place of ``HOLE``."""
    if isinstance(body, dict):
        return {k: _filled(v, part) for k, v in body.items()}
    if isinstance(body, list):
        return [_filled(v, part) for v in body]
    return part if body == HOLE else body


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


class ResponseCache:
    """One cache directory, opened lazily on first use and kept open until ``close``.
    Lookups (on the event loop) and writes (in a worker thread) use two connections, each
    behind its own lock: in WAL mode a reader never waits for a writer, so a write waiting
    out another run's transaction never stalls the loop's lookups."""

    entry: ClassVar[type[Entry]] = Entry  # what an answer to store is (request_context makes them)

    def __init__(self, directory: Path, *, writer: bool = True) -> None:
        """``writer=False``: this process only reads (a Ray worker: the driver is the
        cache's one writer, storing the answers the workers send back with their rows)."""
        self.directory = directory
        self.path = directory / DB_NAME
        self._writer = writer
        self._conns: dict[Role, sqlite3.Connection] = {}
        self._broken = False  # warned once; from then on every lookup is a miss
        self._no_writes = False  # a write failed (warned once): the run goes on without writing
        self._locks: dict[Role, threading.Lock] = {"read": threading.Lock(), "write": threading.Lock()}
        self._closed = False
        self._warned: set[str] = set()
        self.hits = 0  # served by this process since it opened the cache
        self.lookups = 0  # lookup queries sent by this process (one per batch and column)
        self._hits_saved = 0

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r})"

    @property
    def writable(self) -> bool:
        """False once a write failed (locked, read-only, full), or for a reader only:
        nothing (more) is written."""
        return self._writer and not (self._no_writes or self._broken)

    def warn_once(self, kind: str, message: str) -> None:
        """One warning per kind of problem per run: a problem repeats for every entry."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("%s", message)

    # --- connection ----------------------------------------------------------------------

    def _connect(self, role: Role) -> sqlite3.Connection | None:
        """The ``role`` connection; the caller holds that role's lock. A reader that cannot
        open disables the cache; a writer that cannot, only the writes."""
        if self._broken or (role == "write" and self._no_writes):
            return None
        if role in self._conns:
            return self._conns[role]
        if _read_only(self.directory, self.path):
            return self._open_read_only(role, "this process cannot write there")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=OPEN_WAIT_S, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            self._disable(f"cannot open the response cache {self.path} ({exc}); running without it")
            return None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(OPEN_WAIT_S * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: a commit survives a crash of the process
            _ensure_layout(conn)
            conn.execute(f"PRAGMA busy_timeout = {int(WRITE_WAIT_S * 1000)}")  # set up: writes wait as before
        except sqlite3.Error as exc:
            conn.close()
            if role == "write" and _cannot_write(exc):
                self._stop_writing(exc)
            elif any(p in str(exc).lower() for p in ("readonly", "read-only", "unable to open")):
                return self._open_read_only(role, str(exc))  # e.g. a read-only mount access() did not see
            else:
                self._disable(f"the response cache {self.path} is unreadable ({exc}); running without it")
            return None
        self._conns[role] = conn
        return conn

    def _open_read_only(self, role: Role, why: str) -> sqlite3.Connection | None:
        """A cache this process cannot write (a read-only mount, another user's files):
        its answers are still served, read through SQLite's read-only mode; nothing is
        written. ``immutable`` when even the WAL index cannot be made beside the file
        (nobody can be writing it then). One warning saying "read-only"."""
        self._no_writes = True
        self.warn_once(
            "read-only",
            f"the response cache {self.path} is read-only ({why}): its answers are used, new ones are not stored",
        )
        if role == "write":
            return None
        if not self.path.is_file():  # nothing stored yet, and nothing can be: every lookup a miss
            self._broken = True
            return None
        uri = self.path.absolute().as_uri()
        failure: sqlite3.Error | None = None
        for options in ("mode=ro", "mode=ro&immutable=1"):
            conn = sqlite3.connect(f"{uri}?{options}", uri=True, timeout=WRITE_WAIT_S, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(WRITE_WAIT_S * 1000)}")
                conn.execute("SELECT 1 FROM answers LIMIT 1").fetchall()
            except sqlite3.Error as exc:
                conn.close()
                failure = exc
                continue
            self._conns[role] = conn
            return conn
        self._disable(f"the response cache {self.path} is read-only and cannot be read ({failure}); running without it")
        return None

    def _disable(self, message: str) -> None:
        self.warn_once("disabled", message)
        self._broken = True

    def _lookup_failed(self, exc: sqlite3.Error) -> None:
        # It would fail (or wait out the lock) again for every batch: one warning, no more lookups.
        self._disable(f"response cache lookup failed in {self.path} ({exc}); running without it")

    def _stop_writing(self, exc: sqlite3.Error) -> None:
        self._no_writes = True
        self.warn_once(
            "write",
            f"cannot write to the response cache {self.path} ({exc}); the run goes on without "
            "writing to it (answers already in it are still used)",
        )

    def close(self) -> None:
        """Record this process's hits and close (idempotent). A write still running in a
        thread finishes first; one that starts later opens, writes and closes on its own."""
        self._closed = True
        with self._locks["read"]:
            reader = self._conns.pop("read", None)
            if reader is not None:
                reader.close()
        with self._locks["write"]:
            new = self.hits - self._hits_saved
            conn = self._connect("write") if new and self.writable else self._conns.get("write")
            self._conns.pop("write", None)
            if conn is None:
                return
            try:
                if new and self.writable:
                    with conn:
                        conn.execute(
                            "INSERT INTO meta(name, value) VALUES ('hits', ?) "
                            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                            (new,),
                        )
                    self._hits_saved = self.hits
            except sqlite3.Error as exc:
                self._stop_writing(exc)
            finally:
                conn.close()

    def prepare(self) -> None:
        """Open the writing connection now, creating the database and its tables: readers
        in other processes (Ray workers) then find it made and never write to it."""
        if self.writable:
            with self._locks["write"]:
                self._connect("write")

    # --- entries -------------------------------------------------------------------------

    def get(self, column: str, row: int, key: str) -> CachedAnswer | None:
        """One entry by its column, first row and key (a request for rows that no bulk
        lookup covered)."""
        with self._locks["read"]:
            conn = self._connect("read") if not self._closed else None
            if conn is None:
                return None
            self.lookups += 1
            try:
                found = conn.execute(_BY_KEY, (column, row, key)).fetchone()
            except sqlite3.Error as exc:
                self._lookup_failed(exc)
                return None
        return None if found is None else self.decode(found)

    def get_many(self, column: str, rows: Iterable[int]) -> dict[str, Stored]:
        """Every entry stored for ``column`` whose first row is one of ``rows``, by key: one
        query for a batch's rows (consecutive ones as a range, others in chunks)."""
        wanted = sorted(set(rows))
        if not wanted:
            return {}
        with self._locks["read"]:
            conn = self._connect("read") if not self._closed else None
            if conn is None:
                return {}
            self.lookups += 1
            try:
                if wanted[-1] - wanted[0] < 2 * len(wanted):  # dense: one range (extras are harmless)
                    return {stored[0]: stored for stored in conn.execute(_BY_RANGE, (column, wanted[0], wanted[-1]))}
                found: dict[str, Stored] = {}
                for start in range(0, len(wanted), LOOKUP_CHUNK):
                    chunk = wanted[start : start + LOOKUP_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    sql = f"{_BY_ROWS} ({marks})"
                    found.update((stored[0], stored) for stored in conn.execute(sql, (column, *chunk)))
                return found
            except sqlite3.Error as exc:
                self._lookup_failed(exc)
                return {}

    def served(self, found: dict[str, Stored], keys: Sequence[str | None], usable: Callable[[Any], bool]) -> Hits:
        """The answers stored under ``keys`` in ``found`` (a bulk lookup's entries) that pass
        ``usable``, None for the others (no key, not found, unreadable, unusable), with what
        the hits were paid with: a batch's hits in one loop (a cached rerun's hot path). A
        plain text with integer tokens (most entries) is taken as it is."""
        plain, get = _PLAIN_STRING.fullmatch, found.get
        answers: list[Any | None] = []
        count = prompt_tokens = completion_tokens = 0
        unusable = False
        for key in keys:
            stored = None if key is None else get(key)
            if stored is None:
                answers.append(None)
                continue
            text, prompt, completion = stored[1], stored[2], stored[3]
            if type(prompt) is int and type(completion) is int and plain(text):
                answer: Any = text[1:-1]
            else:
                decoded = self.decode(stored)
                if decoded is None:
                    answers.append(None)
                    continue
                answer, prompt, completion = decoded
            if not usable(answer):
                unusable = True
                answers.append(None)
                continue
            count += 1
            prompt_tokens += prompt
            completion_tokens += completion
            answers.append(answer)
        return Hits(answers, count, prompt_tokens, completion_tokens, unusable)

    def decode(self, stored: Stored) -> CachedAnswer | None:
        """A stored entry as an answer; None (a warning, once) when it does not decode."""
        text = stored[1]
        try:
            return CachedAnswer(_stored_answer(text), int(stored[2]), int(stored[3]))
        except (ValueError, TypeError) as exc:
            self.warn_once("entry", f"ignoring an unreadable response cache entry in {self.path} ({exc})")
            return None

    def put_many(self, entries: Iterable[Entry]) -> None:
        """Store entries in one transaction. The first failure (locked past
        ``WRITE_WAIT_S``, read-only, full) is one warning, and nothing more is written this
        run: the answers are simply asked for again next time. An answer the output could
        not hold (a lone surrogate, NaN) is not stored: its row fails as unwritable and
        must be asked again."""
        if not self.writable:
            return
        now = time.time()
        params: list[Any] = []
        for e in entries:
            answer = e.answer
            try:
                # A text's JSON is its escaped string (what the encoder writes for one, in C).
                text = _text_json(answer) if type(answer) is str else _ANSWER_ENCODER.encode(answer)
                text.encode("utf-8")
            except (ValueError, TypeError):
                continue
            params += (e.key, e.column, e.row, text, e.prompt_tokens, e.completion_tokens, now)
        if not params:
            return
        step = 7 * INSERT_ROWS
        with self._locks["write"]:
            conn = self._connect("write")
            if conn is None:
                return
            try:
                with conn:
                    for start in range(0, len(params), step):
                        chunk = params[start : start + step]
                        conn.execute(_insert(len(chunk) // 7), chunk)
            except sqlite3.Error as exc:
                self._stop_writing(exc)
            finally:
                if self._closed or self._no_writes:  # a write that outlived close(), or the last one
                    self._conns.pop("write", None)
                    conn.close()

    # --- genwire cache info | clear ------------------------------------------------------

    def info(self) -> CacheInfo:
        size = sum(p.stat().st_size for p in self.directory.glob(DB_NAME + "*") if p.is_file())
        empty = CacheInfo(self.directory, 0, size, None, None, 0, {})
        if not self.path.exists():
            return empty
        with self._locks["write"], self._locks["read"]:
            conn = self._connect("write") or self._connect("read")  # read-only: the reader
            if conn is None:
                return empty
            try:
                count, oldest, newest = conn.execute(
                    "SELECT COUNT(*), MIN(stored_at), MAX(stored_at) FROM answers"
                ).fetchone()
                columns = dict(conn.execute("SELECT col, COUNT(*) FROM answers GROUP BY col ORDER BY col"))
                hit_row = conn.execute("SELECT value FROM meta WHERE name = 'hits'").fetchone()
            except sqlite3.Error as exc:
                log.warning("cannot read the response cache %s (%s)", self.path, exc)
                return empty
        return CacheInfo(self.directory, count, size, oldest, newest, hit_row[0] if hit_row else 0, columns)

    def clear(self) -> int:
        """Delete every entry; returns how many there were. Safe while another run uses it."""
        if not self.path.exists():
            return 0
        with self._locks["write"]:
            conn = self._connect("write")
            if conn is None and not self._broken:  # locked or read-only (warned): leave it be
                return 0
            if conn is None:  # unreadable (warned): clearing it means removing its files
                for part in self.directory.glob(DB_NAME + "*"):
                    part.unlink(missing_ok=True)
                self._broken = False
                return 0
            try:
                with conn:
                    count = conn.execute("DELETE FROM answers").rowcount
                    conn.execute("DELETE FROM meta")
                conn.execute("VACUUM")
            except sqlite3.Error as exc:
                log.warning("cannot clear the response cache %s (%s)", self.path, exc)
                return 0
        return int(count)


# Sources of configs that have no file to sit beside (``genwire.boot(dict)``, YAML text).
_NO_FILE = frozenset({"<dict>", "<string>"})


def cache_dir(loaded: LoadedConfig) -> Path | None:
    """Where a config's response cache lives (whether or not ``cache.enabled``):
    ``cache.dir`` (relative to the config's directory), else ``.genwire/cache`` beside the
    config file; None for a config with no file and no ``cache.dir``."""
    cfg = loaded.config.cache
    if cfg.dir is not None:
        return loaded.resolve_path(cfg.dir)
    if loaded.source in _NO_FILE:
        return None
    return loaded.base_dir / ".genwire" / "cache"
