"""Who may see and act on learners' work: the one place the platform decides it, per course.

Contract:
- Work belongs to one course: a submission (with its staff grades and regrade requests) to its assignment's course,
  or to the practice course when it was made outside any assignment; an assignment to its course; a similarity run
  to its assignment's course, or to the practice course for an exercise's run (it compares practice work).
- Staff rights are per course: ``staff_role`` is ``membership.course_role`` when it is instructor or TA. An admin is
  instructor everywhere; anyone else holds a staff role only where a ``CourseMember`` row says so, the practice
  course included (its staff list). The site instructor role alone authors the bank and creates courses
  (``may_author``) and gives no course role.
- ``may_view_work``: a submission to its learner or its course's staff; an assignment, a course or a run to the
  staff of its course. ``may_grade``: the course's instructors and TAs. ``may_release``: its instructors only.
- ``assignment_role``: the role a user sees an assignment with: a member of its course, a published one only
  unless they are its staff; ``None`` for anyone else (the assignment pages and API, its leaderboards).
- ``may_name_learners``: who sees the people behind an assignment's leaderboard rows (the staff of its course);
  its learners see pseudonyms only (``app.domain.courses.leaderboard``).
- ``work_scope(user, roles=...)``: the courses whose work ``user`` sees (``roles``: which of their course roles count;
  instructors and TAs by default, instructors alone for releasing), as a ``WorkScope`` whose ``over(column)`` is a
  SQL condition on a column holding an assignment id (``None``: practice work). Exercise-level views (an exercise's
  submissions, grading queue and release, insights, similarity runs, a regrade) narrow to it; an admin's is
  everything.
- Callers turn a refusal into ``NotFound`` (an outsider may not learn the work exists); ``docs/api.md`` holds the
  rule table.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import ColumnElement, false, or_, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.domain.courses import membership
from app.domain.models import (
    Assignment,
    Course,
    CourseMember,
    CourseRole,
    ManualGrade,
    RegradeRequest,
    Role,
    SimilarityRun,
    Submission,
    User,
)

Work = Submission | ManualGrade | RegradeRequest | SimilarityRun | Assignment | Course
INSTRUCTORS = frozenset({CourseRole.instructor})


def may_author(user: User) -> bool:
    """Say whether ``user`` authors the bank and creates courses (site instructors and admins)."""
    return user.role in (Role.instructor, Role.admin)


def course_of(*, session: Session, work: Work) -> Course | None:
    """Return the course ``work`` belongs to (``None``: practice work while there is no practice course)."""
    if isinstance(work, Course):
        return work
    if isinstance(work, Assignment):
        return work.course
    if isinstance(work, ManualGrade):
        work = work.submission
    assignment_id = work.assignment_id
    if assignment_id is None:
        return membership.find_practice_course(session=session)
    assignment = session.get(Assignment, assignment_id)
    return assignment.course if assignment is not None else None


def staff_role(*, session: Session, user: User, course: Course | None) -> CourseRole | None:
    """Return ``user``'s staff role in ``course`` (instructor or TA), or ``None``."""
    if user.role is Role.admin:
        return CourseRole.instructor
    if course is None:
        return None
    role = membership.course_role(session=session, course=course, user=user)
    return role if membership.is_staff(role) else None


def _holds(session: Session, user: User, work: Work, roles: Collection[CourseRole]) -> bool:
    return staff_role(session=session, user=user, course=course_of(session=session, work=work)) in roles


def may_view_work(*, session: Session, user: User, work: Work) -> bool:
    """Say whether ``user`` may see ``work``: its learner (a submission), or staff of its course."""
    if isinstance(work, Submission | RegradeRequest) and work.user_id == user.id:
        return True
    return _holds(session, user, work, membership.STAFF)


def may_grade(*, session: Session, user: User, work: Work) -> bool:
    """Say whether ``user`` may grade or answer for ``work``: the instructors and TAs of its course."""
    return _holds(session, user, work, membership.STAFF)


def may_release(*, session: Session, user: User, work: Work) -> bool:
    """Say whether ``user`` may release staff grades of ``work``'s course: its instructors."""
    return _holds(session, user, work, INSTRUCTORS)


def assignment_role(*, session: Session, user: User, assignment: Assignment) -> CourseRole | None:
    """Return ``user``'s role in ``assignment``'s course if they may see it (published, or its staff), else None."""
    role = membership.course_role(session=session, course=assignment.course, user=user)
    if role is None or not (assignment.is_published or membership.is_staff(role)):
        return None
    return role


def may_name_learners(*, session: Session, user: User, work: Work) -> bool:
    """Say whether ``user`` sees learners' names on ``work``'s leaderboards: the instructors and TAs of its course."""
    return _holds(session, user, work, membership.STAFF)


@dataclass(frozen=True)
class WorkScope:
    """The courses whose learners' work one actor sees: every course (``course_ids is None``) or those listed."""

    course_ids: frozenset[int] | None
    practice: bool  # practice work (outside any assignment): the practice course is among them

    def over(self, assignment_id: InstrumentedAttribute[int | None]) -> ColumnElement[bool]:
        """Return the SQL condition that a row whose assignment is ``assignment_id`` lies in this scope."""
        if self.course_ids is None:
            return true()
        parts: list[ColumnElement[bool]] = []
        if self.course_ids:
            parts.append(assignment_id.in_(select(Assignment.id).where(Assignment.course_id.in_(self.course_ids))))
        if self.practice:
            parts.append(assignment_id.is_(None))
        return or_(*parts) if parts else false()

    def covers(self, course_id: int | None) -> bool:
        """Say whether work of the course ``course_id`` (None: practice work) lies in this scope."""
        if self.course_ids is None:
            return True
        return self.practice if course_id is None else course_id in self.course_ids

    def submissions(self) -> ColumnElement[bool]:
        """Return the SQL condition that a submission lies in this scope."""
        return self.over(Submission.assignment_id)


EVERYTHING = WorkScope(course_ids=None, practice=True)


def work_scope(*, session: Session, user: User, roles: Collection[CourseRole] = membership.STAFF) -> WorkScope:
    """Return the courses where ``user`` holds one of ``roles`` (staff roles), as a scope for lists of work."""
    if user.role is Role.admin:
        return EVERYTHING
    wanted = [r for r in roles if membership.is_staff(r)]
    held = session.execute(
        select(CourseMember.course_id, Course.is_practice)
        .join(Course, Course.id == CourseMember.course_id)
        .where(CourseMember.user_id == user.id, CourseMember.role.in_(wanted))
    ).all()  # one query: the courses, and whether the practice course is among them
    return WorkScope(course_ids=frozenset(c for c, _ in held), practice=any(p for _, p in held))


def staff_courses(*, session: Session, user: User) -> WorkScope:
    """Return the courses ``user`` staffs (instructor or TA): the scope of their staff lists."""
    return work_scope(session=session, user=user)
