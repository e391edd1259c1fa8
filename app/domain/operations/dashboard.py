"""The admin dashboard's numbers, the grade matrix, its CSV export and the score chart (queues: jobs.queue_state).

Contract:
- Learners are users with the ``learner`` role; a learner's attempts at an exercise are their submissions to
  any of its versions. "Best score" is the highest settled score; "passed" means a ``passed`` verdict.
- ``exercise_stats``: per exercise, attempts, learners, pass rate (learners who passed / learners who tried),
  median attempts to pass (submissions up to and including the first pass) and best-score fractions.
- ``timing``: p50/p95 of ``runtime_ms`` and of queue wait (``started_at - created_at``) over the last
  ``TIMING_WINDOW`` settled submissions (nearest-rank percentiles).
- ``grades_csv`` writes one row per learner x exercise with the columns of ``CSV_COLUMNS``; a text cell that a
  spreadsheet would run as a formula (starting ``= + - @``, tab or CR) is prefixed with ``'`` (``platform.csvsafe``).
- ``score_chart_svg`` returns a self-contained SVG string built only from numbers (no learner text).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from statistics import median

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, ExerciseVersion, Role, Submission, SubmissionStatus, User
from app.domain.platform.clock import as_utc
from app.domain.platform.csvsafe import csv_cell

TIMING_WINDOW = 2000
BUCKETS = 10
CSV_COLUMNS = ("email", "exercise", "best_score", "max_score", "attempts", "passed", "last_submission")


@dataclass
class Cell:
    """One learner's record at one exercise."""

    attempts: int = 0
    best: float | None = None
    passed: bool = False
    attempts_to_pass: int | None = None
    last: datetime | None = None


@dataclass
class ExerciseRow:
    slug: str
    title: str
    max_score: float
    published: bool
    attempts: int = 0
    learners: int = 0
    passed: int = 0
    median_attempts_to_pass: float | None = None
    fractions: list[float] = field(default_factory=list)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.learners if self.learners else None


@dataclass
class GradeMatrix:
    learners: list[User]
    exercises: list[ExerciseRow]
    cells: dict[tuple[int, str], Cell]


def _exercises(session: Session) -> list[tuple[Exercise, ExerciseVersion]]:
    stmt = select(Exercise).where(Exercise.current_version_id.is_not(None)).order_by(Exercise.slug)
    return [(e, e.current_version) for e in session.scalars(stmt) if e.current_version is not None]


def grade_matrix(*, session: Session) -> GradeMatrix:
    """Return every learner's record at every exercise that has a current version."""
    learners = list(session.scalars(select(User).where(User.role == Role.learner).order_by(User.email)))
    learner_ids = {u.id for u in learners}
    rows = {
        e.slug: ExerciseRow(slug=e.slug, title=v.title, max_score=v.max_score, published=e.is_published)
        for e, v in _exercises(session)
    }
    stmt = (
        select(Submission.user_id, Exercise.slug, Submission.status, Submission.verdict, Submission.score,
               Submission.created_at)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .join(Exercise, ExerciseVersion.exercise_id == Exercise.id)
        .order_by(Submission.created_at)
    )  # fmt: skip
    cells: dict[tuple[int, str], Cell] = defaultdict(Cell)
    for user_id, slug, status, verdict, score, created in session.execute(stmt):
        if user_id not in learner_ids or slug not in rows:
            continue
        cell = cells[(user_id, slug)]
        cell.attempts += 1
        cell.last = as_utc(created)
        if status in (SubmissionStatus.graded, SubmissionStatus.error) and score is not None:
            cell.best = score if cell.best is None else max(cell.best, score)
        if verdict == "passed" and not cell.passed:
            cell.passed, cell.attempts_to_pass = True, cell.attempts
    for (_, slug), cell in cells.items():
        row = rows[slug]
        row.attempts += cell.attempts
        row.learners += 1
        row.passed += cell.passed
        if cell.best is not None and row.max_score > 0:
            row.fractions.append(min(1.0, cell.best / row.max_score))
    for row in rows.values():
        to_pass = [c.attempts_to_pass for (_, s), c in cells.items() if s == row.slug and c.attempts_to_pass]
        row.median_attempts_to_pass = float(median(to_pass)) if to_pass else None
    return GradeMatrix(learners=learners, exercises=list(rows.values()), cells=dict(cells))


def percentile(values: list[float], pct: float) -> float | None:
    """Return the nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def timing(*, session: Session) -> dict[str, float | None]:
    """Return p50/p95 of grading runtime and of queue wait, in milliseconds."""
    stmt = (
        select(Submission.runtime_ms, Submission.created_at, Submission.started_at)
        .where(Submission.status.in_((SubmissionStatus.graded, SubmissionStatus.error)))
        .order_by(Submission.created_at.desc())
        .limit(TIMING_WINDOW)
    )
    runtimes: list[float] = []
    waits: list[float] = []
    for runtime_ms, created, started in session.execute(stmt):
        if runtime_ms is not None:
            runtimes.append(float(runtime_ms))
        if started is not None:
            waits.append(max(0.0, (as_utc(started) - as_utc(created)).total_seconds() * 1000))
    return {
        "runtime_p50_ms": percentile(runtimes, 50),
        "runtime_p95_ms": percentile(runtimes, 95),
        "wait_p50_ms": percentile(waits, 50),
        "wait_p95_ms": percentile(waits, 95),
        "samples": float(len(runtimes)),
    }


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def grades_csv(matrix: GradeMatrix) -> str:
    """Return the grade matrix as CSV text, one row per learner x exercise, safe to open in a spreadsheet."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for learner in matrix.learners:
        for row in matrix.exercises:
            cell = matrix.cells.get((learner.id, row.slug), Cell())
            last = cell.last.isoformat() if cell.last else ""
            values = (learner.email, row.slug, _number(cell.best), _number(row.max_score), cell.attempts,
                      "yes" if cell.passed else "no", last)  # fmt: skip
            writer.writerow([csv_cell(v) for v in values])
    return out.getvalue()


def histogram(fractions: list[float], buckets: int = BUCKETS) -> list[int]:
    """Count score fractions (0..1) into equal buckets; full marks land in the last one."""
    counts = [0] * buckets
    for f in fractions:
        counts[min(buckets - 1, int(f * buckets))] += 1
    return counts


def score_chart_svg(fractions: list[float], *, width: int = 240, height: int = 64) -> str:
    """Return an inline SVG bar chart of best-score fractions, with a text alternative in ``<title>``."""
    counts = histogram(fractions)
    top = max(counts) or 1
    bar_w = width / len(counts)
    bars = []
    for i, n in enumerate(counts):
        h = 0 if n == 0 else max(2.0, (height - 14) * n / top)
        x, y = i * bar_w + 1, height - 12 - h
        label = f"{i * 10}-{(i + 1) * 10}%: {n}"
        bars.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" class="bar"><title>{label}'
            "</title></rect>"
        )
    summary = ", ".join(f"{i * 10}-{(i + 1) * 10}%: {n}" for i, n in enumerate(counts) if n) or "no scores yet"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" class="chart"><title>Best scores of {len(fractions)} learners: {summary}</title>'
        f'<line x1="0" y1="{height - 12}" x2="{width}" y2="{height - 12}" class="axis"/>'
        + "".join(bars)
        + f'<text x="0" y="{height - 1}" class="tick">0%</text>'
        f'<text x="{width}" y="{height - 1}" class="tick" text-anchor="end">100%</text></svg>'
    )
