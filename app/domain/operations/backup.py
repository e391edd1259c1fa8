"""Backups that restore: one consistent snapshot of everything gpulab keeps, and its restore into a fresh install.

Contract:
- Everything a restore needs is in the database: accounts and logins (password hashes, open sessions' revocations),
  courses, every submission with its code, results, variant and measurements, the exercise versions learners
  were graded against (their files are rows), LTI keys and platforms, the audit trail. What is not in it:
  ``GPULAB_SECRET_KEY`` (sessions and leaderboard pseudonyms depend on it: keep it with the backups, apart from
  them) and the exercise bank's folder (the repository's).
- ``backup(database_url, path)`` writes a zip: ``manifest.json`` (``FORMAT``, the app version, the schema's
  Alembic revision, the source dialect, the time, and per table its row count and the SHA-256 of its file) and
  ``tables/<table>.jsonl`` (one JSON object per row; times as UTC ISO 8601, bytes as ``{"$base64": ...}``). The
  snapshot is consistent while the platform serves and grades: SQLite through its online backup API (a copy
  taken page by page under the database's own locking, then read), PostgreSQL in one ``REPEATABLE READ``
  read-only transaction (every table read from the same snapshot, as ``pg_dump`` does). A submission committed
  before the snapshot is in it whole, one committed after is not in it at all. The file is written next to
  ``path`` and renamed into place, so a crash never leaves half a backup under that name.
- ``restore(path, database_url, replace=False)`` checks the manifest and every checksum, refuses a backup from a
  newer schema (a revision this code does not know), refuses a database that holds accounts unless
  ``replace``, then builds the backup's schema with the migrations, loads every row (tables in foreign-key order;
  a cycle's columns set after the rows exist), sets PostgreSQL's id sequences past the loaded ids, puts work that
  was running at backup time back in the queue (so it is graded again after the restore, never half-done) and
  migrates to the newest schema. Any dialect restores into any other: an embedded SQLite install moves onto
  PostgreSQL this way.
Kept by hand rather than with ``pg_dump``/``sqlite3 .dump``: one format for both databases is what lets a SQLite
install move to PostgreSQL, and ``pg_dump`` would have to match the server's version on every host.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sqlite3
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from sqlalchemy import (
    Connection,
    Date,
    DateTime,
    Engine,
    ForeignKeyConstraint,
    Integer,
    MetaData,
    Table,
    create_engine,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.schema import sort_tables_and_constraints

from app.domain.platform.migrate import alembic_config, upgrade
from worker.core.errors import Conflict, InvalidInput

FORMAT = 1
VERSION_TABLE = "alembic_version"
BATCH_ROWS = 500
MAX_MANIFEST_BYTES = 1 << 20


@dataclass
class Manifest:
    """What a backup holds: enough to check it and to restore it."""

    format: int
    app_version: str
    schema_revision: str
    source: str
    created_at: str
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {name: int(t["rows"]) for name, t in self.tables.items()}


def app_version() -> str:
    """Return gpulab's installed version (``0+unknown`` when run from a tree that was never installed)."""
    try:
        return metadata.version("gpulab")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _engine(url: str) -> Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(url)


# --- writing -----------------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    return value


def _revision(conn: Connection) -> str:
    if not inspect(conn).has_table(VERSION_TABLE):
        raise Conflict("this database has no schema yet: there is nothing to back up")
    found = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(found) != 1:
        raise Conflict(f"the database has {len(found)} schema revisions; expected one")
    return str(found[0])


def _dump_tables(conn: Connection, archive: zipfile.ZipFile) -> tuple[str, dict[str, dict[str, Any]]]:
    revision = _revision(conn)
    meta = MetaData()
    meta.reflect(conn)
    tables: dict[str, dict[str, Any]] = {}
    for table in sorted(meta.tables.values(), key=lambda t: t.name):
        if table.name == VERSION_TABLE:
            continue
        digest, rows, out = hashlib.sha256(), 0, io.BytesIO()
        order = list(table.primary_key.columns) or list(table.columns)
        for row in conn.execute(select(table).order_by(*order)).mappings():
            line = json.dumps({k: _plain(v) for k, v in row.items()}, ensure_ascii=False, sort_keys=True) + "\n"
            data = line.encode("utf-8")
            digest.update(data)
            out.write(data)
            rows += 1
        archive.writestr(f"tables/{table.name}.jsonl", out.getvalue())
        tables[table.name] = {"rows": rows, "sha256": digest.hexdigest()}
    return revision, tables


def _sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise InvalidInput("an in-memory SQLite database cannot be backed up")
    return Path(database)


