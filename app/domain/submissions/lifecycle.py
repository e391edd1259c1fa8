"""Submissions through their life: create (before anything runs), claim for grading, record, recover.

Contract:
- ``create_submission`` only adds the row; the caller commits, then dispatches (never the reverse). Code that
  cannot be an answer (empty, only blanks, or the starter code unchanged) is ``InvalidInput``: it costs no attempt.
  The row keeps the learner's variant of the exercise (``app.domain.catalog.variants``), which grading reads back.
- ``claim`` is the idempotency gate of every grading task: it moves a submission to ``running`` with one
  conditional UPDATE, so of two deliveries of the same id only one grades. A ``running`` row whose lease
  has expired (no heartbeat for ``lease_s``: its worker died) can be claimed again. The claimed row's new
  ``attempts`` value is the *fencing token* of that grading.
- While the grading runs its holder renews ``heartbeat_at`` (``app.domain.leases``); ``held`` re-reads the row
  (locked on PostgreSQL) for the holder, so a grading whose lease was taken over never writes its result:
  exactly one grading is ever recorded.
- ``record_outcome`` writes the verdict and per-test rows; ``record_platform_failure`` counts a failed
  attempt and either requeues (attempts left) or settles the submission as ``error``/``internal_error``.
- ``of_exercise`` is the one query for "submissions of an exercise"; listings add their own filters and order.
- ``unfinished`` (start-up recovery) and ``app.jobs.sweeper`` decide what to send again.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, or_, select, update
from sqlalchemy.orm import Session

from app.domain import leases
from app.domain.catalog.specs import spec_of
from app.domain.catalog.variants import params_for
from app.domain.models import Exercise, ExerciseVersion, Submission, SubmissionStatus, TestResult, User, utcnow
from worker.core import humane
from worker.core.errors import InvalidInput, PayloadTooLarge
from worker.core.outcome import GradeOutcome, Verdict

OUTPUT_LIMIT_CHARS = 64 * 1024


def create_submission(
    *,
    session: Session,
    user: User | None,
    exercise: Exercise,
    code: str,
    max_bytes: int,
    assignment_id: int | None = None,
) -> Submission:
    """Validate ``code`` and add a queued submission against the exercise's current version.

    ``assignment_id``: the assignment it is made under (the caller has gated it), or None for practice.
    """
    if (size := len(code.encode("utf-8", errors="surrogatepass"))) > max_bytes:
        raise PayloadTooLarge(humane.code_too_large(size, max_bytes))
    if "\x00" in code:
        raise InvalidInput("code contains a NUL character")
    if not code.strip():
        raise InvalidInput("the code is empty: write your solution in the editor, then submit (no attempt was used)")
    try:
        code.encode("utf-8")  # a lone surrogate (a JSON "\ud800" escape) has no UTF-8 form for PostgreSQL
    except UnicodeEncodeError:
        raise InvalidInput("code holds a lone UTF-16 surrogate, which is not text") from None
    version = exercise.current_version
    if version is None:
        raise InvalidInput(f"exercise {exercise.slug!r} has no version to grade against")
    if version.kind != "code":
        raise InvalidInput(f"exercise {exercise.slug!r} is a {version.kind}, not a code exercise")
    spec = spec_of(version)
    params = params_for(spec=spec, user=user, assignment_id=assignment_id)
    starter = spec.rendered("starter.py", params) if "starter.py" in spec.files else ""
    if starter.strip() and code.strip() == starter.strip():
        raise InvalidInput("the code is the starter code, unchanged: write your solution first (no attempt was used)")
    submission = Submission(
        user_id=user.id if user else None,
        exercise_version_id=version.id,
        assignment_id=assignment_id,
        code=code,
        params=params or None,
        status=SubmissionStatus.queued,
        max_score=version.max_score,
    )
    session.add(submission)
    session.flush()
    return submission


def claim(*, session: Session, submission_id: str, lease_s: float, max_attempts: int = 1_000) -> Submission | None:
    """Move the submission to ``running`` if it is queued or its lease expired; return it, or None to skip.

    A submission that already had ``max_attempts`` tries is not claimed (the sweeper settles it as ``error``).
    """
    now = utcnow()
    result = session.execute(
        update(Submission)
        .where(
            Submission.id == submission_id,
            Submission.attempts < max_attempts,
            or_(Submission.status == SubmissionStatus.queued, leases.expired(Submission, lease_s=lease_s, now=now)),
        )
        .values(status=SubmissionStatus.running, started_at=now, heartbeat_at=now, attempts=Submission.attempts + 1)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    session.expire_all()
    return session.get(Submission, submission_id)


def give_back(*, session: Session, submission_id: str, attempt: int) -> bool:
    """Undo grading ``attempt``'s claim (queued again, the try not counted); return whether it still held it.

    For a grading host that cannot grade at all (its GPU failed): the job goes to another host, costing nothing.
    """
    result = session.execute(
        update(Submission)
        .where(
            Submission.id == submission_id,
            Submission.status == SubmissionStatus.running,
            Submission.attempts == attempt,
        )
        .values(status=SubmissionStatus.queued, started_at=None, heartbeat_at=None, attempts=attempt - 1)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def held(*, session: Session, submission_id: str, attempt: int) -> Submission | None:
    """Return the submission locked for writing if grading ``attempt`` still holds it, else None."""
    stmt = (
        select(Submission)
        .where(
            Submission.id == submission_id,
            Submission.status == SubmissionStatus.running,
            Submission.attempts == attempt,
        )
        .with_for_update()  # PostgreSQL: a claim that takes the row over waits for this transaction (or wins first)
        .execution_options(populate_existing=True)
    )
    return session.scalar(stmt)


def _clip(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT_CHARS:
        return text
    return text[:OUTPUT_LIMIT_CHARS] + "\n… (truncated)"


def record_outcome(*, session: Session, submission: Submission, outcome: GradeOutcome) -> None:
    """Store a learner-facing outcome (any verdict but ``internal_error``) and mark the submission graded."""
    submission.tests.clear()
    session.flush()
    for position, test in enumerate(outcome.tests):
        submission.tests.append(
            TestResult(
                position=position,
                name=test.name,
                outcome=test.outcome.value,
                message=_clip(test.message),
                details=_clip(test.details),
                points=test.points,
                max_points=test.max_points,
            )
        )
    submission.verdict = outcome.verdict
    submission.status = SubmissionStatus.graded
    submission.score = outcome.score
    submission.max_score = outcome.max_score
    submission.stdout = _clip(outcome.stdout)
    submission.stderr = _clip(outcome.stderr)
    submission.message = outcome.message
    submission.device = outcome.device
    submission.sandbox = outcome.sandbox
    submission.runtime_ms = outcome.runtime_ms
    submission.measurements = list(outcome.measurements) or None
    submission.finished_at = utcnow()


def record_platform_failure(*, session: Session, submission: Submission, message: str, max_attempts: int) -> bool:
    """Count a failed attempt of ours; return True if the submission was requeued for another try."""
    if submission.attempts < max_attempts:
        submission.status = SubmissionStatus.queued
        submission.started_at = None
        submission.heartbeat_at = None
        submission.dispatched_at = utcnow()  # the grading task itself tries again; the sweeper need not
        submission.message = f"retrying after a platform error: {message}"
        return True
    submission.status = SubmissionStatus.error
    submission.verdict = Verdict.internal_error
    submission.score = None
    submission.message = message
    submission.finished_at = utcnow()
    return False


def unfinished(*, session: Session, lease_s: float, now: datetime | None = None) -> list[Submission]:
    """Return submissions to dispatch again at start-up: queued ones and running ones whose lease expired."""
    now = now or utcnow()
    stmt = (
        select(Submission)
        .where(or_(Submission.status == SubmissionStatus.queued, leases.expired(Submission, lease_s=lease_s, now=now)))
        .order_by(Submission.created_at)
    )
    return list(session.scalars(stmt))


def get_for_user(*, session: Session, submission_id: str, user: User) -> Submission | None:
    """Return the submission if it is ``user``'s own (who else may see it is ``app.domain.courses.policy``'s)."""
    submission = session.get(Submission, submission_id)
    if submission is None or submission.user_id != user.id:
        return None
    return submission


def list_for_user(*, session: Session, user: User, limit: int = 100) -> list[Submission]:
    stmt = select(Submission).where(Submission.user_id == user.id).order_by(Submission.created_at.desc()).limit(limit)
    return list(session.scalars(stmt))


def of_exercise(exercise: Exercise) -> Select[Submission]:
    """Select the submissions to any version of ``exercise``: the one query every listing narrows."""
    return (
        select(Submission)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(ExerciseVersion.exercise_id == exercise.id)
    )


def latest_for_user(*, session: Session, user: User, exercise: Exercise) -> Submission | None:
    """Return ``user``'s newest submission to any version of ``exercise``."""
    stmt = (
        select(Submission)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.user_id == user.id, ExerciseVersion.exercise_id == exercise.id)
        .order_by(Submission.created_at.desc())
        .limit(1)
    )
    return session.scalar(stmt)
