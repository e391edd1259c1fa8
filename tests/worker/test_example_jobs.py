"""Example runs and instructor checks as jobs, for real: PostgreSQL, Redis db 12 and `gpulab worker` processes.

The module's worker consumes ``cpu`` with one grading thread and, in its companion process, ``examples-cpu``
with one more. The kill test starts and SIGKILLs workers of its own on ``gpu``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import func, select

from app.domain.accounts.passwords import create_user
from app.domain.exercises.bank import get_published, sync_bank
from app.domain.models import ExerciseCheck, ExerciseVersion, Role, Submission, User, utcnow
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.jobs.dispatch import CeleryDispatcher
from app.settings import get_settings
from tests.support import (
    BANK,
    bank_file,
    child_env,
    configure,
    fresh_postgres_db,
    require_service,
    start_gpulab,
    stop_gracefully,
    wait_for,
    wait_until_ready,
)
from worker.core.outcome import GradeOutcome

SLUG = "python-split-batch"
REDIS_DB12 = os.environ.get("GPULAB_TEST_REDIS_URL_JOBS", "redis://127.0.0.1:6379/12")
PASSWORD = "a long passphrase"
# Short leases so a killed worker's check is taken over within seconds (the lease rule: at least 3 beats).
LEASE = {"heartbeat_interval_s": "2", "grading_lease_s": "6"}
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def _start_worker(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return start_gpulab(["worker", *args], child_env(**env), log)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A migrated PostgreSQL database with the bank, an empty Redis db 12 and a worker on cpu + examples-cpu."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    env = {
        "mode": "dev",
        "database_url": fresh_postgres_db("gpulab_example_jobs_it"),
        "broker_url": REDIS_DB12,
        "data_dir": str(tmp_path_factory.mktemp("jobs-data")),
        **LEASE,
    }
    redis.Redis.from_url(REDIS_DB12).flushdb()
    log = Path(env["data_dir"]) / "worker.log"
    worker = _start_worker(env, log, "--queues", "cpu", "--concurrency", "1", "--examples-concurrency", "1")
    try:
        wait_until_ready(log, worker, count=2)  # the grading worker and its example-lane companion
        yield env
    finally:
        stop_gracefully(worker)
        assert b"examples-cpu" in log.read_bytes()


@pytest.fixture
def env(stack: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Configure this process as the stack's API process and load the bank."""
    configure(monkeypatch, **stack)
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=BANK)
    return stack


def _version_id(slug: str = SLUG) -> int:
    with session_scope() as session:
        exercise = get_published(session=session, slug=slug)
        assert exercise.current_version_id is not None
        return exercise.current_version_id


def _on_version(version_id: int, run: Callable[[ExerciseVersion], Any]) -> Any:
    with session_scope() as session:
        version = session.get(ExerciseVersion, version_id)
        assert version is not None
        return run(version)


def _comparable(outcome: GradeOutcome) -> tuple[Any, ...]:
    tests = [(t.name, t.outcome.value, t.points, t.max_points) for t in outcome.tests]
    return (outcome.verdict, outcome.score, outcome.max_score, tests, outcome.device, outcome.sandbox)


def test_example_run_on_a_worker_matches_the_in_process_run(env: dict[str, str]) -> None:
    from app.domain.exercises.example_runs import run_in_process

    version_id = _version_id()
    dispatcher = CeleryDispatcher(get_settings())
    try:
        for path in ("solution.py", "wrong/floor_drops_remainder.py"):
            code = bank_file(SLUG, path)
            here = _on_version(version_id, lambda v, code=code: run_in_process(v, code))
            there = _on_version(version_id, lambda v, code=code: dispatcher.run_examples(v, code, wait_s=60))
            assert _comparable(there) == _comparable(here), path
            assert there.tests and there.sandbox == "local"
        assert _comparable(here)[0].value == "failed"  # the wrong variant fails its example tests, both ways
    finally:
        dispatcher.shutdown()
    assert not redis.Redis.from_url(REDIS_DB12).keys("celery-task-meta-*")  # each result read once, then freed


def _slow_files(queue: str, sleep_s: float) -> dict[str, str]:
    """A code exercise whose solution takes ``sleep_s`` to import, so its check runs long enough to be hit."""
    return {
        "exercise.toml": (
            f'title = "Slow add"\nframework = "python"\nqueue = "{queue}"\n[limits]\ntimeout_s = 30\nmemory_mb = 256\n'
            '\n[[wrong]]\nfile = "wrong/minus.py"\nmust_fail = ["test_add.py::test_small"]\n'
        ),
        "prompt.md": "add\n",
        "starter.py": "def add(a, b):\n    raise NotImplementedError\n",
        "solution.py": f"import time\ntime.sleep({sleep_s})\n\n\ndef add(a, b):\n    return a + b\n",
        "wrong/minus.py": "def add(a, b):\n    return a - b\n",
        "tests/test_add.py": textwrap.dedent("""
            def test_small(submission):
                assert submission.add(1, 2) == 3, "add(1, 2) should be 3"
            """),
    }


