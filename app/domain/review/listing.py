"""Staff review of an exercise's submissions: filtering by learner, verdict and date range.

Contract: ``filter_submissions`` returns submissions to any version of the exercise within the viewer's
``WorkScope`` (``app.domain.courses.policy``: the courses they staff), newest first, at most ``limit``. ``learner``
matches part of the e-mail (case-insensitive), ``verdict`` is a ``Verdict`` value or
``pending`` (not settled yet), ``since``/``until`` are inclusive UTC dates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import func
from sqlalchemy.orm import Session

from app.domain.courses.policy import WorkScope
from app.domain.models import Exercise, Submission, SubmissionStatus, User
from app.domain.submissions.lifecycle import of_exercise
from worker.core.errors import InvalidInput
from worker.core.outcome import Verdict

VERDICT_CHOICES = ("", *(v.value for v in Verdict), "pending")


@dataclass
class SubmissionFilter:
    learner: str = ""
    verdict: str = ""
    since: str = ""
    until: str = ""

    def dates(self) -> tuple[date | None, date | None]:
        try:
            since = date.fromisoformat(self.since) if self.since else None
            until = date.fromisoformat(self.until) if self.until else None
        except ValueError as exc:
            raise InvalidInput("dates must look like 2026-01-31") from exc
        return since, until


def filter_submissions(
    *, session: Session, exercise: Exercise, scope: WorkScope, filters: SubmissionFilter, limit: int = 500
) -> list[Submission]:
    """Return the exercise's submissions in ``scope`` matching ``filters``, newest first."""
    if filters.verdict not in VERDICT_CHOICES:
        raise InvalidInput(f"unknown verdict {filters.verdict!r}")
    stmt = of_exercise(exercise).where(scope.submissions())
    if "\x00" in filters.learner:  # PostgreSQL text cannot hold one, so no e-mail does
        raise InvalidInput("the learner filter contains a NUL character")
    if filters.learner.strip():
        needle = filters.learner.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.join(User, Submission.user_id == User.id).where(
            func.lower(User.email).like(f"%{needle}%", escape="\\")
        )
    if filters.verdict == "pending":
        stmt = stmt.where(Submission.status.in_((SubmissionStatus.queued, SubmissionStatus.running)))
    elif filters.verdict:
        stmt = stmt.where(Submission.verdict == Verdict(filters.verdict))
    since, until = filters.dates()
    if since:
        stmt = stmt.where(Submission.created_at >= datetime.combine(since, time.min, tzinfo=UTC))
    if until and until < date.max:  # the last day has no day after it; it bounds nothing
        stmt = stmt.where(Submission.created_at < datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC))
    return list(session.scalars(stmt.order_by(Submission.created_at.desc()).limit(limit)))
