"""Scale-out mode for real: PostgreSQL, Redis, and a `gpulab worker` process consuming the cpu queue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.domain.accounts.passwords import create_user
from app.domain.exercises.bank import get_published, sync_bank
from app.domain.models import Role, Submission, SubmissionStatus, User
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.domain.submissions.lifecycle import create_submission
from app.jobs.dispatch import CeleryDispatcher, recover_unfinished
from app.settings import get_settings
from tests.support import (
    BANK,
    REDIS_URL,
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
from worker.core.outcome import Verdict

SLUG = "python-split-batch"
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A migrated PostgreSQL database, an empty Redis database and a running Celery worker."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    env = {
        "mode": "dev",
        "database_url": fresh_postgres_db("gpulab_celery_it"),
        "broker_url": REDIS_URL,
        "data_dir": str(tmp_path_factory.mktemp("celery-data")),
    }
    redis.Redis.from_url(REDIS_URL).flushdb()
    log = Path(env["data_dir"]) / "worker.log"
    worker = start_gpulab(["worker", "--queues", "cpu", "--concurrency", "2"], child_env(**env), log)
    try:
        wait_until_ready(log, worker, timeout_s=60)
        yield env
    finally:
        stop_gracefully(worker, 20)


@pytest.fixture
def learner(stack: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> int:
    configure(monkeypatch, **stack)
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=BANK)
        from sqlalchemy import select

        user = session.scalar(select(User).where(User.email == "grace@example.com"))
        if user is None:
            user = create_user(
                session=session, email="grace@example.com", password="a long passphrase", role=Role.learner
            )
            session.flush()
        return user.id


def _submit(user_id: int, code: str) -> str:
    with session_scope() as session:
        exercise = get_published(session=session, slug=SLUG)
        submission = create_submission(
            session=session, user=session.get(User, user_id), exercise=exercise, code=code, max_bytes=65536
        )
        return submission.id


def _settled(submission_id: str) -> Submission | None:
    with session_scope() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        if row.status in (SubmissionStatus.graded, SubmissionStatus.error):
            _ = row.tests
            session.expunge_all()
            return row
        return None


def test_worker_grades_dispatched_submissions(learner: int) -> None:
    good = _submit(learner, bank_file(SLUG, "solution.py"))
    bad = _submit(learner, bank_file(SLUG, "wrong/floor_drops_remainder.py"))
    dispatcher = CeleryDispatcher(get_settings())
    try:
        dispatcher.dispatch(good, "cpu")
        dispatcher.dispatch(bad, "cpu")
        dispatcher.dispatch(good, "cpu")  # a duplicate delivery must not grade twice
    finally:
        dispatcher.shutdown()
    passed = wait_for(lambda: _settled(good), timeout_s=90)
    failed = wait_for(lambda: _settled(bad), timeout_s=90)
    assert isinstance(passed, Submission) and isinstance(failed, Submission)
    assert passed.verdict is Verdict.passed and passed.score == passed.max_score
    assert failed.verdict is Verdict.failed and any(t.outcome == "failed" for t in failed.tests)
    assert passed.sandbox == "local"
    wait_for(lambda: redis.Redis.from_url(REDIS_URL).llen("cpu") == 0, timeout_s=30)
    assert _settled(good).attempts == 1  # type: ignore[union-attr]


def test_restart_recovery_requeues_work_the_broker_never_saw(learner: int) -> None:
    orphan = _submit(learner, bank_file(SLUG, "solution.py"))  # committed, but its message was lost
    dispatcher = CeleryDispatcher(get_settings())
    try:
        assert recover_unfinished(dispatcher) >= 1
    finally:
        dispatcher.shutdown()
    settled = wait_for(lambda: _settled(orphan), timeout_s=90)
    assert isinstance(settled, Submission) and settled.verdict is Verdict.passed
