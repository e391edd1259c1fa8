"""Staff grading against rubrics, of quiz text answers and of code: the queue, one grade, release, re-scoring.

Contract:
- What a grade is, its rubric and how released points enter a submission: ``app.domain.results.staff_grades``;
  grades are opened and released points land through ``app.domain.results.settle``.
- Who grades: the instructors and TAs of the course the attempt belongs to (its assignment's, or the practice
  course's), and admins (``app.domain.courses.policy.may_grade``). Anyone else gets ``NotFound``.
- ``queue``: an exercise's grades (or those of the work under an assignment), within the actor's ``WorkScope``
  (the courses they staff: an exercise's queue shows only their courses' work), oldest attempt first;
  ``next_ungraded`` the first ungraded one after ``after`` (or from the start), so a grader can
  skip one; ``counts`` how many are ungraded, graded, released.
- ``save``: the checked rubric item ids (each must be an item of the question in the exercise's current quiz:
  ``InvalidInput`` otherwise) and a comment (at most ``MAX_COMMENT_CHARS``). ``revision`` must be the one the
  grader loaded, else ``Conflict``: another grader saved in between, and the caller shows their version instead
  of silently overwriting it. Line comments (code only, at most ``MAX_LINE_COMMENTS``) name a line of the
  submission. Each save records who and when and bumps the revision; a released grade saved again lands at once.
- ``release``: every graded, unreleased grade of the exercise (or assignment) in the courses where the actor is
  instructor (``policy.work_scope`` with instructors only: TAs grade, never release) becomes the learner's
  (``released_at``) and lands; an exercise's release never reaches another course's work.
- Functions take keyword-only arguments, flush, and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, selectinload

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.courses import membership, policy
from app.domain.courses.policy import WorkScope
from app.domain.models import Assignment, Exercise, ManualGrade, Submission, User, in_archived_course, utcnow
from app.domain.results import settle
from app.domain.results.staff_grades import CODE, MAX_ID, rubric_for
from worker.core.errors import Conflict, InvalidInput, NotFound

MAX_COMMENT_CHARS = 4000
MAX_LINE_COMMENTS = 200


@dataclass(frozen=True)
class Counts:
    ungraded: int
    graded: int  # graded, not released yet
    released: int


def may_grade(*, session: Session, grade: ManualGrade, user: User) -> bool:
    """Say whether ``user`` may grade ``grade``: the staff of the course its attempt belongs to."""
    return policy.may_grade(session=session, user=user, work=grade)


def get_grade(*, session: Session, grade_id: int, user: User) -> ManualGrade:
    """Return grade ``grade_id`` if ``user`` may grade it; else ``NotFound``."""
    grade = session.get(ManualGrade, grade_id) if 0 < grade_id <= MAX_ID else None
    if grade is None or not may_grade(session=session, grade=grade, user=user):
        raise NotFound(f"no grade {grade_id} to grade")
    return grade


def _scoped(
    *, scope: WorkScope, exercise: Exercise | None = None, assignment: Assignment | None = None
) -> Select[ManualGrade]:
    stmt = select(ManualGrade).join(Submission, ManualGrade.submission_id == Submission.id).where(scope.submissions())
    if exercise is not None:
        stmt = stmt.where(ManualGrade.exercise_id == exercise.id)
    if assignment is not None:
        stmt = stmt.where(Submission.assignment_id == assignment.id)
    return stmt.order_by(Submission.created_at, ManualGrade.id)


def queue(
    *,
    session: Session,
    scope: WorkScope,
    exercise: Exercise | None = None,
    assignment: Assignment | None = None,
    limit: int = 500,
) -> list[ManualGrade]:
    """Return the grades of an exercise (or of the work under an assignment) in ``scope``, oldest attempt first."""
    stmt = _scoped(scope=scope, exercise=exercise, assignment=assignment).options(
        selectinload(ManualGrade.submission).selectinload(Submission.user)
    )
    return list(session.scalars(stmt.limit(limit)))


def next_ungraded(
    *,
    session: Session,
    scope: WorkScope,
    exercise: Exercise | None = None,
    assignment: Assignment | None = None,
    after: ManualGrade | None = None,
) -> ManualGrade | None:
    """Return the oldest ungraded grade of the exercise (or assignment), after ``after`` in the queue when given."""
    stmt = _scoped(scope=scope, exercise=exercise, assignment=assignment).where(ManualGrade.graded_at.is_(None))
    if after is not None:
        at, key = after.submission.created_at, after.id
        stmt = stmt.where((Submission.created_at > at) | ((Submission.created_at == at) & (ManualGrade.id > key)))
    return session.scalars(stmt.limit(1)).first()


def counts(
    *, session: Session, scope: WorkScope, exercise: Exercise | None = None, assignment: Assignment | None = None
) -> Counts:
    """Count the grades of an exercise (or assignment) in ``scope``: ungraded, graded but not released, released."""
    graded, released = ManualGrade.graded_at.is_not(None), ManualGrade.released_at.is_not(None)
    scoped = _scoped(scope=scope, exercise=exercise, assignment=assignment).order_by(None)
    rows = session.execute(scoped.with_only_columns(graded, released, func.count()).group_by(graded, released))
    tally = {(bool(g), bool(r)): int(n) for g, r, n in rows}
    return Counts(ungraded=tally.get((False, False), 0), graded=tally.get((True, False), 0),
                  released=tally.get((True, True), 0))  # fmt: skip


def _comment(text: str) -> str:
    comment = text.strip()
    if len(comment) > MAX_COMMENT_CHARS:
        raise InvalidInput(f"the comment is longer than {MAX_COMMENT_CHARS} characters; shorten it")
    if "\x00" in comment:
        raise InvalidInput("the comment holds a NUL character, which is not text")
    return comment


def _line_comments(grade: ManualGrade, lines: list[tuple[int, str]]) -> list[dict[str, object]]:
    if lines and grade.question != CODE:
        raise InvalidInput("line comments are for code submissions")
    if len(lines) > MAX_LINE_COMMENTS:
        raise InvalidInput(f"at most {MAX_LINE_COMMENTS} line comments")
    count = grade.submission.code.count("\n") + 1
    out: list[dict[str, object]] = []
    for line, text in sorted(lines):
        body = text.strip()
        if not body:
            continue
        if not 1 <= line <= count:
            raise InvalidInput(f"line {line} is not in the submission (it has {count} lines)")
        out.append({"line": line, "text": _comment(body)})
    return out


def save(
    *,
    session: Session,
    grade: ManualGrade,
    user: User,
    checked: list[str],
    comment: str,
    revision: int,
    line_comments: list[tuple[int, str]] | None = None,
) -> ManualGrade:
    """Record ``user``'s grade: the ``checked`` rubric items and a comment, if ``revision`` is still current."""
    if not may_grade(session=session, grade=grade, user=user):
        raise NotFound(f"no grade {grade.id} to grade")
    course = policy.course_of(session=session, work=grade)
    if course is not None:
        membership.require_open(course)
    exercise = session.get(Exercise, grade.exercise_id)
    assert exercise is not None  # the foreign key cascades
    question = rubric_for(exercise, grade.question)
    lines = _line_comments(grade, list(line_comments or []))
    known = [r.id for r in question.rubric_items]
    unknown = sorted(set(checked) - set(known))
    if unknown:
        raise InvalidInput(f"no rubric item {', '.join(map(repr, unknown))} in question {grade.question!r}")
    text = _comment(comment)
    before = {"points": grade.points, "checked": list(grade.checked or [])} if grade.graded_at is not None else None
    if revision != grade.revision:
        who = grade.graded_by.email if grade.graded_by else "someone"
        raise Conflict(f"{who} saved this grade while you were grading it: look at their grade, then save again")
    grade.checked = [i for i in known if i in set(checked)]
    grade.comment = text
    grade.line_comments = lines
    grade.points = question.score(grade.checked)
    grade.max_points = question.points
    grade.graded_by_id, grade.graded_at = user.id, utcnow()
    grade.revision += 1
    session.flush()
    trail.record(
        session=session, action=Action.manual_grade_save, actor=user, course_id=course.id if course else None,
        subject_id=grade.submission.user_id, target=f"submission {grade.submission_id}, {grade.question}",
        before=before,
        after={"points": grade.points, "checked": grade.checked, "released": grade.released_at is not None},
    )  # fmt: skip
    if grade.released_at is not None:
        settle.staff_grades_changed(session=session, submissions=[grade.submission])
    return grade