def _new_check(slug: str, files: dict[str, str]) -> tuple[int, str]:
    from app.domain.exercises.authoring import add_draft, validate
    from app.domain.exercises.checks import create_check

    with session_scope() as session:
        version, _ = add_draft(session=session, spec=validate(slug, files), source="editor", user=None)
        check = create_check(session=session, version=version, user=None)
        session.commit()
        return check.id, version.queue


def _check(check_id: int) -> ExerciseCheck:
    with session_scope() as session:
        check = session.get(ExerciseCheck, check_id)
        assert check is not None
        session.expunge(check)
        return check


def test_example_runs_stay_interactive_while_a_long_check_holds_the_grading_pool(env: dict[str, str]) -> None:
    check_id, queue = _new_check("slow-add-busy", _slow_files("cpu", 8))
    version_id = _version_id()
    dispatcher = CeleryDispatcher(get_settings())
    try:
        dispatcher.start_check(check_id, queue)
        wait_for(lambda: _check(check_id).status == "running", timeout_s=30)  # the one grading thread is taken
        started = time.monotonic()
        code = bank_file(SLUG, "solution.py")
        outcome = _on_version(version_id, lambda v: dispatcher.run_examples(v, code, wait_s=30))
        took_s = time.monotonic() - started
    finally:
        dispatcher.shutdown()
    print(f"example run answered in {took_s:.2f} s while the check held the grading pool")
    assert outcome.verdict.value == "passed"
    assert _check(check_id).status == "running" and took_s < 6, took_s  # answered on the lane, not behind it
    wait_for(lambda: _check(check_id).status in ("passed", "failed", "error"), timeout_s=60)


def test_a_check_whose_worker_is_killed_is_sent_again_and_finishes(env: dict[str, str]) -> None:
    from app.domain.exercises.checks import redispatchable_checks

    check_id, queue = _new_check("slow-add-killed", _slow_files("gpu", 7))
    log = Path(env["data_dir"]) / "gpu-workers.log"
    first = _start_worker(env, log, "--queues", "gpu", "--concurrency", "1", "--examples-concurrency", "0")
    second: subprocess.Popen[bytes] | None = None
    dispatcher = CeleryDispatcher(get_settings())
    try:
        wait_until_ready(log, first)
        dispatcher.start_check(check_id, queue)
        wait_for(lambda: _check(check_id).status == "running", timeout_s=30)
        time.sleep(6.5)  # longer than the lease, still grading the slow solution: only the heartbeat kept it
        with session_scope() as session:
            assert redispatchable_checks(session=session, now=utcnow(), lease_s=6, stale_queued_s=30) == []
        assert not _check(check_id).lines
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        claimed = _check(check_id)
        assert claimed.status == "running" and claimed.attempts == 1

        second = _start_worker(env, log, "--queues", "gpu", "--concurrency", "1", "--examples-concurrency", "0")
        wait_until_ready(log, second, count=2)
        wait_for(lambda: utcnow() - _check(check_id).heartbeat_at > timedelta(seconds=6), timeout_s=30)  # type: ignore[operator]
        with session_scope() as session:
            jobs = redispatchable_checks(session=session, now=utcnow(), lease_s=6, stale_queued_s=30)
            session.commit()
        # A worker's sweeper may have sent it first (once the lead wires checks into it); either way once.
        assert jobs == [(check_id, "gpu")] or _check(check_id).dispatched_at > claimed.heartbeat_at  # type: ignore[operator]
        for job in jobs:
            dispatcher.start_check(*job)
        done = wait_for(lambda: _check(check_id).status != "running" and _check(check_id), timeout_s=90)
    finally:
        dispatcher.shutdown()
        for worker in (first, second):
            if worker is not None:
                stop_gracefully(worker)
    assert isinstance(done, ExerciseCheck)
    assert done.status == "passed", (done.problems, log.read_text(errors="replace")[-3000:])
    assert done.attempts == 2 and len(done.lines) == done.total == 2
    assert all(line.startswith("ok") for line in done.lines)


