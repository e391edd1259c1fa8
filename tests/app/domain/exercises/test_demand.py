"""The order warm grading starts in: exercises of open assignments first, then by recent submissions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.exercises.demand import RECENT_DAYS, by_demand
from app.domain.models import Assignment, AssignmentItem, Exercise, Role, Submission, User, utcnow
from tests.conftest import TinyExercise

pytestmark = pytest.mark.postgres


def _submit(session: Session, exercise: Exercise, learner: User, *, days_ago: float = 0, times: int = 1) -> None:
    for _ in range(times):
        version_id = exercise.current_version_id
        assert version_id is not None
        session.add(
            Submission(
                user_id=learner.id, exercise_version_id=version_id, code="x = 1\n",
                created_at=utcnow() - timedelta(days=days_ago),
            )
        )  # fmt: skip
    session.flush()


def test_open_assignments_come_first_then_recent_submissions(
    db_session: Session, make_exercise: Callable[..., TinyExercise], make_user: Callable[..., User]
) -> None:
    ours = {name: make_exercise().exercise for name in ("open", "closed", "busy", "old", "idle")}
    learner, teacher = make_user(Role.learner), make_user(Role.instructor)
    course = membership.create_course(session=db_session, slug="demand-1", title="Demand", creator=teacher)
    now = utcnow()
    windows = {"open": (now - timedelta(days=1), now + timedelta(days=1)), "closed": (None, now - timedelta(hours=1))}
    for name, (opens_at, due_at) in windows.items():
        assignment = Assignment(course=course, title=name, opens_at=opens_at, due_at=due_at)
        assignment.items.append(AssignmentItem(exercise_id=ours[name].id))
        db_session.add(assignment)
    db_session.add(Assignment(course=course, title="not yet", opens_at=now + timedelta(days=1)))
    _submit(db_session, ours["busy"], learner, times=3)
    _submit(db_session, ours["closed"], learner, times=2)
    _submit(db_session, ours["old"], learner, days_ago=RECENT_DAYS + 1, times=9)  # too long ago to count
    order = [e.id for e in by_demand(session=db_session, now=now)]
    mine = [name for i in order for name, e in ours.items() if e.id == i]
    assert mine[0] == "open"  # an open assignment's, though nobody submitted it yet
    assert mine[1:3] == ["busy", "closed"]  # then by submissions of the last week
    assert set(mine[3:]) == {"old", "idle"}
    published = set(db_session.scalars(select(Exercise.id).where(Exercise.is_published.is_(True))))
    assert set(order) == {i for i in published if db_session.get(Exercise, i).current_version_id is not None}
