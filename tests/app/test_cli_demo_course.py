"""The embedded demo's course: the demo instructor teaches it, the demo learner is in it, one assignment is due."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.cli import DEMO_ASSIGNMENT, DEMO_COURSE, DEMO_USERS, demo_course
from app.domain.courses import assignments, membership
from app.domain.exercises.bank import sync_bank
from app.domain.models import Course, CourseRole, Role, User, utcnow
from worker.core.config import REPO_ROOT

pytestmark = pytest.mark.postgres


def test_the_demo_course_is_made_once_with_an_assignment_due_next_week(
    db_session: Session, make_user: Callable[..., User]
) -> None:
    for email, role, _password in DEMO_USERS:
        if db_session.scalar(select(User).where(User.email == email)) is None:
            make_user(Role(role), email=email)
    sync_bank(session=db_session, root=REPO_ROOT / "exercises")
    demo_course(session=db_session)
    demo_course(session=db_session)  # a second start of the demo changes nothing

    made = list(db_session.scalars(select(Course).where(Course.slug == DEMO_COURSE)))
    assert len(made) == 1
    course = made[0]
    learner = db_session.scalar(select(User).where(User.email == DEMO_USERS[0][0]))
    teacher = db_session.scalar(select(User).where(User.email == DEMO_USERS[1][0]))
    assert learner is not None and teacher is not None
    assert membership.course_role(session=db_session, course=course, user=learner) is CourseRole.learner
    assert membership.course_role(session=db_session, course=course, user=teacher) is CourseRole.instructor
    (assignment,) = course.assignments
    assert [i.exercise.slug for i in assignment.items] == DEMO_ASSIGNMENT
    assert assignment.due_at is not None
    assert timedelta(days=6) < assignment.due_at - utcnow() < timedelta(days=8)
    exercise = assignment.items[0].exercise
    gate = assignments.gate(session=db_session, assignment=assignment, exercise=exercise, user=learner, now=utcnow())
    assert gate.allowed and gate.attempts_left == 5 and "due on" in gate.reason
