"""Which published exercises learners are about to submit: the order warm grading is started in.

Contract: ``by_demand(session=..., now=...)`` returns the published exercises with a current version, those of
assignments open at ``now`` first (published assignments whose window holds ``now``: opened, and before the end of
their late period or due date, when they have one), then the others; within each group, the most submissions in
the last ``RECENT_DAYS`` first, then by slug. One query for the open assignments' exercises and one for the counts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.domain.exercises.bank import list_published
from app.domain.models import Assignment, AssignmentItem, Exercise, ExerciseVersion, Submission

RECENT_DAYS = 7


def by_demand(*, session: Session, now: datetime) -> list[Exercise]:
    """Return the published exercises in the order learners are about to need them (see the module contract)."""
    open_ids = set(
        session.scalars(
            select(AssignmentItem.exercise_id)
            .join(Assignment, Assignment.id == AssignmentItem.assignment_id)
            .where(
                Assignment.is_published.is_(True),
                or_(Assignment.opens_at.is_(None), Assignment.opens_at <= now),
                or_(
                    func.coalesce(Assignment.late_until, Assignment.due_at).is_(None),
                    func.coalesce(Assignment.late_until, Assignment.due_at) >= now,
                ),
            )
        )
    )
    counted = session.execute(
        select(ExerciseVersion.exercise_id, func.count(Submission.id))
        .join(Submission, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.created_at >= now - timedelta(days=RECENT_DAYS))
        .group_by(ExerciseVersion.exercise_id)
    )
    recent = {int(exercise_id): int(count) for exercise_id, count in counted}
    published = list_published(session=session)  # by slug
    return sorted(published, key=lambda e: (e.id not in open_ids, -recent.get(e.id, 0)))
