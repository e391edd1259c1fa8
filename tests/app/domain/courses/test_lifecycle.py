"""A course across terms: next term from this one with shifted dates, and an archive where nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.courses import assignments, coursework, drafts, gradebook, lifecycle, membership
from app.domain.lti import scores
from app.domain.models import (
    CourseMember,
    CourseRole,
    Extension,
    LtiLink,
    LtiPlatform,
    LtiUser,
    Role,
    Submission,
    User,
    utcnow,
)
from app.domain.review import regrade_requests as rr
from app.domain.review import staff_grading as mg
from app.domain.submissions.regrade import start_regrade
from app.jobs.timed import close_attempt
from app.settings import Settings
from tests.app.domain.courses.test_gradebook import add_assignment
from tests.app.domain.review.test_regrade_requests import Class, klass  # noqa: F401  (klass: a fixture)
from worker.core.errors import Conflict, Forbidden, InvalidInput, NotFound

pytestmark = pytest.mark.postgres
DUE = datetime(2026, 10, 5, 21, 59, tzinfo=UTC)


def test_next_term_copies_assignments_as_drafts_with_dates_moved_and_no_people(
    db_session: Session,
    klass: Class,  # noqa: F811
    instructor: User,
) -> None:
    db = db_session
    course = klass.assignment.course
    exam = add_assignment(
        db, course, "Midterm", 1, [(klass.exercise.exercise, 3.0)], opens_at=DUE - timedelta(days=7), due_at=DUE,
        late_until=DUE + timedelta(days=2), late_credit_pct=40, counts="last", max_attempts=3, rate_burst=2,
        rate_refill_s=60, practice="counted", leaderboard=False, time_limit_min=90, exam_mode=True,
        access_code="secret-room", allowed_networks="10.0.0.0/8",
    )  # fmt: skip
    coursework.grant_extension(session=db, assignment=exam, learner=klass.learner, due_at=None, late_until=None,
                               extra_attempts=2, reason="sports", actor=instructor)  # fmt: skip
    copy = lifecycle.copy_course(session=db, source=course, slug="gpus-spring", title="GPUs", term="Spring 2027",
                                 actor=instructor, shift=timedelta(days=182), with_staff=True)  # fmt: skip
    db.flush()
    moved = {a.title: a for a in copy.assignments}
    assert set(moved) == {"Week 1", "Midterm"} and not any(a.is_published for a in copy.assignments)
    m = moved["Midterm"]
    assert (m.opens_at, m.due_at, m.late_until) == tuple(
        d + timedelta(days=182) for d in (DUE - timedelta(days=7), DUE, DUE + timedelta(days=2))
    )
    assert (m.late_credit_pct, m.counts, m.max_attempts, m.rate_burst, m.rate_refill_s, m.practice, m.leaderboard,
            m.time_limit_min, m.exam_mode, m.allowed_networks) == (
        40, "last", 3, 2, 60, "counted", False, 90, True, "10.0.0.0/8",
    )  # fmt: skip
    assert m.access_code == ""  # a new term gets a new code
    assert [(i.exercise_id, i.weight) for i in m.items] == [(klass.exercise.exercise.id, 3.0)]
    people = {(cm.user_id, cm.role) for cm in db.scalars(select(CourseMember).where(CourseMember.course_id == copy.id))}
    assert people == {(instructor.id, CourseRole.instructor), (klass.ta.id, CourseRole.ta)}  # no learner
    assert db.scalars(select(Extension).where(Extension.assignment_id == m.id)).all() == []
    assert (copy.term, copy.copied_from_id) == ("Spring 2027", course.id)
    # The other way to say the offset: the new first due date.
    first = datetime(2027, 4, 1, 22, 0, tzinfo=UTC)
    again = lifecycle.copy_course(session=db, source=course, slug="gpus-fall", title="GPUs", term="", actor=instructor,
                                  first_due=first)  # fmt: skip
    db.flush()
    assert {a.title: a.due_at for a in again.assignments}["Midterm"] == first
    assert [m.user_id for m in db.scalars(select(CourseMember).where(CourseMember.course_id == again.id))] == [
        instructor.id
    ]


def test_a_copy_is_refused_with_a_reason(db_session: Session, klass: Class, instructor: User) -> None:  # noqa: F811
    course = klass.assignment.course
    with pytest.raises(Forbidden):  # TAs grade; starting a course is an instructor's
        lifecycle.copy_course(session=db_session, source=course, slug="x-copy", title="X", term="", actor=klass.ta,
                              shift=timedelta(days=1))  # fmt: skip
    with pytest.raises(NotFound):
        lifecycle.copy_course(session=db_session, source=course, slug="x-copy", title="X", term="",
                              actor=klass.outsider_ta, shift=timedelta(days=1))  # fmt: skip
    with pytest.raises(InvalidInput, match="either a shift"):
        lifecycle.copy_course(session=db_session, source=course, slug="x-copy", title="X", term="", actor=instructor)
    with pytest.raises(InvalidInput, match="no due dates"):  # Week 1 has none
        lifecycle.copy_course(session=db_session, source=course, slug="x-copy", title="X", term="", actor=instructor,
                              first_due=DUE)  # fmt: skip
    with pytest.raises(Conflict, match="already exists"):
        lifecycle.copy_course(session=db_session, source=course, slug=course.slug, title="X", term="",
                              actor=instructor, shift=timedelta(days=1))  # fmt: skip
    with pytest.raises(InvalidInput, match="not a valid course slug"):
        lifecycle.copy_course(session=db_session, source=course, slug="Bad Slug", title="X", term="",
                              actor=instructor, shift=timedelta(days=1))  # fmt: skip
    with pytest.raises(InvalidInput, match="practice course"):
        lifecycle.copy_course(session=db_session, source=membership.practice_course(session=db_session),
                              slug="p-copy", title="X", term="", actor=instructor, shift=timedelta(days=1))  # fmt: skip


def test_nothing_changes_in_an_archive_and_its_learners_still_read_their_grades(
    db_session: Session,
    klass: Class,  # noqa: F811
    instructor: User,
    admin: User,
    make_user: Callable[..., User],
) -> None:
    db = db_session
    course = klass.assignment.course
    item = klass.assignment.items[0]
    before = gradebook.my_grades(session=db, course=course, user=klass.learner)
    platform = LtiPlatform(
        issuer="https://lms.example", client_id="c", name="LMS", auth_login_url="https://lms.example/a",
        auth_token_url="https://lms.example/t", jwks_url="https://lms.example/j", deployment_ids=["1"],
    )  # fmt: skip
    db.add(platform)
    db.flush()
    db.add_all([
        LtiUser(platform_id=platform.id, sub="u-1", user_id=klass.learner.id),
        LtiLink(platform_id=platform.id, deployment_id="1", resource_link_id="r", assignment_id=klass.assignment.id,
                lineitem_url="https://lms.example/li/1"),
    ])  # fmt: skip
    db.flush()
    assert scores.queue_learner_score(session=db, assignment_id=klass.assignment.id, user_id=klass.learner.id)
    code_exercise = klass.exercise.exercise
    lifecycle.archive(session=db, course=course, actor=instructor)
    lifecycle.archive(session=db, course=course, actor=instructor)  # again: nothing changes
    assert course.archived_at is not None and course.invite_token is None

    archived = Conflict
    newcomer = make_user(Role.learner)
    fields = coursework.AssignmentFields(title="N")
    refusals: list[Callable[[], object]] = [
        lambda: membership.enroll(session=db, course=course, user=newcomer),
        lambda: membership.enroll(session=db, course=course, user=klass.other, role=CourseRole.ta),
        lambda: membership.unenroll(session=db, course=course, user=klass.other),
        lambda: membership.enroll_csv(session=db, course=course, text=f"email\n{newcomer.email}\n", actor=instructor),
        lambda: membership.invite_token_for(session=db, course=course),
        lambda: coursework.grant_extension(
            session=db, assignment=klass.assignment, learner=klass.learner, due_at=None, late_until=None,
            extra_attempts=1, reason="x", actor=instructor,
        ),
        lambda: coursework.create_assignment(session=db, course=course, fields=fields, items=[], actor=instructor),
        lambda: gradebook.override(
            session=db, course=course, item=item, learner=klass.learner, score_pct=1, comment="x", actor=instructor
        ),
        lambda: rr.ask(session=db, user=klass.learner, submission=klass.graded, reason="please"),
        lambda: drafts.save(
            session=db, exercise=code_exercise, user=klass.learner, assignment=klass.assignment, base_revision=0,
            code="x = 1", max_code_bytes=65536,
        ),
        lambda: mg.release(session=db, user=instructor, assignment=klass.assignment),
        lambda: start_regrade(
            session=db, exercise=code_exercise, target=code_exercise.current_version, submissions=[klass.graded],
            user=instructor,
        ),
    ]  # fmt: skip
    for refuse in refusals:
        with pytest.raises(archived, match="archived"), db.begin_nested():
            refuse()
    with pytest.raises(Forbidden, match="archived"):
        coursework.require_submittable(session=db, assignment=klass.assignment, exercise=code_exercise,
                                       user=klass.learner)  # fmt: skip
    gate = assignments.gate(session=db, assignment=klass.assignment, exercise=code_exercise, user=klass.learner,
                            now=utcnow())  # fmt: skip
    assert not gate.allowed and "archived" in gate.reason
    # No more LMS score sends; an archived assignment binds no practice.
    assert scores.queue_learner_score(session=db, assignment_id=klass.assignment.id, user_id=klass.learner.id) == []
    assert coursework.holding_assignments(session=db, exercise=code_exercise, user=klass.learner) == []
    # Learners still read their grades; staff still read the gradebook; the default list leaves it out.
    assert gradebook.my_grades(session=db, course=course, user=klass.learner) == before
    assert gradebook.gradebook(session=db, course=course, viewer=klass.ta).rows
    assert course not in [c for c, _ in membership.courses_of(session=db, user=klass.learner)]
    assert course in [c for c, _ in membership.courses_of(session=db, user=klass.learner, archived=True)]
    # Only an admin opens it again.
    with pytest.raises(Forbidden, match="only an admin"):
        lifecycle.unarchive(session=db, course=course, actor=instructor)
    lifecycle.unarchive(session=db, course=course, actor=admin)
    assert course.archived_at is None
    membership.enroll(session=db, course=course, user=newcomer)
    with pytest.raises(InvalidInput, match="never archived"):
        lifecycle.archive(session=db, course=membership.practice_course(session=db), actor=admin)


def test_a_timed_end_in_an_archive_submits_no_draft(
    db_session: Session,
    klass: Class,  # noqa: F811
    instructor: User,
    settings: Settings,
) -> None:
    db = db_session
    assignment = klass.assignment
    assignment.time_limit_min = 30
    exercise = klass.exercise.exercise
    attempt = coursework.start_timed(session=db, assignment=assignment, user=klass.learner, access_code="",
                                     client_ip="127.0.0.1", now=utcnow())  # fmt: skip
    drafts.save(session=db, exercise=exercise, user=klass.learner, assignment=assignment, base_revision=0,
                code="def add(a, b):\n    return a + b\n", max_code_bytes=65536)  # fmt: skip
    lifecycle.archive(session=db, course=assignment.course, actor=instructor)
    attempt.ends_at = utcnow() - timedelta(seconds=1)
    db.flush()
    count = db.scalar(select(func.count()).select_from(Submission))
    assert close_attempt(session=db, attempt_id=attempt.id, settings=settings) == []
    assert db.scalar(select(func.count()).select_from(Submission)) == count  # the draft stays, for staff
    assert drafts.find(session=db, exercise=exercise, user=klass.learner, assignment=assignment) is not None
