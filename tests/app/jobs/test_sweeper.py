"""Leases and the sweeper on a real database: what is sent again, what settles, and who may write a result."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from app.domain.exercises.bank import get_published, sync_bank
from app.domain.leases import renew
from app.domain.models import Submission, SubmissionStatus, utcnow
from app.domain.platform.db import engine_for, session_scope
from app.domain.platform.migrate import upgrade
from app.domain.submissions.lifecycle import claim, create_submission, held
from app.jobs.sweeper import EXHAUSTED_MESSAGE, sweep_once
from app.settings import get_settings
from tests.support import BANK, configure, fresh_postgres_db, require_service
from worker.core.outcome import Verdict

SLUG = "python-split-batch"


@dataclass
class Transport:
    """A dispatcher that records what it was given and says it lost the ids in ``lost`` (None: all)."""

    name: str = "transport"
    owns_all_running: bool = False
    lost: set[str] | None = None
    sent: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def dispatch(self, submission_id: str, queue: str) -> None:
        with self.lock:
            self.sent.append(submission_id)

    def may_have_lost(self, stale: list[tuple[str, str]], *, waiting_by_queue: dict[str, int]) -> list[str]:
        return [sid for sid, _ in stale if self.lost is None or sid in self.lost]

    def shutdown(self) -> None:
        pass


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database with the bank synced, on SQLite or PostgreSQL."""
    if request.param == "postgres":
        require_service("PostgreSQL", "127.0.0.1", 5432)
        url = fresh_postgres_db("gpulab_sweeper_test")
    else:
        url = f"sqlite:///{tmp_path / 'sweeper.db'}"
    configure(monkeypatch, mode="dev", database_url=url, data_dir=str(tmp_path))
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=BANK)
    yield url
    engine_for(url).dispose()


def _submit(**values: object) -> str:
    with session_scope() as session:
        exercise = get_published(session=session, slug=SLUG)
        submission = create_submission(session=session, user=None, exercise=exercise, code="x = 1\n", max_bytes=65536)
        session.flush()
        for key, value in values.items():
            setattr(submission, key, value)
        return submission.id


def _row(submission_id: str) -> Submission:
    with session_scope() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        session.expunge(row)
        return row


def _ago(seconds: float):  # type: ignore[no-untyped-def]
    return utcnow() - timedelta(seconds=seconds)


def test_expired_lease_is_sent_again_and_a_live_one_is_left_alone(database: str) -> None:
    settings = get_settings()
    dead = _submit(status=SubmissionStatus.running, attempts=1, started_at=_ago(300), heartbeat_at=_ago(60))
    alive = _submit(status=SubmissionStatus.running, attempts=1, started_at=_ago(300), heartbeat_at=_ago(5))
    transport = Transport()
    report = sweep_once(dispatcher=transport, settings=settings)
    assert report.requeued == [dead] and transport.sent == [dead]
    requeued = _row(dead)
    assert requeued.status is SubmissionStatus.queued and requeued.dispatched_at is not None
    assert "grading it again" in requeued.message
    assert _row(alive).status is SubmissionStatus.running
    assert sweep_once(dispatcher=transport, settings=settings).redispatched == 0  # stamped: not sent twice


def test_a_submission_out_of_attempts_settles_with_a_message_for_the_learner(database: str) -> None:
    settings = get_settings()
    spent = _submit(status=SubmissionStatus.running, attempts=settings.max_attempts, heartbeat_at=_ago(120))
    transport = Transport()
    report = sweep_once(dispatcher=transport, settings=settings)
    assert report.exhausted == [spent] and transport.sent == []
    row = _row(spent)
    assert row.status is SubmissionStatus.error and row.verdict is Verdict.internal_error
    assert row.message == EXHAUSTED_MESSAGE.format(attempts=settings.max_attempts)
    assert "not of your code" in row.message and row.finished_at is not None


def test_stale_queued_work_is_sent_again_only_when_the_transport_may_have_lost_it(database: str) -> None:
    settings = get_settings()
    kept = _submit(created_at=_ago(120))
    lost = _submit(created_at=_ago(120))
    fresh = _submit()  # just submitted: its message is surely still on its way
    transport = Transport(lost={lost, fresh})
    report = sweep_once(dispatcher=transport, settings=settings)
    assert report.resent == [lost] and transport.sent == [lost]
    assert _row(kept).dispatched_at is None and _row(lost).dispatched_at is not None
    assert fresh not in transport.sent


def test_only_the_holder_of_the_lease_renews_it_or_writes_the_result(database: str) -> None:
    settings = get_settings()
    submission_id = _submit()
    with session_scope() as session:
        first = claim(session=session, submission_id=submission_id, lease_s=settings.grading_lease_s)
        assert first is not None and first.attempts == 1
    with session_scope() as session:  # a second delivery while the lease is fresh grades nothing
        assert claim(session=session, submission_id=submission_id, lease_s=settings.grading_lease_s) is None
    with session_scope() as session:
        assert renew(session=session, model=Submission, row_id=submission_id, attempt=1)
        session.execute(update(Submission).where(Submission.id == submission_id).values(heartbeat_at=_ago(600)))
    with session_scope() as session:
        second = claim(session=session, submission_id=submission_id, lease_s=settings.grading_lease_s)
        assert second is not None and second.attempts == 2
    with session_scope() as session:
        assert not renew(session=session, model=Submission, row_id=submission_id, attempt=1)
        assert held(session=session, submission_id=submission_id, attempt=1) is None
        assert held(session=session, submission_id=submission_id, attempt=2) is not None


def test_claim_refuses_a_submission_out_of_attempts(database: str) -> None:
    submission_id = _submit(attempts=3)
    with session_scope() as session:
        assert claim(session=session, submission_id=submission_id, lease_s=30, max_attempts=3) is None


@pytest.mark.postgres
@pytest.mark.parametrize("database", ["postgres"], indirect=True)  # SQLite has one writer: nothing races
def test_racing_claims_and_sweepers_send_and_grade_each_submission_once(database: str) -> None:
    settings = get_settings()
    ids = [_submit(status=SubmissionStatus.running, attempts=1, heartbeat_at=_ago(120)) for _ in range(30)]
    transport = Transport()
    start = threading.Barrier(4)

    def sweep() -> None:
        start.wait()
        sweep_once(dispatcher=transport, settings=settings)

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(transport.sent) == sorted(ids)  # every stranded one sent, none twice

    winners: list[int] = []
    claim_start = threading.Barrier(6)

    def take() -> None:
        claim_start.wait()
        with session_scope() as session:
            row = claim(session=session, submission_id=ids[0], lease_s=settings.grading_lease_s)
            if row is not None:
                winners.append(row.attempts)

    claimers = [threading.Thread(target=take) for _ in range(6)]
    for thread in claimers:
        thread.start()
    for thread in claimers:
        thread.join()
    assert winners == [2]
