"""A learner's drafts: the code (or quiz answers) they have not submitted, kept on the server as they work.

Contract:
- A draft is one row per learner, exercise and assignment (or practice: ``assignment_id`` None), never an attempt:
  nothing of it counts, reaches the gate or is graded until the learner submits it (or a timed assessment's end
  submits it for them, ``app.domain.courses.timing``).
- ``place(session=..., exercise=..., user=..., assignment_id=...)`` is where a draft of ``exercise`` lives for
  ``user``: practice for None; else the assignment must hold the exercise and ``user`` must belong to its course
  (``NotFound`` otherwise: a stranger learns nothing of the assignment).
- ``save(...)`` stores the code or the answers as a new revision: ``base_revision`` is the revision the learner's
  page started from (0 for none). A different stored revision is a ``Conflict`` that names it: another tab or
  device saved since, and silently overwriting it would lose work. Code is held to the submission's limits
  (``max_code_bytes``, no NUL); quiz answers are checked as an attempt's are (``check_answers``), empty allowed.
- ``discard(...)`` removes the draft (the learner went back to the starter); ``find`` reads one.
- ``ended_drafts`` is what staff may read: on a timed assessment, the drafts of learners whose time has ended.
- Functions take the session keyword-only and leave the commit to the caller.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import membership, timing
from app.domain.models import Assignment, CourseRole, Draft, Exercise, TimedAttempt, User, utcnow
from app.domain.submissions.quiz import quiz_of
from worker.bank.quiz.answers import check_answers
from worker.core import humane
from worker.core.errors import Conflict, Forbidden, InvalidInput, NotFound


def place(*, session: Session, exercise: Exercise, user: User, assignment_id: int | None) -> Assignment | None:
    """Return the assignment a draft of ``exercise`` by ``user`` belongs to (None: practice), or raise ``NotFound``.

    A learner in an exam (``timing.lockout``) has drafts only under it: anything else is ``Forbidden``.
    """
    timing.lockout(session=session, user=user, assignment_id=assignment_id, now=utcnow())
    if assignment_id is None:
        return None
    assignment = session.get(Assignment, assignment_id)
    holds = assignment is not None and any(item.exercise_id == exercise.id for item in assignment.items)
    if (
        assignment is None
        or not holds
        or not membership.course_role(session=session, course=assignment.course, user=user)
    ):
        raise NotFound(f"no assignment {assignment_id} with this exercise for you")
    return assignment


def find(*, session: Session, exercise: Exercise, user: User, assignment: Assignment | None) -> Draft | None:
    """Return ``user``'s draft of ``exercise`` under ``assignment`` (None: practice), if there is one."""
    return session.scalar(
        select(Draft).where(
            Draft.user_id == user.id,
            Draft.exercise_id == exercise.id,
            Draft.assignment_key == (assignment.id if assignment is not None else 0),
        )
    )


def _checked_code(code: str, max_code_bytes: int) -> str:
    size = len(code.encode("utf-8", errors="surrogatepass"))
    if size > max_code_bytes:
        raise InvalidInput(humane.code_too_large(size, max_code_bytes))
    if "\x00" in code:
        raise InvalidInput("the code contains a NUL character; remove it")
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("the code contains a lone surrogate character, which is not text; remove it") from None
    return code


def _checked_answers(exercise: Exercise, answers: dict[str, Any]) -> dict[str, Any]:
    version = exercise.current_version
    if version is None or version.kind != "quiz":
        raise InvalidInput(f"{exercise.slug} is a code exercise: its draft is code, not answers")
    if not answers:
        return {}
    return dict(check_answers(quiz_of(version), answers))


def save(
    *,
    session: Session,
    exercise: Exercise,
    user: User,
    assignment: Assignment | None,
    base_revision: int,
    code: str | None = None,
    answers: dict[str, Any] | None = None,
    max_code_bytes: int,
    client_ip: str | None = None,
) -> Draft:
    """Store a new revision of the draft (see the module contract); raise ``Conflict`` on a stale base.

    Under a timed assignment a learner saves only while their time runs, from its networks (``timing.refusal``):
    after the end their drafts are what the end submitted, or what staff read.
    """
    if assignment is not None:
        membership.require_open(assignment.course)
    if assignment is not None and timing.is_timed(assignment):
        role = membership.course_role(session=session, course=assignment.course, user=user)
        refused = (
            timing.refusal(session=session, assignment=assignment, user=user, now=utcnow(), client_ip=client_ip)
            if role is CourseRole.learner
            else None
        )
        if refused is not None:
            raise Forbidden(f"not saved: {refused}")
    version = exercise.current_version
    kind = version.kind if version is not None else "code"
    if (code is None) == (answers is None):
        raise InvalidInput("send the draft's code, or for a quiz its answers (one of them)")
    if kind == "code" and code is None:
        raise InvalidInput(f"{exercise.slug} is a code exercise: its draft is code, not answers")
    checked_code = _checked_code(code, max_code_bytes) if code is not None else None
    checked_answers = _checked_answers(exercise, answers) if answers is not None else None
    draft = find(session=session, exercise=exercise, user=user, assignment=assignment)
    current = draft.revision if draft is not None else 0
    if base_revision != current:
        raise Conflict(
            f"this draft was saved elsewhere since (revision {current}, your page started from revision "
            f"{base_revision}): another tab or device has newer work. Load it, or save yours over it"
        )
    if draft is None:
        draft = Draft(
            user_id=user.id, exercise_id=exercise.id, assignment_id=assignment.id if assignment else None,
            assignment_key=assignment.id if assignment else 0, revision=0,
        )  # fmt: skip
        session.add(draft)
    draft.code, draft.answers = checked_code, checked_answers
    draft.revision = current + 1
    draft.updated_at = utcnow()
    session.flush()
    return draft


def ended_drafts(*, session: Session, assignment: Assignment, now: datetime) -> list[tuple[Draft, TimedAttempt]]:
    """Return the drafts staff may read on ``assignment``: those of learners whose timed clock has ended.

    A draft is the learner's own while they work; on a timed assessment staff read it once that learner's time is
    over (``timing.staff_may_read_drafts``): what they left unsubmitted, or what the end submitted for them.
    """
    if not timing.is_timed(assignment):
        return []
    rows = session.execute(
        select(Draft, TimedAttempt)
        .join(
            TimedAttempt,
            (TimedAttempt.assignment_id == Draft.assignment_id) & (TimedAttempt.user_id == Draft.user_id),
        )
        .where(Draft.assignment_id == assignment.id)
        .order_by(Draft.user_id, Draft.exercise_id)
    )
    return [(d, a) for d, a in rows if timing.staff_may_read_drafts(attempt=a, now=now)]


def discard(*, session: Session, exercise: Exercise, user: User, assignment: Assignment | None) -> None:
    """Remove ``user``'s draft of ``exercise`` under ``assignment`` (back to the starter); nothing if none."""
    draft = find(session=session, exercise=exercise, user=user, assignment=assignment)
    if draft is not None:
        session.delete(draft)
        session.flush()
