"""``/api/exercises``: the published exercises, their safe details, and submitting code to one.

Contract: everything needs a login. A submission is committed before it is dispatched, so a crash between
the two leaves a queued row that ``recover_unfinished`` picks up at the next start, never a lost grade.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter

from app.deps import CurrentUser, DispatcherDep, ExerciseDep, InstructorDep, SessionDep, SettingsDep
from app.exercises import list_published
from app.schemas import ExerciseDetail, ExerciseSummary, StaffSubmissionOut, SubmissionCreated, SubmissionIn
from app.submissions import create_submission, list_for_exercise

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/exercises", tags=["exercises"])


@router.get("")
def list_exercises(session: SessionDep, _user: CurrentUser) -> list[ExerciseSummary]:
    """List the published exercises."""
    return [ExerciseSummary.of(e) for e in list_published(session=session)]


@router.get("/{slug}")
def exercise_detail(exercise: ExerciseDep) -> ExerciseDetail:
    """Return one exercise: prompt, starter code and the visible example tests."""
    return ExerciseDetail.of(exercise)


@router.post("/{slug}/submissions", status_code=202)
def submit(
    body: SubmissionIn,
    exercise: ExerciseDep,
    user: CurrentUser,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
) -> SubmissionCreated:
    """Store the code as a queued submission and hand it to grading."""
    submission = create_submission(
        session=session, user=user, exercise=exercise, code=body.code, max_bytes=settings.max_code_bytes
    )
    queue = submission.exercise_version.queue
    session.commit()
    try:
        dispatcher.dispatch(submission.id, queue)
    except Exception:
        # The row is committed and queued: recovery at the next start re-dispatches it, so accept it anyway.
        log.exception("could not dispatch submission %s to %s; it stays queued", submission.id, queue)
    return SubmissionCreated(id=submission.id, status=submission.status)


@router.get("/{slug}/submissions")
def exercise_submissions(_staff: InstructorDep, exercise: ExerciseDep, session: SessionDep) -> list[StaffSubmissionOut]:
    """List every learner's submissions to this exercise, newest first (instructors and admins)."""
    return [StaffSubmissionOut.of(s) for s in list_for_exercise(session=session, exercise=exercise)]
