"""The SQLite engine of the embedded server: WAL, foreign keys, and a writer that waits out a busy lock."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sqlalchemy import text

from app.domain.platform.db import SQLITE_BUSY_TIMEOUT_S, engine_for


def test_sqlite_connections_get_wal_foreign_keys_and_the_busy_timeout(tmp_path: Path) -> None:
    engine = engine_for(f"sqlite:///{tmp_path / 'pragmas.db'}")
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == SQLITE_BUSY_TIMEOUT_S * 1000
    engine.dispose()


def test_a_writer_waits_for_another_writers_lock_instead_of_failing(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    engine = engine_for(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (x INTEGER)"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    holder.execute("INSERT INTO t VALUES (1)")
    waiting = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with engine.begin() as connection:
                waiting.set()
                connection.execute(text("INSERT INTO t VALUES (2)"))  # blocks until the holder commits
        except BaseException as exc:  # the assertions below report it
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    assert waiting.wait(30)
    writer.join(0.5)
    assert writer.is_alive() and not failures  # still waiting for the lock, not failed with "database is locked"
    holder.execute("COMMIT")
    writer.join(30)
    assert not writer.is_alive() and not failures
    with engine.connect() as connection:
        assert sorted(connection.execute(text("SELECT x FROM t")).scalars()) == [1, 2]
    holder.close()
    engine.dispose()
