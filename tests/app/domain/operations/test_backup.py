"""Backups that restore: under load, on SQLite and PostgreSQL, and from SQLite onto PostgreSQL.

Each test builds its own databases from the migrations (a fresh install), fills one with a course's worth of
graded work through the domain, backs it up while writer threads keep committing submissions (each with its
tests, in one transaction) and grading running ones, restores into another fresh database, and compares: the
gradebook, every submission's code, verdict, score, variant and measurements, and the logins.
"""

from __future__ import annotations

import json
import threading
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from app.domain.accounts.passwords import create_user, verify_password
from app.domain.courses import coursework, gradebook, membership
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    Exercise,
    Role,
    Submission,
    SubmissionStatus,
    TestResult,
    User,
)
from app.domain.operations import backup
from app.domain.platform.migrate import upgrade
from tests.conftest import PASSWORD, tiny_files
from worker.bank.spec import ExerciseSpec
from worker.core.errors import Conflict, InvalidInput
from worker.core.outcome import Verdict

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
LOAD_TESTS = 3  # test results each loaded submission commits with it


@pytest.fixture
def fresh_database(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Return ``make(kind)``: the URL of a new, empty database (``sqlite`` or ``postgresql``), dropped after."""
    made: list[str] = []

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{tmp_path / f'{uuid.uuid4().hex[:8]}.db'}"
        name = f"gpulab_restore_{uuid.uuid4().hex[:10]}"
        try:
            with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.OperationalError as exc:
            pytest.skip(f"PostgreSQL is not reachable: {exc}")
        made.append(name)
        return f"postgresql://postgres@127.0.0.1:5432/{name}"

    yield make
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        for name in made:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _engine(url: str) -> Engine:
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


@dataclass
class Filled:
    course_slug: str
    emails: list[str]


def _fill(url: str) -> Filled:
    """Make a fresh install at ``url`` with a course, learners, graded work, an override and an extension."""
    upgrade("head", url)
    engine = _engine(url)
    with Session(engine) as db:
        teacher = create_user(session=db, email="teacher@example.com", password=PASSWORD, role=Role.instructor)
        learners = [create_user(session=db, email=f"l{i}@example.com", password=PASSWORD) for i in range(4)]
        exercise, _ = upsert_exercise(
            session=db, spec=ExerciseSpec.from_files("tiny-add", tiny_files(prompt_md="# Add\n", queue="cpu", tag="b"))
        )
        course = membership.create_course(session=db, slug="gpu-101", title="GPU 101", creator=teacher)
        for learner in learners:
            membership.enroll(session=db, course=course, user=learner, actor=teacher)
        db.flush()
        due = datetime(2026, 11, 1, 12, tzinfo=UTC)
        assignment = Assignment(
            course_id=course.id, title="Week 1", position=0, due_at=due, late_until=due + timedelta(days=2)
        )
        assignment.items.append(AssignmentItem(exercise=exercise, position=0, weight=1.0))
        db.add(assignment)
        db.flush()
        assert exercise.current_version is not None
        for n, learner in enumerate(learners):
            for k in range(3):
                sub = Submission(
                    user_id=learner.id, exercise_version_id=exercise.current_version.id, assignment_id=assignment.id,
                    code=f"def add(a, b):\n    return a + b  # {n}.{k}\n", status=SubmissionStatus.graded,
                    verdict=Verdict.passed if k else Verdict.failed, score=float(k + n % 2), max_score=5.0,
                    params={"batch": 8 * (n + 1), "lr": 0.1 * k}, measurements=[{"name": "bytes", "value": 1000 + n}],
                    created_at=due - timedelta(hours=k + 1), finished_at=due - timedelta(hours=k),
                )  # fmt: skip
                sub.tests.append(TestResult(position=0, name="test_add.py::test_small", outcome="passed", points=2.0,
                                            max_points=2.0, message=f"fine {n}"))  # fmt: skip
                db.add(sub)
        db.flush()
        gradebook.override(session=db, course=course, item=assignment.items[0], learner=learners[0], score_pct=77.5,
                           comment="seen in office hours", actor=teacher)  # fmt: skip
        coursework.grant_extension(
            session=db, assignment=assignment, learner=learners[1], due_at=due + timedelta(days=5), late_until=None,
            extra_attempts=2, reason="travel", actor=teacher,
        )  # fmt: skip
        # A grading that runs at backup time: it must come back queued, to be graded again.
        db.add(Submission(user_id=learners[2].id, exercise_version_id=exercise.current_version.id, code="# running",
                          status=SubmissionStatus.running, max_score=5.0, started_at=due))  # fmt: skip
        db.commit()
        emails = [u.email for u in [teacher, *learners]]
    engine.dispose()
    return Filled(course_slug="gpu-101", emails=emails)


class Load:
    """Writer threads committing submissions (each with its tests, in one transaction) until stopped."""

    def __init__(self, url: str) -> None:
        self.engine = _engine(url) if url.startswith("postgresql") else create_engine(
            url, connect_args={"timeout": 30}
        )  # fmt: skip
        self.made = sessionmaker(bind=self.engine)
        self.stop = threading.Event()
        self.committed = 0
        self.threads = [threading.Thread(target=self._write, daemon=True) for _ in range(2)]

    def _write(self) -> None:
        while not self.stop.is_set():
            with self.made() as db:
                learner = db.scalars(select(User).where(User.email == "l3@example.com")).one()
                version = db.scalars(select(Exercise)).first()
                assert version is not None and version.current_version_id is not None
                sub = Submission(user_id=learner.id, exercise_version_id=version.current_version_id,
                                 code="# load\n", status=SubmissionStatus.graded, verdict=Verdict.passed, score=5.0,
                                 max_score=5.0)  # fmt: skip
                for i in range(LOAD_TESTS):
                    sub.tests.append(TestResult(position=i, name=f"t{i}", outcome="passed"))
                db.add(sub)
                db.commit()
                self.committed += 1

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        self.engine.dispose()


def _snapshot(url: str, course_slug: str) -> dict[str, object]:
    """Return what must survive a restore: the gradebook, every submission's result, the logins."""
    engine = _engine(url)
    with Session(engine) as db:
        course = db.scalars(select(Course).where(Course.slug == course_slug)).one()
        teacher = db.scalars(select(User).where(User.email == "teacher@example.com")).one()
        book = gradebook.gradebook(session=db, course=course, viewer=teacher)
        subs = {
            s.id: (
                s.user.email if s.user else None,
                s.code,
                s.status.value,
                s.verdict,
                s.score,
                s.params,
                s.measurements,
                [(t.name, t.outcome, t.message) for t in s.tests],
            )
            for s in db.scalars(select(Submission).where(Submission.code != "# load\n"))
        }
        users = {u.email: (u.role.value, u.password_hash) for u in db.scalars(select(User))}
        result = {"book": [(r.email, r.total_pct, [c.score_pct for c in r.cells]) for r in book.rows], "subs": subs,
                  "users": users}  # fmt: skip
    engine.dispose()
    return result


@pytest.mark.parametrize(
    ("source", "target"), [("sqlite", "sqlite"), ("postgresql", "postgresql"), ("sqlite", "postgresql")]
)
def test_a_backup_under_load_restores_to_the_same_grades_work_and_logins(
    fresh_database: Callable[[str], str], tmp_path: Path, source: str, target: str
) -> None:
    src = fresh_database(source)
    filled = _fill(src)
    before = _snapshot(src, filled.course_slug)
    path = tmp_path / "gpulab.zip"
    with Load(src) as load:
        while load.committed < 5:  # the writers are running before the snapshot starts
            threading.Event().wait(0.01)
        manifest = backup.backup(database_url=src, path=path)
        at_backup = load.committed
    assert load.committed > at_backup or load.committed >= 5
    assert manifest.source == source and manifest.tables["submissions"]["rows"] >= 13

    dst = fresh_database(target)
    done = backup.restore(path=path, database_url=dst)
    assert done.counts == manifest.counts()
    after = _snapshot(dst, filled.course_slug)
    assert after["book"] == before["book"]
    assert after["users"] == before["users"]
    subs_before, subs_after = dict(before["subs"]), dict(after["subs"])  # type: ignore[call-overload]
    running = [k for k, v in subs_before.items() if v[2] == "running"]
    assert len(running) == 1 and subs_after[running[0]][2] == "queued"  # graded again after the restore
    for key in running:
        subs_before.pop(key), subs_after.pop(key)
    assert subs_after == subs_before
    engine = _engine(dst)
    with Session(engine) as db:
        # A loaded submission is in the backup whole (all its tests) or not at all.
        counts = (
            db.execute(
                select(func.count(TestResult.id))
                .join(Submission)
                .where(Submission.code == "# load\n")
                .group_by(Submission.id)
            )
            .scalars()
            .all()
        )
        assert counts and set(counts) == {LOAD_TESTS}
        for email in filled.emails:  # the same logins
            user = db.scalars(select(User).where(User.email == email)).one()
            assert verify_password(PASSWORD, user.password_hash)
        # New rows get new ids after the restored ones (PostgreSQL's sequences were moved on).
        newcomer = create_user(session=db, email="new@example.com", password=PASSWORD)
        db.flush()
        assert newcomer.id > max(db.scalars(select(User.id).where(User.email != "new@example.com")))
        db.rollback()
        assert db.scalar(text("SELECT version_num FROM alembic_version")) == manifest.schema_revision
    engine.dispose()


def test_a_restore_refuses_a_newer_schema_a_damaged_file_and_a_database_in_use(
    fresh_database: Callable[[str], str], tmp_path: Path
) -> None:
    src = fresh_database("sqlite")
    _fill(src)
    path = tmp_path / "b.zip"
    manifest = backup.backup(database_url=src, path=path)
    dst = fresh_database("sqlite")
    with pytest.raises(Conflict, match="holds accounts"):
        backup.restore(path=path, database_url=src)  # the source itself: in use
    newer = tmp_path / "newer.zip"
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(newer, "w") as new:
        for item in old.infolist():
            data = old.read(item)
            if item.filename == "manifest.json":
                raw = json.loads(data)
                raw["schema_revision"] = "9999_from_the_future"
                data = json.dumps(raw).encode()
            new.writestr(item, data)
    with pytest.raises(Conflict, match="newer than this gpulab"):
        backup.restore(path=newer, database_url=dst)
    damaged = tmp_path / "damaged.zip"
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(damaged, "w") as new:
        for item in old.infolist():
            data = old.read(item)
            if item.filename == "tables/users.jsonl":
                data = data.replace(b"teacher@", b"teacher+evil@")
            new.writestr(item, data)
    with pytest.raises(InvalidInput, match="damaged"):
        backup.restore(path=damaged, database_url=dst)
    not_one = tmp_path / "not.zip"
    not_one.write_bytes(b"PK not really")
    with pytest.raises(InvalidInput, match="not a gpulab backup"):
        backup.restore(path=not_one, database_url=dst)
    # With --replace, a database in use is emptied first.
    backup.restore(path=path, database_url=src, replace=True)
    assert backup.verify(path).counts() == manifest.counts()


def test_an_older_backup_is_migrated_to_the_newest_schema(fresh_database: Callable[[str], str], tmp_path: Path) -> None:
    src = fresh_database("sqlite")
    upgrade("0023", src)
    engine = _engine(src)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO users (email, password_hash, role, is_active, name, must_change_password, created_at) "
            "VALUES ('old@example.com', 'x', 'learner', 1, 'Old Timer', 0, '2026-01-01 00:00:00')"
        ))  # fmt: skip
    engine.dispose()
    path = tmp_path / "old.zip"
    assert backup.backup(database_url=src, path=path).schema_revision == "0023"
    dst = fresh_database("postgresql")
    done = backup.restore(path=path, database_url=dst)
    assert done.migrated_from == "0023"
    engine = _engine(dst)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() != "0023"
        row = conn.execute(text("SELECT name, erased_at FROM users WHERE email = 'old@example.com'")).one()
        assert tuple(row) == ("Old Timer", None)  # a column the newer schema added, empty
    engine.dispose()


def test_backups_in_a_folder_keep_the_newest(tmp_path: Path) -> None:
    for stamp in ("20261201-000000", "20261202-000000", "20261203-000000"):
        (tmp_path / f"gpulab-{stamp}.zip").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("mine")
    gone = backup.prune(tmp_path, keep=2)
    assert [p.name for p in gone] == ["gpulab-20261201-000000.zip"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpulab-20261202-000000.zip", "gpulab-20261203-000000.zip",
                                                         "notes.txt"]  # fmt: skip


def test_the_nightly_backup_runs_at_the_next_time_of_day_in_utc() -> None:
    evening = datetime(2026, 12, 6, 21, 30, tzinfo=UTC)
    assert backup.next_daily(evening, "03:00") == datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    assert backup.next_daily(evening, "21:45") == datetime(2026, 12, 6, 21, 45, tzinfo=UTC)
    assert backup.next_daily(datetime(2026, 12, 6, 3, 0, tzinfo=UTC), "03:00") == datetime(
        2026, 12, 7, 3, 0, tzinfo=UTC
    )
    for wrong in ("3am", "24:00", "03:60", ""):
        with pytest.raises(InvalidInput, match="not a time of day"):
            backup.next_daily(evening, wrong)
