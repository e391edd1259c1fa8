"""A course across terms: next term from this one (a copy with shifted dates), and the archive of a finished one.

Contract:
- ``copy_course``: an instructor of a course (or an admin) starts a new course from it: a new slug, title and
  term; every assignment comes as an unpublished draft with its dates shifted by one offset (``shift``, or the
  offset that moves the earliest due date to ``first_due``), its items and weights, late rule, attempt and rate
  limits, practice setting, leaderboard switch and timed-assessment settings (an access code is not copied:
  a new term gets a new one). Rubrics and leaderboards are the exercises' own, so the copy has them as they are.
  Staff (instructors and TAs) come only with ``with_staff``; learners, submissions, drafts, extensions and
  overrides never. The copier is the copy's instructor. The copy can then be linked to a new LMS context
  (``app.domain.lti.deep_linking.relink``).
- ``archive``: the course's instructors or an admin make it read-only for everyone
  (``membership.require_open`` refuses every change: submissions, grades, enrolments, extensions, assignments;
  LMS scores are no longer queued); its invite link closes. Learners still read their grades and history, staff
  still read and export. ``unarchive`` is an admin's. The practice course is never archived.
- Each is recorded in the audit trail. The caller commits.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.courses import membership
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    CourseMember,
    CourseRole,
    Role,
    User,
    utcnow,
)
from app.domain.platform.clock import as_utc
from worker.core.errors import Conflict, Forbidden, InvalidInput

MAX_TERM_CHARS = 64
MAX_SHIFT_DAYS = 3660  # ten years: a shift beyond it is a typing mistake
COPIED_FIELDS = (
    "title", "position", "late_credit_pct", "counts", "max_attempts", "rate_burst", "rate_refill_s", "practice",
    "leaderboard", "time_limit_min", "submit_on_expiry", "allowed_networks", "exam_mode", "feedback_after_close",
)  # fmt: skip
DATE_FIELDS = ("opens_at", "due_at", "late_until")


def _require_instructor(session: Session, course: Course, actor: User) -> None:
    membership.require_course_role(session=session, course=course, user=actor, roles=(CourseRole.instructor,))


def offset_for(*, source: Course, shift: timedelta | None, first_due: datetime | None) -> timedelta:
    """Return the offset every date moves by: ``shift``, or what takes the earliest due date to ``first_due``."""
    if (shift is None) == (first_due is None):
        raise InvalidInput("give either a shift in days or the new first due date")
    if shift is not None:
        if abs(shift) > timedelta(days=MAX_SHIFT_DAYS):
            raise InvalidInput(f"a shift of more than {MAX_SHIFT_DAYS} days is not a next term")
        return shift
    assert first_due is not None
    dues = [as_utc(a.due_at) for a in source.assignments if a.due_at is not None]
    if not dues:
        raise InvalidInput(f"{source.title!r} has no due dates to move: give a shift in days instead")
    return as_utc(first_due) - min(dues)


def copy_course(
    *,
    session: Session,
    source: Course,
    slug: str,
    title: str,
    term: str,
    actor: User,
    shift: timedelta | None = None,
    first_due: datetime | None = None,
    with_staff: bool = False,
) -> Course:
    """Start a new course from ``source`` (see the module contract); return it."""
    _require_instructor(session, source, actor)
    if source.is_practice:
        raise InvalidInput("the practice course is the open catalogue: create a course instead of copying it")
    offset = offset_for(source=source, shift=shift, first_due=first_due)
    membership.check_new_slug(session=session, slug=slug)
    clean_title = membership.checked_text(title, "course title", membership.MAX_TITLE_CHARS)
    clean_term = term.strip()
    if len(clean_term) > MAX_TERM_CHARS or "\x00" in clean_term:
        raise InvalidInput(f"a term is at most {MAX_TERM_CHARS} characters of text, e.g. 'Spring 2027'")
    copy = Course(slug=slug, title=clean_title, term=clean_term, copied_from_id=source.id)
    try:
        with session.begin_nested():
            session.add(copy)
    except IntegrityError as exc:
        raise Conflict(f"a course called {slug!r} already exists: choose another slug") from exc
    session.flush()
    for old in source.assignments:
        new = Assignment(course_id=copy.id, is_published=False)
        session.add(new)
        for name in COPIED_FIELDS:
            setattr(new, name, getattr(old, name))
        for name in DATE_FIELDS:
            value = getattr(old, name)
            setattr(new, name, None if value is None else as_utc(value) + offset)
        new.items = [
            AssignmentItem(exercise_id=item.exercise_id, position=item.position, weight=item.weight)
            for item in old.items
        ]
    session.flush()
    session.refresh(copy)  # its assignments, as just made
    membership.enroll(session=session, course=copy, user=actor, role=CourseRole.instructor, actor=actor)
    if with_staff:
        staff = select(CourseMember).where(
            CourseMember.course_id == source.id,
            CourseMember.role.in_(membership.STAFF),
            CourseMember.user_id != actor.id,
        )
        for member in session.scalars(staff).all():
            membership.enroll(session=session, course=copy, user=member.user, role=member.role, actor=actor)
    copied = {"from": source.slug, "to": copy.slug, "shift_days": round(offset / timedelta(days=1), 2),
              "assignments": len(source.assignments), "with_staff": with_staff}  # fmt: skip
    for course_id in (source.id, copy.id):
        trail.record(
            session=session, action=Action.course_copy, actor=actor, course_id=course_id,
            target=f"course {copy.slug} from {source.slug}", after=copied,
        )  # fmt: skip
    session.flush()
    return copy


def archive(*, session: Session, course: Course, actor: User) -> Course:
    """Make ``course`` read-only for everyone (its instructors or an admin); again: nothing changes."""
    _require_instructor(session, course, actor)
    if course.is_practice:
        raise InvalidInput("the practice course is the open catalogue: it is never archived")
    if course.archived_at is None:
        course.archived_at = utcnow()
        course.invite_token = None  # nobody joins an archive
        trail.record(
            session=session, action=Action.course_archive, actor=actor, course_id=course.id,
            target=f"course {course.slug}", before={"archived": False}, after={"archived": True},
        )  # fmt: skip
        session.flush()
    return course


def unarchive(*, session: Session, course: Course, actor: User) -> Course:
    """Open an archived ``course`` again (admins only)."""
    if actor.role is not Role.admin:
        raise Forbidden("only an admin can unarchive a course")
    if course.archived_at is not None:
        course.archived_at = None
        trail.record(
            session=session, action=Action.course_unarchive, actor=actor, course_id=course.id,
            target=f"course {course.slug}", before={"archived": True}, after={"archived": False},
        )  # fmt: skip
        session.flush()
    return course
