"""The embedded default end to end: SQLite, the in-process dispatcher, restart recovery.

Gradings go to the ``fake_sandbox`` (what matters here is what the jobs side does with an outcome); the real
backends have their own tests (``test_grading.py``, ``test_sandbox_*.py``, ``tests/security``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from app.domain.accounts.passwords import create_user
from app.domain.exercises.bank import get_published, sync_bank
from app.domain.models import Role, Submission, SubmissionStatus, User, utcnow
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.domain.submissions.lifecycle import create_submission
from app.jobs.dispatch import InProcessDispatcher, recover_unfinished
from tests.support import BANK, bank_file, configure
from worker.core.outcome import Verdict
from worker.grading.sandbox.fake import FakeJob, FakeSandbox, Reply

SLUG = "python-split-batch"
WRONG = "wrong/round_robin.py"


@pytest.fixture
def embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_sandbox: FakeSandbox) -> int:
    """Migrate a fresh SQLite database, sync the real bank, grade the wrong variant as failing; a learner's id."""
    wrong = bank_file(SLUG, WRONG)

    def wrong_fails(job: FakeJob) -> Reply:
        return job.reply(default="failed" if job.code == wrong else "passed")

    fake_sandbox.handler = wrong_fails
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path), max_attempts="2")
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=BANK)
        user = create_user(session=session, email="ada@example.com", password="correct horse", role=Role.learner)
        session.flush()
        return user.id


def _submit(user_id: int, code: str, *, status: SubmissionStatus = SubmissionStatus.queued) -> str:
    with session_scope() as session:
        user = session.get(User, user_id)
        submission = create_submission(
            session=session, user=user, exercise=get_published(session=session, slug=SLUG), code=code, max_bytes=65536
        )
        submission.status = status
        if status is SubmissionStatus.running:
            submission.started_at = utcnow() - timedelta(seconds=5)
        return submission.id


def _load(submission_id: str) -> Submission:
    with session_scope() as session:
        submission = session.scalars(select(Submission).where(Submission.id == submission_id)).one()
        _ = submission.tests, submission.exercise_version
        session.expunge_all()
        return submission


def test_correct_and_wrong_code_get_their_verdicts(embedded: int) -> None:
    good = _submit(embedded, bank_file(SLUG, "solution.py"))
    bad = _submit(embedded, bank_file(SLUG, WRONG))
    dispatcher = InProcessDispatcher(workers=2)
    try:
        dispatcher.dispatch(good, "cpu")
        dispatcher.dispatch(bad, "cpu")
        assert dispatcher.wait_idle(timeout_s=120)
    finally:
        dispatcher.shutdown()

    passed, failed = _load(good), _load(bad)
    assert passed.status is SubmissionStatus.graded and passed.verdict is Verdict.passed
    assert passed.score == passed.max_score > 0
    assert all(t.outcome == "passed" for t in passed.tests) and passed.tests
    assert passed.finished_at is not None and passed.runtime_ms and passed.runtime_ms > 0
    assert passed.sandbox == "fake" and passed.device
    assert failed.status is SubmissionStatus.graded and failed.verdict is Verdict.failed
    assert failed.score is not None and failed.score < failed.max_score
    assert any(t.outcome == "failed" and t.message for t in failed.tests)


def test_duplicate_dispatch_grades_once(embedded: int, fake_sandbox: FakeSandbox) -> None:
    submission_id = _submit(embedded, bank_file(SLUG, "solution.py"))
    dispatcher = InProcessDispatcher(workers=2)
    try:
        for _ in range(3):
            dispatcher.dispatch(submission_id, "cpu")
        assert dispatcher.wait_idle(timeout_s=120)
    finally:
        dispatcher.shutdown()
    graded = _load(submission_id)
    assert graded.verdict is Verdict.passed
    assert graded.attempts == 1 and len(fake_sandbox.runs) == 1


def test_restart_recovers_queued_and_interrupted_submissions(embedded: int) -> None:
    queued = _submit(embedded, bank_file(SLUG, "solution.py"))
    interrupted = _submit(embedded, bank_file(SLUG, WRONG), status=SubmissionStatus.running)
    done = _submit(embedded, bank_file(SLUG, "solution.py"))
    with session_scope() as session:
        row = session.get(Submission, done)
        assert row is not None
        row.status, row.verdict, row.score = SubmissionStatus.graded, Verdict.passed, row.max_score

    dispatcher = InProcessDispatcher(workers=2)  # a new process starting up
    try:
        assert recover_unfinished(dispatcher) == 2
        assert dispatcher.wait_idle(timeout_s=120)
    finally:
        dispatcher.shutdown()
    assert _load(queued).verdict is Verdict.passed
    assert _load(interrupted).verdict is Verdict.failed
    assert _load(done).attempts == 0  # settled work is left alone


def test_platform_errors_are_retried_then_settle_as_error(embedded: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def broken_grade(*_args: object, **_kwargs: object) -> None:
        calls.append("grade")
        raise RuntimeError("sandbox host fell over")

    monkeypatch.setattr("app.jobs.tasks.grade", broken_grade)
    submission_id = _submit(embedded, bank_file(SLUG, "solution.py"))
    dispatcher = InProcessDispatcher(workers=1)
    try:
        dispatcher.dispatch(submission_id, "cpu")
        assert dispatcher.wait_idle(timeout_s=60)
    finally:
        dispatcher.shutdown()
    settled = _load(submission_id)
    assert len(calls) == 2  # GPULAB_MAX_ATTEMPTS=2
    assert settled.status is SubmissionStatus.error
    assert settled.verdict is Verdict.internal_error
    assert "sandbox host fell over" in settled.message