def backup(*, database_url: str, path: Path) -> Manifest:
    """Write a consistent backup of the database at ``database_url`` to ``path`` (see the module contract)."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    dialect = make_url(database_url).get_backend_name()
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            if dialect == "sqlite":
                source = _sqlite_path(database_url)
                if not source.exists():
                    raise InvalidInput(f"no SQLite database at {source}")
                with tempfile.TemporaryDirectory() as tmp:
                    copy = Path(tmp) / "snapshot.db"
                    with sqlite3.connect(source) as live, sqlite3.connect(copy) as snap:
                        live.backup(snap)  # the online backup API: a consistent copy while others write
                    live.close()
                    snap.close()
                    engine = create_engine(f"sqlite:///{copy}")
                    try:
                        with engine.connect() as conn:
                            revision, tables = _dump_tables(conn, archive)
                    finally:
                        engine.dispose()
            else:
                engine = _engine(database_url)
                try:
                    snapshot = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
                    with engine.connect().execution_options(**snapshot) as conn, conn.begin():
                        revision, tables = _dump_tables(conn, archive)
                finally:
                    engine.dispose()
            manifest = Manifest(
                format=FORMAT, app_version=app_version(), schema_revision=revision, source=dialect,
                created_at=datetime.now(UTC).isoformat(), tables=tables,
            )  # fmt: skip
            archive.writestr("manifest.json", json.dumps(manifest.__dict__, indent=2, sort_keys=True))
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return manifest


# --- reading -----------------------------------------------------------------------------------------------------


def read_manifest(archive: zipfile.ZipFile) -> Manifest:
    """Return the backup's manifest, or raise ``InvalidInput`` if this is not a gpulab backup gpulab can read."""
    try:
        info = archive.getinfo("manifest.json")
    except KeyError:
        raise InvalidInput("this file is not a gpulab backup: it has no manifest.json") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise InvalidInput("the backup's manifest is too large to be one of gpulab's")
    try:
        raw = json.loads(archive.read(info))
        manifest = Manifest(**raw)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"the backup's manifest cannot be read: {exc}") from None
    if manifest.format != FORMAT:
        raise InvalidInput(f"this backup has format {manifest.format}; this gpulab reads format {FORMAT}")
    return manifest


def _rows(archive: zipfile.ZipFile, name: str, expected: dict[str, Any]) -> Iterator[dict[str, Any]]:
    digest, count = hashlib.sha256(), 0
    with archive.open(f"tables/{name}.jsonl") as raw:
        for line in raw:
            digest.update(line)
            count += 1
            yield json.loads(line)
    if digest.hexdigest() != expected["sha256"] or count != expected["rows"]:
        raise InvalidInput(f"the backup's table {name} does not match its checksum: the file is damaged")


def verify(path: Path) -> Manifest:
    """Check every table of the backup at ``path`` against its manifest; return the manifest."""
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InvalidInput(f"{path} is not a gpulab backup: {exc}") from None
    with archive:
        manifest = read_manifest(archive)
        for name, expected in manifest.tables.items():
            for _ in _rows(archive, name, expected):
                pass
    return manifest


def _known_revision(revision: str) -> bool:
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    try:
        return scripts.get_revision(revision) is not None
    except Exception:  # alembic raises several kinds for an unknown or malformed id
        return False


def _value(column: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"$base64"}:
        return base64.b64decode(value["$base64"])
    if isinstance(column.type, DateTime) and isinstance(value, str):
        return datetime.fromisoformat(value)
    if isinstance(column.type, Date) and isinstance(value, str):
        return date.fromisoformat(value)
    return value


def _wipe(engine: Engine) -> None:
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
            return
        meta = MetaData()
        meta.reflect(conn)
        conn.execute(text("PRAGMA foreign_keys=OFF"))
        for table in meta.tables.values():
            table.drop(conn)


def _has_accounts(engine: Engine) -> bool:
    with engine.connect() as conn:
        if not inspect(conn).has_table("users"):
            return False
        return bool(conn.execute(text("SELECT COUNT(*) FROM users")).scalar())


def _insert_order(meta: MetaData) -> tuple[list[Table], set[ForeignKeyConstraint]]:
    """Return the tables parents first, and the nullable foreign keys of a cycle to fill in after every insert."""
    tables = sorted(meta.tables.values(), key=lambda t: t.name)
    first = sort_tables_and_constraints(tables)
    cyclic: list[ForeignKeyConstraint] = next((fkcs for t, fkcs in first if t is None), [])
    deferred = {fkc for fkc in cyclic if all(c.nullable for c in fkc.columns)}
    # filter_fn True: "left for an ALTER at the end", i.e. not a dependency of the order: filled in after the rows.
    ordered = sort_tables_and_constraints(tables, filter_fn=lambda fkc: True if fkc in deferred else None)
    left: list[ForeignKeyConstraint] = next((fkcs for t, fkcs in ordered if t is None), [])
    if any(fkc not in deferred for fkc in left):
        raise Conflict("the schema has a foreign-key cycle of required columns: rows cannot be loaded in any order")
    return [t for t, _ in ordered if t is not None], deferred


