"""Submission bodies: what is sent to submit, and the result, progress and history returned.

Contract:
- ``SubmissionOut`` has exactly the documented keys; datetimes are ISO-8601 in UTC (naive values from SQLite
  are taken as UTC); ``verdict`` and ``score`` stay null until the submission is graded or errored.
- A learner's result withholds what their tests' visibility tiers hold back (``app.domain.courses.visibility``, passed
  to ``SubmissionOut.of`` as ``shown``): a withheld test keeps its ``name`` and ``max_points`` (its worth) and
  reads ``visible: false``, ``outcome: "hidden"``, an empty ``message`` and ``points`` 0 (what it earned would
  tell whether it passed). ``hidden_tests`` counts them, ``newly_visible`` names the tests shown because the
  learner's deadline passed, ``reveals_at`` is when the waiting ones will show. The grade stays: ``score``,
  ``verdict``, ``stdout``, ``stderr`` and ``message`` are as without tiers. Without ``shown`` everything is shown
  (staff's views), and a visible test reads exactly as before tiers, plus ``visible: true``.
- ``measurements`` are what a measured-outcome exercise's hidden tests measured (``runner/measure.py``), each
  beside its target; a measurement of a withheld test is withheld with it. ``modelled: true`` marks a figure
  from the cost model (``runner/costmodel.py``), never a measurement: every view labels it so with its ``basis``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from app.domain.models import (
    Exercise,
    ExerciseVersion,
    Submission,
    SubmissionStatus,
    TestResult,
)
from app.domain.platform.clock import UtcDatetime
from app.domain.submissions.progress import DiffLine, Progress
from app.web.schemas.common import AssignmentRef, StrictIn
from app.web.schemas.exercises import current_version_of
from worker.core.outcome import GradeOutcome

if TYPE_CHECKING:
    from app.domain.courses.visibility import ShownTests


SETTLED = (SubmissionStatus.graded, SubmissionStatus.error)


class SubmissionIn(StrictIn):
    code: str  # size is checked against settings.max_code_bytes by create_submission (413)
    assignment_id: AssignmentRef = None


class NotebookIn(StrictIn):
    notebook: str = Field(description="the .ipynb file's text (JSON), as saved by Jupyter; at most 4 MiB")
    assignment_id: AssignmentRef = None


class SubmissionCreated(BaseModel):
    id: str
    status: SubmissionStatus


HIDDEN_OUTCOME = "hidden"


class TestResultOut(BaseModel):
    __test__ = False  # not a pytest test class
    name: str
    outcome: str
    message: str
    details: str = Field(
        "",
        description="The framework's own text behind a failure's message (an exception as it was raised), for "
        "the curious: the message is what to read",
    )
    points: float
    max_points: float
    visible: bool = True  # false: name and max_points only (the test's visibility tier holds the rest back)

    @classmethod
    def of(cls, result: TestResult, *, visible: bool = True) -> TestResultOut:
        """Return one test's result, or only its name and worth when it is not ``visible``."""
        if visible:
            return cls.model_validate(result, from_attributes=True)
        return cls(
            name=result.name,
            outcome=HIDDEN_OUTCOME,
            message="",
            points=0.0,
            max_points=result.max_points,
            visible=False,
        )


class ChartSeriesOut(BaseModel):
    label: str
    points: list[tuple[float, float]]


class ChartOut(BaseModel):
    """A small chart of a measurement: bars (e.g. bytes per step) or lines (e.g. modelled speed-up vs ranks)."""

    kind: Literal["bar", "line"]
    x_label: str
    y_label: str
    series: list[ChartSeriesOut]


class MeasurementOut(BaseModel):
    """One measured (or ``modelled``) outcome of a hidden test, beside its target (``met`` compares them)."""

    test: str
    name: str
    value: float | None
    unit: str
    target: float | None
    compare: Literal["<=", ">=", "=="] | None
    met: bool | None
    modelled: bool
    basis: str
    chart: ChartOut | None


def _measurements(submission: Submission, shown: ShownTests | None) -> list[MeasurementOut]:
    found = submission.measurements or []
    return [MeasurementOut.model_validate(m) for m in found if shown is None or shown.shows(m["test"])]


