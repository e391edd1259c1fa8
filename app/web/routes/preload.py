"""Load what a list response reads from its rows in a fixed number of queries instead of one per row (N+1).

Contract: each helper takes rows already loaded by the domain query (so which rows, and their order, stay that
query's business), fills their still-unloaded relationships the responses read with one query per
relationship, and returns the rows. Attributes already loaded in the session are left alone. Versions
loaded here leave ``files`` (every file of the exercise, hidden tests included) unloaded: list responses never
read it, and reading it later still works, with one query.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TypeVar

from sqlalchemy import inspect, select
from sqlalchemy.orm import Session, defer
from sqlalchemy.orm.attributes import set_committed_value

from app.domain.models import Exercise, ExerciseVersion, Submission, TestResult

T = TypeVar("T", Exercise, Submission)


def _unloaded(rows: Iterable[T], attribute: str) -> list[T]:
    return [row for row in rows if attribute in inspect(row).unloaded]


def _versions(session: Session, ids: Iterable[int]) -> dict[int, ExerciseVersion]:
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    stmt = select(ExerciseVersion).where(ExerciseVersion.id.in_(wanted)).options(defer(ExerciseVersion.files))
    return {version.id: version for version in session.scalars(stmt)}


def _exercises(session: Session, ids: Iterable[int]) -> dict[int, Exercise]:
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    return {exercise.id: exercise for exercise in session.scalars(select(Exercise).where(Exercise.id.in_(wanted)))}


def with_current_versions(session: Session, exercises: Sequence[Exercise]) -> Sequence[Exercise]:
    """Load every exercise's ``current_version`` in one query (catalogue and progress lists)."""
    missing = [e for e in _unloaded(exercises, "current_version") if e.current_version_id is not None]
    versions = _versions(session, (e.current_version_id for e in missing if e.current_version_id is not None))
    for exercise in missing:
        assert exercise.current_version_id is not None
        set_committed_value(exercise, "current_version", versions.get(exercise.current_version_id))
    return exercises


def with_submission_details(session: Session, submissions: Sequence[Submission]) -> Sequence[Submission]:
    """Load what ``SubmissionOut.of`` reads (version, its exercise, per-test results) in at most three queries."""
    missing = _unloaded(submissions, "exercise_version")
    versions = _versions(session, (s.exercise_version_id for s in missing))
    for submission in missing:
        set_committed_value(submission, "exercise_version", versions.get(submission.exercise_version_id))
    distinct = {s.exercise_version_id: s.exercise_version for s in submissions}  # all loaded now: no query
    no_exercise = [v for v in distinct.values() if v is not None and "exercise" in inspect(v).unloaded]
    exercises = _exercises(session, (v.exercise_id for v in no_exercise))
    for version in no_exercise:
        set_committed_value(version, "exercise", exercises.get(version.exercise_id))
    no_tests = _unloaded(submissions, "tests")
    if no_tests:
        by_submission: dict[str, list[TestResult]] = defaultdict(list)
        stmt = (
            select(TestResult)
            .where(TestResult.submission_id.in_(sorted({s.id for s in no_tests})))
            .order_by(TestResult.submission_id, TestResult.position)
        )
        for result in session.scalars(stmt):
            by_submission[result.submission_id].append(result)
        for submission in no_tests:
            set_committed_value(submission, "tests", by_submission.get(submission.id, []))
    return submissions