def _load(conn: Connection, archive: zipfile.ZipFile, manifest: Manifest) -> None:
    meta = MetaData()
    meta.reflect(conn)
    missing = sorted(set(manifest.tables) - set(meta.tables))
    if missing:
        raise InvalidInput(f"the backup has tables its schema revision does not: {', '.join(missing)}")
    ordered, deferred_fks = _insert_order(meta)
    for table in reversed(ordered):  # rows the migrations seeded (the practice course) give way
        if table.name != VERSION_TABLE and conn.execute(select(func.count()).select_from(table)).scalar():
            conn.execute(table.delete())
    later: dict[str, set[str]] = {}
    for fkc in deferred_fks:
        later.setdefault(fkc.parent.name, set()).update(c.name for c in fkc.columns)
    fixes: list[tuple[Table, dict[str, Any], dict[str, Any]]] = []  # (table, primary key, deferred values)
    for table in ordered:
        if table.name not in manifest.tables:
            continue
        deferred = later.get(table.name, set())
        batch: list[dict[str, Any]] = []
        for row in _rows(archive, table.name, manifest.tables[table.name]):
            values = {k: _value(table.c[k], v) for k, v in row.items() if k in table.c}
            if deferred and any(values.get(c) is not None for c in deferred):
                key = {c.name: values[c.name] for c in table.primary_key}
                fixes.append((table, key, {c: values[c] for c in deferred}))
                values |= dict.fromkeys(deferred)
            batch.append(values)
            if len(batch) >= BATCH_ROWS:
                conn.execute(table.insert(), batch)
                batch = []
        if batch:
            conn.execute(table.insert(), batch)
    for table, key, values in fixes:  # every row exists now: the cycle's references can point at them
        conn.execute(update(table).where(*(table.c[k] == v for k, v in key.items())).values(**values))
    if conn.dialect.name == "postgresql":
        for table in ordered:
            pk = list(table.primary_key.columns)
            if len(pk) != 1 or not isinstance(pk[0].type, Integer):
                continue
            found = {"t": table.name, "c": pk[0].name}
            sequence = conn.execute(text("SELECT pg_get_serial_sequence(:t, :c)"), found).scalar()
            if sequence:  # the next id made here comes after every restored one
                top = conn.execute(select(func.max(pk[0]))).scalar()
                conn.execute(
                    text("SELECT setval(:s, :v, :called)"), {"s": sequence, "v": top or 1, "called": top is not None}
                )
    if "submissions" in meta.tables:
        subs = meta.tables["submissions"]
        # Graded again after the restore, from the start: a half-done grading is never kept.
        conn.execute(
            update(subs)
            .where(subs.c.status == "running")
            .values(status="queued", started_at=None, heartbeat_at=None, dispatched_at=None)
        )


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    migrated_from: str
    counts: dict[str, int]


def restore(*, path: Path, database_url: str, replace: bool = False) -> Restored:
    """Restore the backup at ``path`` into the database at ``database_url`` (see the module contract)."""
    manifest = verify(path)
    if not _known_revision(manifest.schema_revision):
        raise Conflict(
            f"this backup's schema ({manifest.schema_revision}, gpulab {manifest.app_version}) is newer than this "
            f"gpulab ({app_version()}) knows: upgrade gpulab, then restore"
        )
    engine = _engine(database_url)
    try:
        if _has_accounts(engine) and not replace:
            raise Conflict(
                "the database holds accounts already: restore into a fresh install, or pass --replace to delete "
                "everything in it first"
            )
        _wipe(engine)
        upgrade(manifest.schema_revision, database_url)
        with zipfile.ZipFile(path) as archive, engine.begin() as conn:
            _load(conn, archive, manifest)
        upgrade("head", database_url)
        with engine.connect() as conn:
            meta = MetaData()
            meta.reflect(conn)
            counts = {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar() or 0)
                for t in meta.tables.values()
                if t.name in manifest.tables
            }
    finally:
        engine.dispose()
    return Restored(manifest=manifest, migrated_from=manifest.schema_revision, counts=counts)


def prune(folder: Path, *, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` backups (``gpulab-*.zip``) in ``folder``; return what was deleted."""
    found = sorted(folder.glob("gpulab-*.zip"), key=lambda p: p.name, reverse=True)  # dated names sort by time
    gone = found[keep:]
    for old in gone:
        old.unlink()
    return gone


def next_daily(now: datetime, at: str) -> datetime:
    """Return the first moment after ``now`` whose UTC time of day is ``at`` (``HH:MM``), or raise ``InvalidInput``."""
    try:
        hours, minutes = (int(part) for part in at.split(":"))
        if not (0 <= hours < 24 and 0 <= minutes < 60):
            raise ValueError
    except ValueError:
        raise InvalidInput(f"{at!r} is not a time of day: give HH:MM in UTC, e.g. 03:00") from None
    now = now.astimezone(UTC)
    today = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    return today if today > now else today + timedelta(days=1)