@pytest.fixture
def api_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """This process as a compose-style API: Celery mode, GPULAB_SANDBOX=docker and no Docker engine.

    Yields the list of every ``get_sandbox`` call made in this process (it must stay empty).
    """
    import worker.grading.sandbox

    configure(monkeypatch, **env, sandbox="docker", docker_url="unix:///nonexistent/docker.sock",
              example_run_wait_s="30")  # fmt: skip
    calls: list[str] = []

    def refuse(*_args: object, **_kwargs: object) -> None:
        calls.append("get_sandbox")
        raise AssertionError("the API process built a sandbox")

    monkeypatch.setattr(worker.grading.sandbox, "get_sandbox", refuse)
    for module in ("app.jobs.tasks", "app.jobs.prewarm"):  # modules that bound the name at import
        loaded = __import__("sys").modules.get(module)
        if loaded is not None and hasattr(loaded, "get_sandbox"):
            monkeypatch.setattr(loaded, "get_sandbox", refuse)
    from app.jobs.dispatch import reset_dispatcher

    reset_dispatcher()
    yield calls
    reset_dispatcher()


def _user(role: Role) -> str:
    email = f"{role.value}-jobs@example.com"
    with session_scope() as session:
        if session.scalar(select(User).where(User.email == email)) is None:
            create_user(session=session, email=email, password=PASSWORD, role=role)
    return email


def test_an_api_without_a_sandbox_serves_example_runs_and_checks_through_workers(api_env: list[str]) -> None:
    import re

    from app.main import create_app
    from tests.conftest import make_test_client

    learner, instructor = _user(Role.learner), _user(Role.instructor)
    with make_test_client(create_app(get_settings())) as client:
        assert client.post("/api/auth/login", json={"email": learner, "password": PASSWORD}).status_code == 200
        run = client.post(f"/api/exercises/{SLUG}/runs", json={"code": bank_file(SLUG, "solution.py")})
        assert run.status_code == 200, run.text
        assert run.json()["verdict"] == "passed" and run.json()["device"]

        client.cookies.clear()
        assert client.post("/api/auth/login", json={"email": instructor, "password": PASSWORD}).status_code == 200
        with session_scope() as session:
            number = session.scalar(select(ExerciseVersion.number).where(ExerciseVersion.id == _version_id()).limit(1))
        page = f"/instructor/exercises/{SLUG}/versions/{number}"
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get(page).text)
        assert csrf, "no CSRF token on the version page"
        before = _latest_check_id()
        started = client.post(f"{page}/check", data={"csrf_token": csrf.group(1)}, follow_redirects=False)
        assert started.status_code == 303
    check_id = _latest_check_id()
    assert check_id != before
    done = wait_for(lambda: _check(check_id).status not in ("queued", "running") and _check(check_id), timeout_s=120)
    assert isinstance(done, ExerciseCheck) and done.status == "passed", done.problems
    assert len(done.lines) == done.total > 1 and done.attempts == 1
    assert api_env == []  # the API process never built a sandbox


def _latest_check_id() -> int | None:
    with session_scope() as session:
        return session.scalar(select(func.max(ExerciseCheck.id)))


def test_an_example_run_no_worker_answers_gets_503_with_retry_after_and_costs_nothing(
    api_env: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.domain.exercises.bank import upsert_exercise
    from app.main import create_app
    from tests.conftest import make_test_client, tiny_files
    from worker.bank.spec import ExerciseSpec

    with session_scope() as session:  # a GPU exercise: no worker serves examples-gpu now
        upsert_exercise(session=session, spec=ExerciseSpec.from_files("gpu-add-nobody", tiny_files(
            prompt_md="add\n", queue="gpu", tag="nobody")))  # fmt: skip
        submissions = session.scalar(select(func.count(Submission.id)))
    learner = _user(Role.learner)
    monkeypatch.setenv("GPULAB_EXAMPLE_RUN_WAIT_S", "2")
    get_settings.cache_clear()
    with make_test_client(create_app(get_settings())) as client:
        assert client.post("/api/auth/login", json={"email": learner, "password": PASSWORD}).status_code == 200
        started = time.monotonic()
        response = client.post("/api/exercises/gpu-add-nobody/runs", json={"code": "def add(a, b):\n    return a\n"})
        took_s = time.monotonic() - started
        schema = client.get("/openapi.json").json()
    assert response.status_code == 503 and int(response.headers["retry-after"]) > 0
    assert "no example runner answered within 2 s" in response.json()["detail"]
    assert 2 <= took_s < 6
    declared = schema["paths"]["/api/exercises/{slug}/runs"]["post"]["responses"]
    assert "Retry-After" in declared["503"]["headers"] and "429" in declared
    with session_scope() as session:
        assert session.scalar(select(func.count(Submission.id))) == submissions
    assert api_env == []
