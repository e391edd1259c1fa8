"""Send again what was accepted but is not being graded: the periodic sweep of every grading process.

Contract:
- ``sweep_once(dispatcher=..., settings=...)`` looks at the database once and returns a ``SweepReport``:
  1. a ``running`` submission whose lease expired (no heartbeat for ``grading_lease_s``: its worker died) goes
     back to ``queued`` and is sent again, or, when it already had ``max_attempts`` tries, settles as
     ``error``/``internal_error`` with a message that tells the learner it was our fault;
  2. a ``queued`` submission that nobody picked up for ``stale_queued_s`` (counted from its last dispatch, or
     its creation) is sent again when the dispatcher says it may have lost it (``Dispatcher.may_have_lost``:
     the in-process pool knows exactly; Celery compares the broker's queue length with the database, so a
     long backlog is not flooded with duplicates while a flushed or failed-over Redis is refilled).
  Rows are taken with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and stamped ``dispatched_at`` in the same
  transaction, so sweepers of several workers never send the same row twice in one interval. Messages are
  sent only after the commit. A duplicate message is harmless: grading claims first.
- ``Sweeper`` runs ``sweep_once`` every ``sweep_interval_s`` in a daemon thread until ``stop()``; a database or
  broker outage is logged and tried again at the next interval, never raised.
- ``extra_sweeps`` are callables run in each sweep after the submissions (checks use one); each returns how
  many jobs it sent again.
- Each ``Sweeper`` interval also delivers the due LTI scores once (``app.domain.lti.scores.deliver_due``, with
  ``SCORE_HTTP_TIMEOUT_S`` per call, in its own transaction), and closes the timed assessments whose learner's
  time ended (``app.jobs.timed.close_due``: their drafts submitted once); a failure there is logged, never raised.
- ``Duties.start(dispatcher, settings, name=..., queues=...)`` is what every grading process (a Celery worker,
  the embedded server) runs beside its gradings: its ``ProcessBeat`` and a ``Sweeper`` that also sweeps
  instructor checks and similarity runs; ``stop()`` ends both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import httpx
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.domain import leases
from app.domain.lti.scores import deliver_due
from app.domain.models import ExerciseVersion, Submission, SubmissionStatus, utcnow
from app.domain.platform.db import session_scope
from app.jobs.heartbeat import ProcessBeat, count_redispatched
from app.settings import Settings
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from app.domain.dispatcher import Dispatcher

log = logging.getLogger(__name__)
SWEEP_BATCH = 500  # rows per sweep: a huge backlog is worked through over several intervals
EXHAUSTED_MESSAGE = (
    "Grading was interrupted {attempts} times because a grading machine stopped before it finished. This was "
    "a fault of the platform, not of your code, and it does not count against you: submit the same code again. "
    "If it keeps happening, tell your instructor."
)
SCORE_HTTP_TIMEOUT_S = 5.0
INTERRUPTED_MESSAGE = "a grading machine stopped while grading this submission; grading it again"


@dataclass
class SweepReport:
    requeued: list[str] = field(default_factory=list)  # running rows whose worker died, sent again
    resent: list[str] = field(default_factory=list)  # queued rows the transport may have lost, sent again
    exhausted: list[str] = field(default_factory=list)  # settled as error: no attempts left
    extra: int = 0  # jobs sent again by extra_sweeps

    @property
    def redispatched(self) -> int:
        return len(self.requeued) + len(self.resent) + self.extra


def _locked(stmt):  # type: ignore[no-untyped-def]
    """Skip rows another sweeper holds (PostgreSQL); SQLite has one writer anyway and ignores the clause."""
    return stmt.with_for_update(skip_locked=True, of=Submission)


def _collect(
    *, session: Session, settings: Settings, dispatcher: Dispatcher, report: SweepReport
) -> list[tuple[str, str]]:
    """Pick what to send again, update those rows, and return their (id, queue) pairs (the caller commits)."""
    now = utcnow()
    jobs: list[tuple[str, str]] = []
    expired = session.execute(
        _locked(
            select(Submission, ExerciseVersion.queue)
            .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
            .where(leases.expired(Submission, lease_s=settings.grading_lease_s, now=now))
            .order_by(Submission.created_at)
            .limit(SWEEP_BATCH)
        )
    ).all()
    for submission, queue in expired:
        if submission.attempts >= settings.max_attempts:
            submission.status = SubmissionStatus.error
            submission.verdict = Verdict.internal_error
            submission.score = None
            submission.message = EXHAUSTED_MESSAGE.format(attempts=submission.attempts)
            submission.finished_at = now
            report.exhausted.append(submission.id)
            continue
        submission.status = SubmissionStatus.queued
        submission.started_at = None
        submission.heartbeat_at = None
        submission.dispatched_at = now
        submission.message = INTERRUPTED_MESSAGE
        report.requeued.append(submission.id)
        jobs.append((submission.id, queue))

    stale_before = now - timedelta(seconds=settings.stale_queued_s)
    stale = session.execute(
        _locked(
            select(Submission, ExerciseVersion.queue)
            .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
            .where(
                Submission.status == SubmissionStatus.queued,  # rows requeued above carry dispatched_at=now
                or_(
                    Submission.dispatched_at < stale_before,
                    Submission.dispatched_at.is_(None) & (Submission.created_at < stale_before),
                ),
            )
            .order_by(Submission.created_at)
            .limit(SWEEP_BATCH)
        )
    ).all()
    if stale:
        waiting = dict(
            session.execute(
                select(ExerciseVersion.queue, func.count())
                .join(Submission, Submission.exercise_version_id == ExerciseVersion.id)
                .where(Submission.status == SubmissionStatus.queued)
                .group_by(ExerciseVersion.queue)
            ).all()
        )
        lost = set(dispatcher.may_have_lost([(s.id, q) for s, q in stale], waiting_by_queue=waiting))
        for submission, queue in stale:
            if submission.id in lost:
                submission.dispatched_at = now
                report.resent.append(submission.id)
                jobs.append((submission.id, queue))
    return jobs


def sweep_once(
    *, dispatcher: Dispatcher, settings: Settings, extra_sweeps: tuple[Callable[[], int], ...] = ()
) -> SweepReport:
    """Run one sweep; return what it did."""
    report = SweepReport()
    with session_scope() as session:
        jobs = _collect(session=session, settings=settings, dispatcher=dispatcher, report=report)
    from app.domain.platform import news  # after the commit: live streams show "queued" or the settled error at once

    for submission_id in report.exhausted:
        news.publish(submission_id)
    for submission_id, queue in jobs:
        try:
            dispatcher.dispatch(submission_id, queue)
        except Exception:
            # Still queued, stamped now: the next sweep after stale_queued_s sends it again.
            log.warning("sweeper could not dispatch %s to %s", submission_id, queue, exc_info=True)
        news.publish(submission_id)
    for sweep in extra_sweeps:
        report.extra += sweep()
    if report.redispatched or report.exhausted:
        log.info(
            "sweeper: %d interrupted gradings sent again, %d lost queued sent again, %d settled after %d tries, "
            "%d other jobs sent again",
            len(report.requeued), len(report.resent), len(report.exhausted), settings.max_attempts, report.extra,
        )  # fmt: skip
    return report


def deliver_scores() -> int:
    """Post the due LTI scores once (own transaction); return how many were sent, 0 when it failed."""
    try:
        with session_scope() as session, httpx.Client(timeout=SCORE_HTTP_TIMEOUT_S, follow_redirects=False) as http:
            return len(deliver_due(session=session, now=utcnow(), http=http).sent)
    except Exception:  # the database is away: the rows wait for the next interval
        log.warning("delivering LTI scores failed; trying again next sweep", exc_info=True)
        return 0


class Sweeper:
    """Run ``sweep_once`` every ``settings.sweep_interval_s`` in a daemon thread."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        settings: Settings,
        *,
        extra_sweeps: tuple[Callable[[], int], ...] = (),
        on_report: Callable[[SweepReport], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.settings = settings
        self.extra_sweeps = extra_sweeps
        self.on_report = on_report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpulab-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.settings.sweep_interval_s):
            try:
                report = sweep_once(dispatcher=self.dispatcher, settings=self.settings, extra_sweeps=self.extra_sweeps)
            except Exception:  # the database is away: try again next interval
                log.warning("sweep failed; trying again in %.0f s", self.settings.sweep_interval_s, exc_info=True)
                continue
            if self.on_report is not None:
                self.on_report(report)
            deliver_scores()
            self._close_timed()

    def _close_timed(self) -> None:
        """Close the timed assessments whose learner's time has ended (``app.jobs.timed``); never raise."""
        from app.jobs.timed import close_due

        try:
            close_due(dispatcher=self.dispatcher, settings=self.settings)
        except Exception:
            log.warning("closing ended timed assessments failed; trying again next sweep", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Duties:
    """What every grading process does besides grading: beat as a worker and sweep stranded work."""

    def __init__(self, beat: ProcessBeat, sweeper: Sweeper) -> None:
        self.beat = beat
        self.sweeper = sweeper

    @classmethod
    def start(cls, dispatcher: Dispatcher, settings: Settings, *, name: str, queues: list[str]) -> Duties:
        """Start the beat of ``name`` (serving ``queues``) and a sweeper that sends through ``dispatcher``."""
        from app.domain.exercises.checks import sweep_checks  # instructor checks strand like submissions do
        from app.domain.review.similarity_runs import sweep_runs  # and similarity checks

        beat = ProcessBeat(settings, name=name, queues=queues).start()
        extra = (partial(sweep_checks, dispatcher, settings), partial(sweep_runs, dispatcher, settings))
        sweeper = Sweeper(
            dispatcher, settings, extra_sweeps=extra,
            on_report=lambda report: count_redispatched(report.redispatched),
        ).start()  # fmt: skip
        return cls(beat, sweeper)

    def stop(self) -> None:
        """Stop sweeping, then mark the beat stopped (an orderly exit is not a dead worker)."""
        self.sweeper.stop()
        self.beat.stop()