def may_release(*, session: Session, user: User, assignment: Assignment) -> bool:
    """Say whether ``user`` may release the grades of ``assignment``: its course's instructors."""
    return policy.may_release(session=session, user=user, work=assignment)


def release(
    *, session: Session, user: User, exercise: Exercise | None = None, assignment: Assignment | None = None
) -> int:
    """Release every graded, unreleased grade of the exercise (or assignment) in the courses ``user`` instructs."""
    if assignment is not None and not may_release(session=session, user=user, assignment=assignment):
        raise NotFound("no grades here that you may release")
    if assignment is not None:
        membership.require_open(assignment.course)
    scope = policy.work_scope(session=session, user=user, roles=policy.INSTRUCTORS)
    stmt = _scoped(scope=scope, exercise=exercise, assignment=assignment)
    ready = stmt.where(ManualGrade.graded_at.is_not(None), ManualGrade.released_at.is_(None))
    # An exercise's release leaves archived courses' grades as they were: nothing changes there.
    ready = ready.where(
        ManualGrade.submission_id.not_in(select(Submission.id).where(in_archived_course(Submission.assignment_id)))
    )
    chosen = list(session.scalars(ready))
    now = utcnow()
    for grade in chosen:
        grade.released_at = now
    session.flush()
    for grade in chosen:
        course = policy.course_of(session=session, work=grade)
        trail.record(
            session=session, action=Action.manual_grade_release, actor=user, course_id=course.id if course else None,
            subject_id=grade.submission.user_id, target=f"submission {grade.submission_id}, {grade.question}",
            after={"points": grade.points, "max_points": grade.max_points},
        )  # fmt: skip
    found = (session.get(Submission, submission_id) for submission_id in sorted({g.submission_id for g in chosen}))
    settle.staff_grades_changed(session=session, submissions=[s for s in found if s is not None])
    return len(chosen)
