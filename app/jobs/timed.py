"""The end of a learner's timed assessment: their drafts submitted once as final attempts, or kept for staff.

Contract: ``close_due(dispatcher=..., settings=...)`` closes every attempt whose end has passed
(``app.domain.courses.timing.due_for_close``), each in its own transaction, and returns how many it closed. An
attempt is claimed by setting its ``closed_at`` where it is still NULL, so two sweepers (or a restart halfway)
never close one twice: the drafts are submitted once. With the assignment's ``submit_on_expiry``, each item's draft
becomes an attempt under the assignment, made at the learner's end: code is stored queued and sent to grading after
the commit; quiz answers are graded at once (``settle.quiz_answered``). A draft equal to the learner's newest
submission of that item is not submitted again, and an item with no attempts left takes none. Without it, the
drafts stay as they are, for staff to read (``timing.staff_may_read_drafts``). Every sweep of every grading process
runs it (``app.jobs.sweeper``), so the end is handled by whichever process is alive, after any restart.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.domain.courses import assignments, drafts, timing
from app.domain.dispatcher import Dispatcher
from app.domain.models import Assignment, Submission, TimedAttempt, User, utcnow
from app.domain.platform.db import session_scope
from app.domain.results import settle
from app.domain.submissions.lifecycle import create_submission
from app.domain.submissions.quiz import answer_quiz
from app.settings import Settings
from worker.core.errors import GpulabError

log = logging.getLogger(__name__)
JUST_BEFORE = timedelta(milliseconds=1)  # the gate as it stood in the learner's last moment


def _newest_code(session: Session, attempt: TimedAttempt, exercise_id: int) -> str | None:
    from app.domain.models import ExerciseVersion

    return session.scalar(
        select(Submission.code)
        .join(ExerciseVersion, ExerciseVersion.id == Submission.exercise_version_id)
        .where(
            Submission.user_id == attempt.user_id,
            Submission.assignment_id == attempt.assignment_id,
            ExerciseVersion.exercise_id == exercise_id,
        )
        .order_by(Submission.created_at.desc())
        .limit(1)
    )


def _submit_drafts(session: Session, attempt: TimedAttempt, settings: Settings) -> list[Submission]:
    """Turn the learner's drafts of ``attempt``'s assignment into final attempts; return the code ones to grade."""
    assignment = session.get(Assignment, attempt.assignment_id)
    user = session.get(User, attempt.user_id)
    if assignment is None or user is None:
        return []
    made: dict[str, str] = {}
    queued: list[Submission] = []
    last_moment = attempt.ends_at - JUST_BEFORE
    for item in assignment.items:
        exercise = item.exercise
        draft = drafts.find(session=session, exercise=exercise, user=user, assignment=assignment)
        if draft is None:
            continue
        gate = assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=last_moment)
        if gate.attempts_left == 0:
            continue  # every attempt used: the draft stays a draft, for staff
        try:
            if draft.code is not None:
                if not draft.code.strip() or draft.code == _newest_code(session, attempt, exercise.id):
                    continue
                submission = create_submission(
                    session=session, user=user, exercise=exercise, code=draft.code,
                    max_bytes=settings.max_code_bytes, assignment_id=assignment.id,
                )  # fmt: skip
                submission.created_at = last_moment  # made in the learner's time, as its credit says
                queued.append(submission)
            elif draft.answers:
                submission, result = answer_quiz(
                    session=session, user=user, exercise=exercise, answers=draft.answers, assignment_id=assignment.id,
                )  # fmt: skip
                submission.created_at = last_moment
                settle.quiz_answered(
                    session=session, submission=submission, exercise=exercise, results=result.questions
                )
            else:
                continue
        except GpulabError as exc:  # a draft the grader would refuse (too large, empty): kept, and said in the log
            log.warning("timed attempt %s: the draft of %s was not submitted: %s", attempt.id, exercise.slug, exc)
            continue
        session.flush()
        made[exercise.slug] = submission.id
    attempt.submitted = made
    return queued


def close_attempt(*, session: Session, attempt_id: int, settings: Settings) -> list[tuple[str, str]] | None:
    """Close one attempt if nobody has; return the submissions to send (id, queue) after the commit, or None.

    None: another sweeper closed it first (the claim is an UPDATE ... WHERE closed_at IS NULL). The caller commits.
    """
    claimed = session.execute(
        update(TimedAttempt)
        .where(TimedAttempt.id == attempt_id, TimedAttempt.closed_at.is_(None))
        .values(closed_at=utcnow())
    )
    if not getattr(claimed, "rowcount", 0):
        return None
    attempt = session.get(TimedAttempt, attempt_id)
    assignment = session.get(Assignment, attempt.assignment_id) if attempt is not None else None
    queued: list[Submission] = []
    # An archived course takes no more submissions: the drafts stay, for its staff to read.
    if (
        attempt is not None
        and assignment is not None
        and assignment.submit_on_expiry
        and not assignment.course.archived_at
    ):
        queued = _submit_drafts(session, attempt, settings)
    session.flush()
    return [(s.id, s.exercise_version.queue) for s in queued]


def close_one(*, attempt_id: int, dispatcher: Dispatcher, settings: Settings) -> bool:
    """Close one attempt in a transaction of its own and send what it made; return whether this call closed it."""
    with session_scope() as session:
        ids = close_attempt(session=session, attempt_id=attempt_id, settings=settings)
    if ids is None:
        return False
    for submission_id, queue in ids:  # after the commit, as every submission is sent
        try:
            dispatcher.dispatch(submission_id, queue)
        except Exception:  # committed and queued: the sweeper sends it again
            log.exception("could not dispatch submission %s made at a timed end", submission_id)
    return True


def close_due(*, dispatcher: Dispatcher, settings: Settings) -> int:
    """Close every timed attempt whose end has passed; return how many this call closed."""
    with session_scope() as session:
        due = timing.due_for_close(session=session, now=utcnow())
    return sum(close_one(attempt_id=i, dispatcher=dispatcher, settings=settings) for i in due)
