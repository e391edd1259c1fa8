"""Shared fixtures: a real PostgreSQL test database, per-test rollback sessions, settings, the API client.

Contract:
- The test database is ``gpulab_test_<schema>`` on ``postgresql://postgres@127.0.0.1:5432``, where ``<schema>``
  is a hash of the models' DDL: checkouts whose models differ use different databases, so a run in one never
  empties the database a concurrent run in another is using. ``GPULAB_TEST_DATABASE_URL`` names one explicitly.
  It is created if missing and its tables made with ``Base.metadata.create_all`` (migrations are tested on
  their own); an explicitly named database whose tables lack a column the models declare is emptied and made
  afresh. The practice course (the open catalogue, which migration 0004 creates) is there too.
  Unreachable PostgreSQL skips the tests that need it, or fails them when ``CI=true``.
- ``db_session`` runs inside an outer transaction that is rolled back after the test; ``session.commit()``
  only releases a savepoint, so nothing a test writes is ever visible to another. Tests ``commit()`` their
  setup as production code would: a failing request rolls back to the last commit, as it would for real.
- ``client`` is a ``TestClient`` on ``create_app()`` whose ``SessionDep`` is that session and whose
  dispatcher is ``RecordingDispatcher`` (fixture ``dispatcher``: ``.calls`` lists ``(id, queue)``, ``.checks``
  the started checks' ``(id, queue)``, ``.similarity_runs`` the started similarity runs' ids; example runs run
  in this process, as the embedded dispatcher runs them).
- ``make_user(role)`` returns a committed-in-test user whose password is ``PASSWORD``; ``learner``,
  ``other_learner``, ``instructor`` (on the practice course's staff list), ``admin`` are ready-made; fixture
  ``login`` gives ``login(client, user)``;
  ``learner_client`` is ``client`` logged in as ``learner``, ``admin_client`` as ``admin``.
- ``warm_pool`` is one session-wide ``WarmPool`` of every runtime: the security suite's warm backend, the bank
  checks and the examples check share its templates, so each framework is imported once per run.
- ``fake_sandbox`` makes every grading in this process use one ``worker.grading.sandbox.fake.FakeSandbox``
  (every test passes until the test sets its ``handler``), for tests that need only that a grading happened.
- ``tiny_exercise`` syncs a small code exercise (hidden test, solution, wrong variant and example test
  carry unique marker strings, see ``TinyExercise``); ``make_exercise(prompt_md=...)`` builds variants.
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from app.domain.models import Exercise, Role, User
from app.domain.platform.db import Base, engine_for
from app.settings import Settings, get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from worker.grading.sandbox.fake import FakeSandbox
    from worker.grading.sandbox.warm import WarmPool

PASSWORD = "correct horse battery staple"


def _schema_tag() -> str:
    """Return a short hash of the DDL the models declare for PostgreSQL."""
    import hashlib

    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex, CreateTable

    import app.domain.models  # noqa: F401  (registers the tables on Base.metadata)

    dialect = postgresql.dialect()
    ddl = []
    for table in Base.metadata.sorted_tables:
        ddl.append(str(CreateTable(table).compile(dialect=dialect)))
        ddl.extend(str(CreateIndex(index).compile(dialect=dialect)) for index in sorted(table.indexes, key=str))
        # DDL run after a table is made (the audit table's triggers): a new one is a new schema too.
        ddl.extend(str(getattr(listener, "statement", "")) for listener in table.dispatch.after_create)
    return hashlib.sha256("\n".join(ddl).encode()).hexdigest()[:12]


# gpulab warms its grading by default (GPULAB_WARM_POOLS=auto). Tests grade cold unless they ask for warm pools:
# a template or container pair per test would cost seconds and memory for nothing they check.
os.environ.setdefault("GPULAB_WARM_POOLS", "off")

TEST_DATABASE_URL = os.environ.get("GPULAB_TEST_DATABASE_URL") or (
    f"postgresql://postgres@127.0.0.1:5432/gpulab_test_{_schema_tag()}"
)


def _psycopg_url(url: str) -> str:
    return "postgresql+psycopg://" + url.removeprefix("postgresql://") if url.startswith("postgresql://") else url


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def database_url() -> str:
    """Return the URL of the test database, creating the database if it does not exist."""
    import psycopg
    from psycopg import sql

    url = make_url(_psycopg_url(TEST_DATABASE_URL))
    admin = url.set(database="postgres").render_as_string(hide_password=False).replace("+psycopg", "")
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (url.database,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(url.database))))
    except psycopg.errors.DuplicateDatabase:
        pass  # another test run created it first
    except psycopg.OperationalError as exc:
        _unavailable(f"PostgreSQL is not reachable at {url.render_as_string(hide_password=True)}: {exc}")
    return TEST_DATABASE_URL


def _schema_drifted(engine: Engine) -> bool:
    """Say whether an existing table lacks a column the models now declare (``create_all`` never adds one)."""
    from sqlalchemy import inspect

    inspector = inspect(engine)
    existing = set(inspector.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name in existing:
            columns = {c["name"] for c in inspector.get_columns(table.name)}
            if set(table.columns.keys()) - columns:
                return True
    return False


@pytest.fixture(scope="session")
def pg_engine(database_url: str) -> Iterator[Engine]:
    """Return an engine on the test database with every table created."""
    import app.domain.models  # noqa: F401  (registers the tables on Base.metadata)

    engine = create_engine(_psycopg_url(database_url), pool_pre_ping=True)
    if _schema_drifted(engine):  # a model gained a column since this database was made: start it afresh
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA public")
    Base.metadata.create_all(engine)
    with Session(engine) as session:  # the migrations create it; create_all does not
        from app.domain.courses.membership import ensure_practice_course

        ensure_practice_course(session=session)
        session.commit()
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(pg_engine: Engine) -> Iterator[Session]:
    """Yield a session whose every change is rolled back after the test, commits included."""
    connection = pg_engine.connect()
    transaction = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        transaction.rollback()
        connection.close()


@pytest.fixture
def settings(database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[Settings]:
    """Configure gpulab for a dev-mode test on the test database and return fresh ``Settings``."""
    for key in list(os.environ):
        if key.startswith("GPULAB_") and not key.startswith("GPULAB_TEST_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GPULAB_MODE", "dev")
    monkeypatch.setenv("GPULAB_WARM_POOLS", "off")
    monkeypatch.setenv("GPULAB_DATABASE_URL", database_url)
    monkeypatch.setenv("GPULAB_SECRET_KEY", secrets.token_urlsafe(30)[:40])
    monkeypatch.setenv("GPULAB_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    engine_for.cache_clear()
    yield get_settings()
    get_settings.cache_clear()
    engine_for.cache_clear()


@dataclass
class RecordingDispatcher:
    """Stands in for ``app.jobs.dispatch`` at the API boundary: records what would have been graded."""

    name: str = "recording"
    owns_all_running: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)
    shut_down: bool = False
    checks: list[tuple[int, str]] = field(default_factory=list)
    similarity_runs: list[int] = field(default_factory=list)

    def dispatch(self, submission_id: str, queue: str) -> None:
        self.calls.append((submission_id, queue))

    def run_examples(self, version: Any, code: str, *, wait_s: float, params: dict[str, Any] | None = None) -> Any:
        """Run for real in this process, as the embedded dispatcher does (example runs are never recorded)."""
        from app.domain.exercises.example_runs import run_in_process

        return run_in_process(version, code, params)

    def start_check(self, check_id: int, queue: str) -> None:
        self.checks.append((check_id, queue))

    def start_similarity(self, run_id: int) -> None:
        self.similarity_runs.append(run_id)

    def may_have_lost(self, stale: list[tuple[str, str]], *, waiting_by_queue: dict[str, int]) -> list[str]:
        return [submission_id for submission_id, _ in stale]

    def shutdown(self) -> None:
        self.shut_down = True


@pytest.fixture(scope="session")
def warm_pool() -> Iterator[WarmPool]:
    """One pool of warm templates for the whole run, as a worker process has: every suite that grades shares it."""
    from worker.grading.sandbox.warm import RUNTIMES, WarmPool

    pool = WarmPool(RUNTIMES, size=1)
    yield pool
    pool.close()


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def fake_sandbox(monkeypatch: pytest.MonkeyPatch) -> FakeSandbox:
    """Make every ``get_sandbox`` of this process return one passing ``FakeSandbox``; return it."""
    import sys

    import app.jobs.tasks  # noqa: F401  (it binds get_sandbox when loaded: load it first, so it is patched too)
    import worker.grading.sandbox
    from worker.grading.sandbox.fake import FakeSandbox

    fake = FakeSandbox.passing()
    real = worker.grading.sandbox.get_sandbox
    for name, module in list(sys.modules.items()):
        # Call-time imports read the package's attribute; modules that imported the name hold their own copy.
        if name.partition(".")[0] in ("app", "worker") and getattr(module, "get_sandbox", None) is real:
            monkeypatch.setattr(module, "get_sandbox", lambda _settings: fake)
    return fake


@pytest.fixture
def db_lock() -> threading.RLock:
    """Guard ``db_session`` when a test touches it while the app polls it from another thread (SSE)."""
    return threading.RLock()


@pytest.fixture
def app(settings: Settings, db_session: Session, dispatcher: RecordingDispatcher, db_lock: threading.RLock) -> FastAPI:
    """Return ``create_app()`` wired to the test session and the recording dispatcher, without recovery."""
    from app.main import create_app
    from app.web.deps import get_dispatcher_dep, get_session, get_session_factory

    application = create_app(settings)
    application.state.recover_on_start = False

    def session_override() -> Iterator[Session]:
        try:
            yield db_session
        except BaseException:
            db_session.rollback()  # only the savepoint: the test's outer transaction stays
            raise

    @contextmanager
    def shared_session() -> Iterator[Session]:
        with db_lock:
            yield db_session

    application.dependency_overrides[get_session] = session_override
    application.dependency_overrides[get_session_factory] = lambda: shared_session
    application.dependency_overrides[get_dispatcher_dep] = lambda: dispatcher
    return application


def make_test_client(
    application: Any, base_url: str = "http://testserver", client_address: str = "testclient"
) -> TestClient:
    """Return a ``TestClient`` for ``application`` (use it as a context manager to run the lifespan).

    ``client_address``: the address its requests come from (a timed assessment's networks are checked against it).
    """
    with warnings.catch_warnings():
        # Starlette's test client prefers the httpx2 package but works with httpx; the nudge is noise here.
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient

    return TestClient(application, base_url=base_url, client=(client_address, 50000))


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with make_test_client(app) as test_client:
        yield test_client


@pytest.fixture
def make_user(db_session: Session) -> Callable[..., User]:
    """Return a factory: ``make_user(role, email=None, password=PASSWORD)`` adds and flushes a user."""
    from app.domain.accounts.passwords import create_user

    def make(role: Role = Role.learner, *, email: str | None = None, password: str = PASSWORD) -> User:
        address = email or f"{role.value}-{uuid.uuid4().hex[:10]}@example.com"
        user = create_user(session=db_session, email=address, password=password, role=role)
        db_session.commit()  # releases the test savepoint, so a route's rollback cannot take the user away
        return user

    return make


@pytest.fixture
def learner(make_user: Callable[..., User]) -> User:
    return make_user(Role.learner)


@pytest.fixture
def other_learner(make_user: Callable[..., User]) -> User:
    return make_user(Role.learner)


@pytest.fixture
def instructor(make_user: Callable[..., User], db_session: Session) -> User:
    """A site instructor on the practice course's staff list, so practice work is theirs to review."""
    from app.domain.courses.membership import enroll, practice_course
    from app.domain.models import CourseRole

    user = make_user(Role.instructor)
    enroll(session=db_session, course=practice_course(session=db_session), user=user, role=CourseRole.instructor)
    db_session.commit()
    return user


@pytest.fixture
def admin(make_user: Callable[..., User]) -> User:
    return make_user(Role.admin)


def _login(client: TestClient, user: User, password: str = PASSWORD) -> None:
    response = client.post("/api/auth/login", json={"email": user.email, "password": password})
    assert response.status_code == 200, response.text


@pytest.fixture
def login() -> Callable[..., None]:
    """Return ``login(client, user, password=PASSWORD)``, which fails the test if the API refuses."""
    return _login


@pytest.fixture
def learner_client(client: TestClient, learner: User) -> TestClient:
    _login(client, learner)
    return client


@pytest.fixture
def admin_client(client: TestClient, admin: User) -> TestClient:
    """``client`` logged in as ``admin``."""
    _login(client, admin)
    return client


@dataclass
class TinyExercise:
    """A synced exercise and the marker strings that must (or must never) reach learners."""

    exercise: Exercise
    files: dict[str, str]
    hidden_marker: str
    solution_marker: str
    wrong_marker: str
    example_marker: str
    starter_marker: str

    @property
    def slug(self) -> str:
        return self.exercise.slug

    @property
    def secret_markers(self) -> list[str]:
        """Return strings from files learners must never receive (hidden tests, solution, wrong variant)."""
        return [self.hidden_marker, self.solution_marker, self.wrong_marker]


def tiny_files(*, prompt_md: str, queue: str, tag: str) -> dict[str, str]:
    return {
        "exercise.toml": (
            'title = "Add two numbers"\nkind = "code"\ntopic = "Warm-up"\ndifficulty = "beginner"\n'
            f'framework = "python"\nqueue = "{queue}"\n\n[points]\n"test_add.py::test_small" = 2\n'
            f'"test_add.py::test_negative" = 3\n\n[[wrong]]\nfile = "wrong/subtracts.py"\n'
            f'must_fail = ["test_add.py::test_small"]\nwhy = "WHY-{tag}"\n'
        ),
        "prompt.md": prompt_md,
        "starter.py": f"# STARTER-{tag}\ndef add(a, b):\n    raise NotImplementedError\n",
        "solution.py": f"# SOLUTION-{tag}\ndef add(a, b):\n    return a + b\n",
        "tests/test_add.py": (
            f"# HIDDEN-{tag}\nfrom solution import add\n\n\ndef test_small():\n    assert add(1, 2) == 3\n\n\n"
            "def test_negative():\n    assert add(-1, -2) == -3\n"
        ),
        "examples/test_example.py": f"# EXAMPLE-{tag}\ndef test_example():\n    assert True\n",
        "wrong/subtracts.py": f"# WRONG-{tag}\ndef add(a, b):\n    return a - b\n",
    }


@pytest.fixture
def make_exercise(db_session: Session) -> Callable[..., TinyExercise]:
    """Return a factory that syncs a tiny code exercise with a unique slug; ``prompt_md``/``queue`` vary it."""
    from app.domain.exercises.bank import upsert_exercise
    from worker.bank.spec import ExerciseSpec

    def make(*, prompt_md: str = "# Add\n\nWrite `add(a, b)`.\n", queue: str = "cpu") -> TinyExercise:
        tag = uuid.uuid4().hex[:12]
        files = tiny_files(prompt_md=prompt_md, queue=queue, tag=tag)
        spec = ExerciseSpec.from_files(f"tiny-add-{tag}", files)
        exercise, _ = upsert_exercise(session=db_session, spec=spec)
        db_session.commit()
        return TinyExercise(
            exercise=exercise,
            files=files,
            hidden_marker=f"HIDDEN-{tag}",
            solution_marker=f"SOLUTION-{tag}",
            wrong_marker=f"WRONG-{tag}",
            example_marker=f"EXAMPLE-{tag}",
            starter_marker=f"STARTER-{tag}",
        )

    return make


@pytest.fixture
def tiny_exercise(make_exercise: Callable[..., TinyExercise]) -> TinyExercise:
    return make_exercise()
