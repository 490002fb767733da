"""Opening a response cache that another connection is switching to WAL mode at the same
moment: SQLite answers "database is locked" at once, and the cache was given up for the run."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from genwire.providers.response_cache.layout import use_wal


def test_the_switch_to_wal_waits_for_a_lock_another_connection_holds(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")  # what a racing switch holds: no other connection may switch now
    opener = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        opener.execute("PRAGMA journal_mode = WAL")  # what the cache did before: given up at once
    released = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    released.start()
    use_wal(opener, wait_s=30)
    released.join()
    assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder.close()
    opener.close()


def test_a_lock_held_past_the_wait_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    opener = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        use_wal(opener, wait_s=0.1)
    holder.close()
    opener.close()
