"""Where a counted result lands: the one place that opens staff grades, queues the LMS score and publishes news.

Contract: every change to what a learner's work counts for goes through one function here, in the caller's
transaction (the caller commits; nothing here commits):
- ``graded``: a grading job stored its verdict: the code rubric's staff grade is opened (or a released one
  applied again, after a regrade).
- ``quiz_answered``: a quiz attempt was stored: a staff grade is opened per pending text answer.
- ``staff_grades_changed``: staff released grades, saved a released one again, or a new version re-scored them:
  their points go into the submissions (``staff_grades.apply``).
- ``version_changed``: a new current version of an exercise: its grades are re-scored (``staff_grades.rescore``,
  which refuses a version that drops what a grade uses) and the changed ones land as above.
- ``override``/``revert_override``: a gradebook override (from the gradebook or a regrade request's adjustment)
  and its revert: the learner's cell changed without a new submission.
Each queues the learner's counted score on the assignment for every LMS link (``app.domain.lti.scores``; practice
work posts nothing) and publishes each changed submission's news once the transaction commits, so a live page
shows it (``app.domain.platform.news.publish_after_commit``).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from app.domain.courses import gradebook
from app.domain.lti.scores import queue_learner_score, queue_score
from app.domain.models import AssignmentItem, Course, Exercise, ExerciseVersion, GradeOverride, Submission, User
from app.domain.platform import news
from app.domain.results import staff_grades
from worker.bank.quiz.grading import QuestionResult


def _land(*, session: Session, submission: Submission) -> None:
    queue_score(session=session, submission=submission)
    news.publish_after_commit(session, submission.id)


def graded(*, session: Session, submission: Submission) -> None:
    """Land a grading's stored verdict: open the staff grade its rubric asks for, queue the LMS score."""
    staff_grades.open_code_grade(session=session, submission=submission)
    _land(session=session, submission=submission)


def quiz_answered(
    *, session: Session, submission: Submission, exercise: Exercise, results: list[QuestionResult]
) -> None:
    """Land a stored quiz attempt: open a staff grade per pending answer, queue the LMS score."""
    staff_grades.open_grades(session=session, submission=submission, exercise=exercise, results=results)
    session.flush()
    _land(session=session, submission=submission)


def staff_grades_changed(*, session: Session, submissions: Iterable[Submission]) -> None:
    """Land released staff grades: put their points into ``submissions``, queue each learner's LMS score."""
    for submission in submissions:
        staff_grades.apply(session=session, submission=submission)
        _land(session=session, submission=submission)


def version_changed(*, session: Session, exercise: Exercise, version: ExerciseVersion) -> None:
    """Re-score ``exercise``'s staff grades for its new current ``version`` and land the changed ones."""
    staff_grades_changed(
        session=session, submissions=staff_grades.rescore(session=session, exercise=exercise, version=version)
    )


def override(
    *,
    session: Session,
    course: Course,
    item: AssignmentItem,
    learner: User,
    score_pct: float,
    comment: str,
    actor: User,
) -> GradeOverride:
    """Override ``learner``'s cell of ``item`` (``gradebook.override``'s rules) and queue their LMS score."""
    row = gradebook.override(
        session=session, course=course, item=item, learner=learner, score_pct=score_pct, comment=comment, actor=actor
    )
    queue_learner_score(session=session, assignment_id=item.assignment_id, user_id=learner.id)
    return row


def revert_override(*, session: Session, override_id: int, actor: User) -> GradeOverride:
    """Revert the override ``override_id`` (``gradebook.revert_override``'s rules) and queue the LMS score."""
    row = gradebook.revert_override(session=session, override_id=override_id, actor=actor)
    item = session.get(AssignmentItem, row.item_id)
    if item is not None:  # the foreign key cascades: always there
        queue_learner_score(session=session, assignment_id=item.assignment_id, user_id=row.user_id)
    return row
