"""The response cache's store (SPEC §12): one SQLite database in WAL mode.

``ResponseCache`` is one role (two connections, their locks and the one warning that
turns writing off), so it stays whole here; its keys are ``keys``', its tables ``layout``'s.

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
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from genwire.providers.response_cache.layout import (
    BY_KEY,
    BY_RANGE,
    BY_ROWS,
    COLUMNS,
    DB_NAME,
    PLAIN_STRING,
    CachedAnswer,
    CacheInfo,
    Entry,
    Hits,
    Stored,
    cannot_write,
    ensure_layout,
    read_only,
    stored_answer,
    stored_text,
    use_wal,
)

if TYPE_CHECKING:  # the loader (yaml) is not needed to use a cache
    from genwire.config.loader import LoadedConfig

__all__ = ["INSERT_ROWS", "ResponseCache", "cache_dir"]

log = logging.getLogger("genwire.cache")

Role = Literal["read", "write"]

# Another run's write transaction lasts milliseconds; a lock held longer than this is a
# cache we cannot write to (one warning, then the run goes on without writing).
WRITE_WAIT_S = 2.0
# Opening (WAL mode, the tables) waits longer: another run may be setting up the same file,
# and a cache given up at the start is a whole run paid again (seen: over 2 s on a loaded machine).
OPEN_WAIT_S = 10.0
# Rows per bulk lookup query (SQLite's variable limit is 999 on old builds).
LOOKUP_CHUNK = 900

# A batch's entries in one statement per chunk (``INSERT ... VALUES (...), (...)``): one
# parse of the parameters, bound in C, and SQLite lets go of the GIL once per statement (a
# worker thread taking it back once per row, executemany, waited on the busy event loop
# each time). A chunk's 7 parameters a row stay under SQLite's oldest variable limit (999);
# a JSON array read back by json_each cost 3x the CPU per entry.
INSERT_ROWS = 128
_PLACES = "(?, ?, ?, ?, ?, ?, ?)"


@functools.lru_cache(maxsize=INSERT_ROWS)
def _insert(rows: int) -> str:
    return f"INSERT OR REPLACE INTO answers ({COLUMNS}) VALUES " + ", ".join([_PLACES] * rows)


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
        if read_only(self.directory, self.path):
            return self._open_read_only(role, "this process cannot write there")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=OPEN_WAIT_S, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            self._disable(f"cannot open the response cache {self.path} ({exc}); running without it")
            return None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(OPEN_WAIT_S * 1000)}")
            use_wal(conn, OPEN_WAIT_S)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: a commit survives a crash of the process
            ensure_layout(conn)
            conn.execute(f"PRAGMA busy_timeout = {int(WRITE_WAIT_S * 1000)}")  # set up: writes wait as before
        except sqlite3.Error as exc:
            conn.close()
            if role == "write" and cannot_write(exc):
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
                found = conn.execute(BY_KEY, (column, row, key)).fetchone()
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
                    return {stored[0]: stored for stored in conn.execute(BY_RANGE, (column, wanted[0], wanted[-1]))}
                found: dict[str, Stored] = {}
                for start in range(0, len(wanted), LOOKUP_CHUNK):
                    chunk = wanted[start : start + LOOKUP_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    sql = f"{BY_ROWS} ({marks})"
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
        plain, get = PLAIN_STRING.fullmatch, found.get
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
            return CachedAnswer(stored_answer(text), int(stored[2]), int(stored[3]))
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
                text = stored_text(answer)
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
