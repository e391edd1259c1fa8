"""Grade settled submissions again, against the current or a chosen version, keeping every earlier result.

Contract:
- ``start_regrade`` archives each settled (graded or error) submission's result as a ``GradingRecord``, then
  resets it to ``queued`` against the target version (tests cleared, attempts back to 0) and returns the
  ``Regrade`` plus the ``(id, queue)`` pairs to dispatch. The caller commits *then* dispatches, exactly as for
  a new submission; ``app.jobs.tasks.grade_submission`` then claims and grades them like any queued row, so its
  idempotency is unchanged. Queued or running submissions are skipped: they are being graded already.
- Moving a submission to the target version keeps the models' rule that a grade refers to the tests that
  produced it; the record keeps the old version.
- ``progress`` counts the regrade's submissions that have settled again.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from app.domain.models import (
    Assignment,
    Exercise,
    ExerciseVersion,
    GradingRecord,
    Regrade,
    Submission,
    SubmissionStatus,
    User,
    in_archived_course,
)
from app.domain.submissions.lifecycle import of_exercise
from worker.core.errors import Conflict, InvalidInput

SETTLED = (SubmissionStatus.graded, SubmissionStatus.error)


@dataclass
class RegradeProgress:
    total: int
    done: int
    passed: int

    @property
    def finished(self) -> bool:
        return self.done >= self.total


def archive(*, session: Session, submission: Submission, regrade: Regrade | None) -> GradingRecord:
    """Copy the submission's current result into its history."""
    record = GradingRecord(
        submission_id=submission.id,
        exercise_version_id=submission.exercise_version_id,
        regrade_id=regrade.id if regrade else None,
        status=submission.status.value,
        verdict=submission.verdict.value if submission.verdict else None,
        score=submission.score,
        max_score=submission.max_score,
        tests=[
            {
                "name": t.name,
                "outcome": t.outcome,
                "message": t.message,
                "details": t.details,
                "points": t.points,
                "max_points": t.max_points,
            }
            for t in submission.tests
        ],
        message=submission.message,
        runtime_ms=submission.runtime_ms,
        graded_at=submission.finished_at,
    )
    session.add(record)
    return record


def _requeue(submission: Submission, target: ExerciseVersion) -> None:
    submission.tests.clear()
    submission.exercise_version_id = target.id
    submission.exercise_version = target
    submission.status = SubmissionStatus.queued
    submission.verdict = None
    submission.score = None
    submission.max_score = target.max_score
    submission.stdout = submission.stderr = submission.message = ""
    submission.runtime_ms = None
    submission.attempts = 0
    submission.started_at = None
    submission.finished_at = None


def start_regrade(
    *,
    session: Session,
    exercise: Exercise,
    target: ExerciseVersion,
    submissions: list[Submission],
    user: User | None,
) -> tuple[Regrade, list[tuple[str, str]]]:
    """Archive and requeue the settled ``submissions`` against ``target``; return the regrade and what to dispatch."""
    if target.exercise_id != exercise.id:
        raise InvalidInput("the target version belongs to another exercise")
    if target.kind != "code":
        raise InvalidInput(f"version {target.number} is not a code exercise")
    chosen = [s for s in submissions if s.status in SETTLED and s.exercise_version.exercise_id == exercise.id]
    frozen = _frozen(session, chosen)
    if chosen and len(frozen) == len(chosen):
        raise Conflict("these submissions belong to an archived course: its grades no longer change")
    chosen = [s for s in chosen if s.id not in frozen]  # an archived course's work keeps its grades
    if not chosen:
        raise InvalidInput("no graded submissions to regrade (queued and running ones are being graded already)")
    regrade = Regrade(
        exercise_id=exercise.id, target_version_id=target.id, requested_by_id=user.id if user else None,
        count=len(chosen),
    )  # fmt: skip
    session.add(regrade)
    session.flush()
    for submission in chosen:
        archive(session=session, submission=submission, regrade=regrade)
        _requeue(submission, target)
    session.flush()
    return regrade, [(s.id, target.queue) for s in chosen]


def _frozen(session: Session, submissions: list[Submission]) -> set[str]:
    ids = {s.assignment_id for s in submissions if s.assignment_id is not None}
    if not ids:
        return set()
    archived = set(
        session.scalars(select(Assignment.id).where(Assignment.id.in_(ids), in_archived_course(Assignment.id)))
    )
    return {s.id for s in submissions if s.assignment_id in archived}


def settled_submissions(
    *, session: Session, exercise: Exercise, within: ColumnElement[bool] | None = None
) -> list[Submission]:
    """Return every settled submission to any version of ``exercise`` (``within``: those that meet it)."""
    stmt = of_exercise(exercise).where(Submission.status.in_(SETTLED)).order_by(Submission.created_at)
    if within is not None:
        stmt = stmt.where(within)
    return list(session.scalars(stmt))


def progress(*, session: Session, regrade: Regrade) -> RegradeProgress:
    """Count the regrade's submissions that are settled again, and how many of them passed."""
    ids = select(GradingRecord.submission_id).where(GradingRecord.regrade_id == regrade.id)
    settled = (
        select(Submission.verdict, func.count())
        .where(Submission.id.in_(ids), Submission.status.in_(SETTLED))
        .group_by(Submission.verdict)
    )
    counts = {verdict: n for verdict, n in session.execute(settled)}
    return RegradeProgress(
        total=regrade.count, done=sum(counts.values()), passed=sum(n for v, n in counts.items() if v == "passed")
    )


def history(*, session: Session, submission: Submission) -> list[GradingRecord]:
    """Return the submission's earlier results, oldest first."""
    stmt = select(GradingRecord).where(GradingRecord.submission_id == submission.id).order_by(GradingRecord.id)
    return list(session.scalars(stmt))
