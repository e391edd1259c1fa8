"""A learner's standing on each exercise, derived from their submissions alone, and the diff between attempts.

Contract:
- ``state`` per exercise: ``not_started`` (no submission), ``attempted`` (submitted, never passed), ``passed``
  (some submission, to any version, was graded ``passed``). Queued and running submissions are attempts.
- The best score is what counts: the highest score of any settled submission, shown against that
  submission's own maximum (a later version may be worth a different number of points).
- ``previous_attempt`` is the same learner's attempt on the same exercise (any version) made just before;
  ``diff_lines`` is a unified diff of two codes as tagged lines (``file``, ``hunk``, ``add``, ``del``, ``ctx``)
  whose text is raw: templates and ``textContent`` escape it where it is shown.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, ExerciseVersion, Submission, SubmissionStatus, User
from app.domain.submissions.lifecycle import of_exercise
from worker.core.outcome import Verdict

SETTLED = (SubmissionStatus.graded, SubmissionStatus.error)
MAX_ATTEMPTS_SHOWN = 200
DIFF_CONTEXT_LINES = 3


class State(StrEnum):
    not_started = "not_started"
    attempted = "attempted"
    passed = "passed"

    @property
    def label(self) -> str:
        return {"not_started": "Not started", "attempted": "Attempted", "passed": "Passed"}[self.value]


@dataclass
class Progress:
    """One learner's standing on one exercise."""

    state: State = State.not_started
    attempts: int = 0
    best_score: float | None = None
    best_max_score: float | None = None


@dataclass(frozen=True)
class Summary:
    total: int
    passed: int
    attempted: int
    points: float
    max_points: float


@dataclass(frozen=True)
class DiffLine:
    kind: str  # file, hunk, add, del, ctx
    text: str


def _fold(
    progress: Progress, status: SubmissionStatus, verdict: Verdict | None, score: float | None, top: float
) -> None:
    progress.attempts += 1
    if verdict is Verdict.passed:
        progress.state = State.passed
    elif progress.state is State.not_started:
        progress.state = State.attempted
    if status in SETTLED and score is not None and (progress.best_score is None or score > progress.best_score):
        progress.best_score, progress.best_max_score = score, top


def progress_by_exercise(*, session: Session, user: User) -> dict[int, Progress]:
    """Return ``user``'s progress keyed by exercise id (exercises never submitted to are absent)."""
    rows = session.execute(
        select(
            ExerciseVersion.exercise_id, Submission.status, Submission.verdict, Submission.score, Submission.max_score
        )
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.user_id == user.id)
    )
    progress: dict[int, Progress] = defaultdict(Progress)
    for exercise_id, status, verdict, score, top in rows:
        _fold(progress[exercise_id], status, verdict, score, top)
    return dict(progress)


def progress_for(*, session: Session, user: User, exercise: Exercise) -> Progress:
    """Return ``user``'s progress on one exercise."""
    progress = Progress()
    for submission in attempts_for(session=session, user=user, exercise=exercise, limit=None):
        _fold(progress, submission.status, submission.verdict, submission.score, submission.max_score)
    return progress


def summarize(progress: dict[int, Progress], exercises: list[Exercise]) -> Summary:
    """Count passed and attempted exercises and the best points earned out of what is published."""
    mine = [progress.get(e.id, Progress()) for e in exercises]
    return Summary(
        total=len(exercises),
        passed=sum(p.state is State.passed for p in mine),
        attempted=sum(p.state is State.attempted for p in mine),
        points=sum(p.best_score or 0.0 for p in mine),
        max_points=sum(e.current_version.max_score for e in exercises if e.current_version is not None),
    )


def attempts_for(
    *, session: Session, user: User, exercise: Exercise, limit: int | None = MAX_ATTEMPTS_SHOWN
) -> list[Submission]:
    """Return ``user``'s submissions to any version of ``exercise``, newest first."""
    stmt = (
        of_exercise(exercise)
        .where(Submission.user_id == user.id)
        .order_by(Submission.created_at.desc(), Submission.id.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))


def previous_attempt(*, session: Session, submission: Submission) -> Submission | None:
    """Return the attempt its author made on the same exercise just before ``submission``."""
    if submission.user_id is None:
        return None
    stmt = (
        select(Submission)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(
            Submission.user_id == submission.user_id,
            ExerciseVersion.exercise_id == submission.exercise_version.exercise_id,
            Submission.created_at < submission.created_at,
        )
        .order_by(Submission.created_at.desc())
        .limit(1)
    )
    return session.scalar(stmt)


def diff_lines(old: str, new: str, *, old_name: str = "previous", new_name: str = "this attempt") -> list[DiffLine]:
    """Return the unified diff from ``old`` to ``new`` as tagged lines; empty when they are equal."""
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), fromfile=old_name, tofile=new_name, n=DIFF_CONTEXT_LINES, lineterm=""
    )
    tagged: list[DiffLine] = []
    for line in lines:
        if line.startswith(("---", "+++")) and len(tagged) < 2:
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = {"+": "add", "-": "del"}.get(line[:1], "ctx")
        tagged.append(DiffLine(kind, line))
    return tagged
