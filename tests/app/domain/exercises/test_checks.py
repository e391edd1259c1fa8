"""``app.domain.exercises.checks``: the claim that fences a check's writes and the sweeper's
``redispatchable_checks``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from app.domain.exercises.checks import EXHAUSTED, claim_check, create_check, redispatchable_checks
from app.domain.models import ExerciseCheck, utcnow
from tests.conftest import TinyExercise

pytestmark = pytest.mark.postgres


def _check(db_session: Session, tiny_exercise: TinyExercise, **values: object) -> ExerciseCheck:
    version = tiny_exercise.exercise.current_version
    assert version is not None
    check = create_check(session=db_session, version=version, user=None)
    for key, value in values.items():
        setattr(check, key, value)
    db_session.commit()
    return check


def test_claim_takes_a_queued_check_once_and_an_expired_one_back(
    db_session: Session, tiny_exercise: TinyExercise
) -> None:
    check = _check(db_session, tiny_exercise)
    assert claim_check(session=db_session, check_id=check.id, lease_s=45, max_attempts=3) == 1
    assert claim_check(session=db_session, check_id=check.id, lease_s=45, max_attempts=3) is None  # live lease
    db_session.refresh(check)
    check.heartbeat_at = utcnow() - timedelta(seconds=60)
    db_session.commit()
    assert claim_check(session=db_session, check_id=check.id, lease_s=45, max_attempts=3) == 2  # the new token
    db_session.refresh(check)
    check.heartbeat_at = utcnow() - timedelta(seconds=60)
    check.attempts = 3
    db_session.commit()
    assert claim_check(session=db_session, check_id=check.id, lease_s=45, max_attempts=3) is None  # exhausted


def test_redispatchable_checks_sends_stranded_checks_and_settles_exhausted_ones(
    db_session: Session, tiny_exercise: TinyExercise
) -> None:
    now = utcnow()
    old = now - timedelta(seconds=120)
    fresh = _check(db_session, tiny_exercise)  # just dispatched: its message is on its way
    lost = _check(db_session, tiny_exercise, dispatched_at=old)
    never = _check(db_session, tiny_exercise, dispatched_at=None)
    alive = _check(db_session, tiny_exercise, status="running", attempts=1, heartbeat_at=now, dispatched_at=old)
    sent = old - timedelta(seconds=5)  # a claimed check was sent before it was claimed and beat
    dead = _check(db_session, tiny_exercise, status="running", attempts=1, heartbeat_at=old, dispatched_at=sent)
    spent = _check(db_session, tiny_exercise, status="running", attempts=3, heartbeat_at=old, dispatched_at=sent)
    done = _check(db_session, tiny_exercise, status="passed", attempts=1, heartbeat_at=old)
    ours = {c.id for c in (fresh, lost, never, alive, dead, spent, done)}

    jobs = redispatchable_checks(session=db_session, now=now, lease_s=45, stale_queued_s=30, max_attempts=3)
    db_session.commit()
    assert [job for job in jobs if job[0] in ours] == [(lost.id, "cpu"), (never.id, "cpu"), (dead.id, "cpu")]
    for check in (lost, never, dead):
        db_session.refresh(check)
        assert check.dispatched_at == now  # stamped: the next sweep leaves them alone for stale_queued_s
    db_session.refresh(spent)
    assert spent.status == "error" and spent.finished_at == now
    assert spent.problems == [EXHAUSTED.format(attempts=3)] and "start it again" in spent.problems[0]
    soon = redispatchable_checks(session=db_session, now=now + timedelta(seconds=1), lease_s=45, stale_queued_s=30)
    assert not [job for job in soon if job[0] in ours]  # just sent: its message waits its turn
    later = now + timedelta(seconds=31)  # nobody took them: send again (the dead one's lease is still expired)
    again = redispatchable_checks(session=db_session, now=later, lease_s=45, stale_queued_s=30)
    expected = [(check.id, "cpu") for check in (fresh, lost, never, dead)]
    assert [job for job in again if job[0] in ours] == expected  # the fresh one is stale too by now