class SubmissionOut(BaseModel):
    id: str
    exercise: str
    exercise_version: int
    status: SubmissionStatus
    verdict: str | None
    score: float | None
    max_score: float
    tests: list[TestResultOut]
    stdout: str
    stderr: str
    message: str
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    runtime_ms: int | None
    device: str
    assignment_id: int | None = Field(default=None, description="the assignment it was made under; None: practice")
    params: dict[str, int | float | str] | None = Field(
        default=None, description="the learner's variant it was graded in; None: an exercise without parameters"
    )
    hidden_tests: int = 0
    newly_visible: list[str] = Field(default_factory=list)
    reveals_at: UtcDatetime | None = None
    measurements: list[MeasurementOut] = Field(default_factory=list)

    @classmethod
    def of(cls, submission: Submission, shown: ShownTests | None = None) -> SubmissionOut:
        """Return ``submission`` as ``shown`` lets its viewer see it (``app.domain.courses.visibility``); all of it
        without."""
        settled = submission.status in SETTLED
        version = submission.exercise_version
        tests = [TestResultOut.of(t, visible=shown is None or shown.shows(t.name)) for t in submission.tests]
        if shown is not None and shown.answers_withheld:
            tests = [t.model_copy(update={"message": shown.message_of(t.message)}) for t in tests]
        return cls(
            id=submission.id,
            exercise=version.exercise.slug,
            exercise_version=version.number,
            status=submission.status,
            verdict=submission.verdict.value if settled and submission.verdict else None,
            score=submission.score if settled else None,
            max_score=submission.max_score,
            tests=tests,
            stdout=submission.stdout,
            stderr=submission.stderr,
            message=submission.message,
            created_at=submission.created_at,
            finished_at=submission.finished_at,
            runtime_ms=submission.runtime_ms,
            device=submission.device,
            assignment_id=submission.assignment_id,
            params=submission.params,
            hidden_tests=sum(not t.visible for t in tests),
            newly_visible=list(shown.newly_visible) if shown else [],
            reveals_at=shown.reveals_at if shown else None,
            measurements=_measurements(submission, shown),
        )


class StaffSubmissionOut(SubmissionOut):
    """A submission as staff see it in an exercise's list: who sent it, too."""

    user: str | None

    @classmethod
    def of(cls, submission: Submission, shown: ShownTests | None = None) -> StaffSubmissionOut:
        base = SubmissionOut.of(submission, shown).model_dump()
        return cls(**base, user=submission.user.email if submission.user else None)


# --- the learner's progress, attempts and example runs (app.domain.submissions.progress,
# app.domain.exercises.example_runs) ---------


class ProgressOut(BaseModel):
    """My standing on one exercise: ``state`` is not_started, attempted or passed; the best score counts."""

    slug: str
    state: str
    attempts: int
    best_score: float | None
    best_max_score: float | None
    points: float

    @classmethod
    def of(cls, exercise: Exercise, progress: Progress) -> ProgressOut:
        return cls(
            slug=exercise.slug,
            state=progress.state.value,
            attempts=progress.attempts,
            best_score=progress.best_score,
            best_max_score=progress.best_max_score,
            points=current_version_of(exercise).max_score,
        )


class DiffLineOut(BaseModel):
    kind: str  # file, hunk, add, del, ctx
    text: str


class AttemptDiffOut(BaseModel):
    """The unified diff of an attempt's code against the same learner's previous attempt (none for the first)."""

    id: str
    previous_id: str | None
    lines: list[DiffLineOut]

    @classmethod
    def of(cls, submission: Submission, previous: Submission | None, lines: list[DiffLine]) -> AttemptDiffOut:
        return cls(
            id=submission.id,
            previous_id=previous.id if previous else None,
            lines=[DiffLineOut(kind=line.kind, text=line.text) for line in lines],
        )


def example_run_out(version: ExerciseVersion, outcome: GradeOutcome, started_at: datetime) -> SubmissionOut:
    """Return an example run's outcome in the shape of a submission (empty ``id``: it is never stored)."""
    return SubmissionOut(
        id="",
        exercise=version.exercise.slug,
        exercise_version=version.number,
        status=SubmissionStatus.error if outcome.verdict.is_platform_error else SubmissionStatus.graded,
        verdict=outcome.verdict.value,
        score=outcome.score,
        max_score=outcome.max_score,
        tests=[
            TestResultOut(
                name=t.name,
                outcome=t.outcome.value,
                message=t.message,
                details=t.details,
                points=t.points,
                max_points=t.max_points,
            )
            for t in outcome.tests
        ],
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        message=outcome.message,
        created_at=started_at,
        finished_at=datetime.now(UTC),
        runtime_ms=outcome.runtime_ms,
        device=outcome.device,
        measurements=[MeasurementOut.model_validate(m) for m in outcome.measurements],
    )


# --- quiz attempts (app.domain.submissions.quiz)
# ----------------------------------------------------------------------------------
