"""Grade one stored submission by id: the task both dispatchers run.

Contract:
- ``grade_submission(submission_id)`` takes an id (the Celery task checks it is one), re-fetches everything,
  hands the grading side only the spec and the code (``worker.grading.pipeline.grade``), and is idempotent:
  ``claim`` lets only one delivery grade; a graded submission is never graded again.
- The claim is committed before the sandbox runs (the UI sees ``running``) and the result in a second
  transaction, so no database transaction stays open while learner code runs. While the sandbox runs, a
  ``LeaseKeeper`` renews the claim's heartbeat; the result is written only if this grading's attempt still
  holds the submission (``held``), so a grading taken over after a lost lease records nothing.
- After each of those commits it publishes the change (``app.domain.platform.news``), so a status stream in this process
  (the embedded server) shows it without waiting for its next poll.
- A database that cannot be reached (a PostgreSQL restart) is waited for with back-off around the claim and
  around the record (``with_database_retry``), so a finished grading is not thrown away; a database away
  for longer gives the message back to the queue (``Reject(requeue=True)``) instead of acknowledging it.
- A host that cannot grade at all (``HostUnfit``: its GPU failed, ``gpu_health``) undoes its claim without
  counting the try; the Celery task then stops this worker consuming that queue and gives the message back
  (``Reject(requeue=True)``), so another host grades it. The embedded server records a platform error instead.
- Only platform errors (``internal_error``) are retried, up to ``settings.max_attempts`` tries in all;
  then the submission settles as ``error``. Learner verdicts are final.
- A stored result lands through ``app.domain.results.settle.graded`` in its transaction: the staff grade its
  rubric asks for, the learner's LMS score, and the news once it commits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Annotated, TypeVar

from celery import Task
from celery.exceptions import Reject
from pydantic import StringConstraints, TypeAdapter, ValidationError
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError

from app.domain.catalog.specs import spec_of
from app.domain.catalog.variants import Params, params_to_grade
from app.domain.leases import LeaseKeeper, renew
from app.domain.models import Submission
from app.domain.platform import news
from app.domain.platform.db import session_scope
from app.domain.results import settle
from app.domain.submissions.lifecycle import claim, give_back, held, record_outcome, record_platform_failure
from app.jobs.celery_app import GRADE_TASK, celery_app
from app.jobs.heartbeat import grading_finished, grading_started
from app.settings import Settings, get_settings
from worker.bank.spec import ExerciseSpec
from worker.core.errors import GpulabError, HostUnfit
from worker.core.outcome import GradeOutcome, Verdict
from worker.grading.pipeline import grade
from worker.grading.sandbox import get_sandbox

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 0.5
DB_GIVE_UP_S = 120.0
DATABASE_AWAY = (OperationalError, InterfaceError, DisconnectionError)
T = TypeVar("T")


def _grade_claimed(submission_id: str, *, requeue_unfit: bool = False) -> tuple[GradeOutcome, bool] | None:
    """Claim and grade once; return the outcome and whether it was stored, or None when not ours to grade."""
    settings = get_settings()

    def take() -> tuple[ExerciseSpec, str, int, Params] | None:
        with session_scope() as session:
            submission = claim(
                session=session, submission_id=submission_id, lease_s=settings.grading_lease_s,
                max_attempts=settings.max_attempts,
            )  # fmt: skip
            if submission is None:
                return None
            spec = spec_of(submission.exercise_version)
            params = params_to_grade(spec=spec, submission=submission, settings=settings)
            if spec.params and params != submission.params:  # regraded against a version whose parameters changed
                submission.params = params
            return spec, submission.code, submission.attempts, params

    taken = with_database_retry(take, what=f"claim {submission_id}")
    if taken is None:
        return None
    spec, code, attempt, params = taken
    news.publish(submission_id)  # now running (committed): a live stream in this process shows it at once
    grading_started()
    try:
        with LeaseKeeper(
            partial(_renew, submission_id, attempt), interval_s=settings.heartbeat_interval_s,
            label=f"grading {submission_id} attempt {attempt}",
        ):  # fmt: skip
            outcome = _run_grading(submission_id, spec, code, settings, params, requeue_unfit=requeue_unfit)
    except HostUnfit:
        # This host cannot grade at all (its GPU failed): the claim is undone, the try not counted.
        def undo() -> bool:
            with session_scope() as session:
                return give_back(session=session, submission_id=submission_id, attempt=attempt)

        with_database_retry(undo, what=f"give back {submission_id}")
        news.publish(submission_id)
        raise
    finally:
        grading_finished()

    def store() -> bool | None:
        with session_scope() as session:
            stored = held(session=session, submission_id=submission_id, attempt=attempt)
            if stored is None:
                log.warning("grading %s attempt %d was taken over; result dropped", submission_id, attempt)
                return None
            if outcome.verdict.is_platform_error:
                news.publish_after_commit(session, submission_id)  # requeued or given up: the page shows which
                return not record_platform_failure(
                    session=session, submission=stored, message=outcome.message, max_attempts=settings.max_attempts
                )
            record_outcome(session=session, submission=stored, outcome=outcome)
            settle.graded(session=session, submission=stored)  # staff grade, LMS score, news: with this commit
            return True

    settled = with_database_retry(store, what=f"record {submission_id}")
    if settled is None:
        return None
    return outcome, settled


def with_database_retry(action: Callable[[], T], *, what: str, give_up_s: float | None = None) -> T:
    """Run ``action`` (one whole transaction), again with back-off while the database cannot be reached.

    A PostgreSQL restart or fail-over drops every connection; the work in memory (a finished grading) is
    worth waiting for. After ``give_up_s`` (default ``DB_GIVE_UP_S``) the error propagates: the task gives
    its message back, the lease expires and the sweeper sends the submission again: nothing is lost.
    """
    deadline = time.monotonic() + (DB_GIVE_UP_S if give_up_s is None else give_up_s)
    delay_s = 0.5
    while True:
        try:
            return action()
        except DATABASE_AWAY:
            if time.monotonic() + delay_s > deadline:
                raise
            log.warning("database unreachable during %s; retrying in %.1f s", what, delay_s, exc_info=True)
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 8.0)


def _renew(submission_id: str, attempt: int) -> bool:
    with session_scope() as session:
        return renew(session=session, model=Submission, row_id=submission_id, attempt=attempt)


def _run_grading(
    submission_id: str, spec: ExerciseSpec, code: str, settings: Settings, params: Params, *, requeue_unfit: bool
) -> GradeOutcome:
    """Grade in the sandbox, in the learner's variant; turn a failure of the platform into ``internal_error``.

    ``requeue_unfit``: a host that cannot grade at all (``HostUnfit``) raises it, for the queue to send the job
    elsewhere (Celery); else (the embedded server, which has no other host) it is a platform error like any.
    """
    try:
        return grade(spec, code, sandbox=get_sandbox(settings), params=params)
    except HostUnfit:
        if requeue_unfit:
            raise
        return GradeOutcome(
            verdict=Verdict.internal_error, score=0.0, max_score=spec.max_score, message="this host's GPU failed"
        )
    except GpulabError as exc:
        return GradeOutcome(verdict=Verdict.internal_error, score=0.0, max_score=spec.max_score, message=exc.message)
    except Exception as exc:  # the platform failed, not the learner: record it and retry
        log.exception("grading %s failed", submission_id)
        return GradeOutcome(
            verdict=Verdict.internal_error, score=0.0, max_score=spec.max_score, message=f"{type(exc).__name__}: {exc}"
        )


def grade_submission(submission_id: str, *, requeue_unfit: bool = False) -> Verdict | None:
    """Grade the submission, retrying platform errors; return the stored verdict or None if skipped.

    ``requeue_unfit``: let ``HostUnfit`` out, the claim undone (the Celery task puts the message back).
    """
    settings = get_settings()
    for attempt in range(settings.max_attempts):
        result = _grade_claimed(submission_id, requeue_unfit=requeue_unfit)
        if result is None:
            return None
        outcome, settled = result
        if settled:
            return outcome.verdict
        time.sleep(RETRY_BACKOFF_S * (attempt + 1))
    return None


SubmissionId = TypeAdapter(Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")])


@celery_app.task(name=GRADE_TASK, bind=True, acks_late=True, reject_on_worker_lost=True)
def grade_submission_task(self: Task, submission_id: object) -> str | None:
    """Celery entry point: grade one submission by id (the message is checked first, never trusted)."""
    try:
        valid_id = SubmissionId.validate_python(submission_id)
    except ValidationError:
        log.error("dropped a grading message whose submission id is not one: %.80r", submission_id)
        return None
    try:
        verdict = grade_submission(valid_id, requeue_unfit=True)
    except HostUnfit as exc:
        # This host's GPU failed: it stops taking jobs of this queue, and the message goes back for another host.
        queue = (self.request.delivery_info or {}).get("routing_key") or ""
        log.error("this grading host stops taking %s jobs: %s", queue or "its", exc.message)
        if queue and self.request.hostname:
            self.app.control.cancel_consumer(queue, destination=[self.request.hostname])
        raise Reject(exc.message, requeue=True) from exc
    except DATABASE_AWAY as exc:
        # with_database_retry already waited DB_GIVE_UP_S: give the message back rather than let Celery ack
        # a failure, so the submission is tried again once the database is back (the sweeper would too).
        raise Reject(f"database unreachable: {exc}", requeue=True) from exc
    return verdict.value if verdict else None
