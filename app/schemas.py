"""Request and response bodies of the JSON API, and the only code that turns rows into them.

Contract:
- Exercise responses are built from an explicit allow-list of a version's files (``prompt.md``,
  ``starter.py``, ``examples/*``): hidden tests, solutions, wrong/right variants and quiz keys are never read
  here, so they cannot leak through a new field.
- ``SubmissionOut`` has exactly the documented keys; datetimes are ISO-8601 in UTC (naive values from SQLite
  are taken as UTC); ``verdict`` and ``score`` stay null until the submission is graded or errored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.markdown import render_markdown
from app.models import Exercise, ExerciseVersion, Role, Submission, SubmissionStatus, User

SETTLED = (SubmissionStatus.graded, SubmissionStatus.error)


def as_utc(value: datetime) -> datetime:
    """Return ``value`` in UTC, taking a naive datetime to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class _In(BaseModel):
    # Unknown fields are refused, so a typo ("cod") is a clear 422, not a silently empty submission.
    model_config = ConfigDict(extra="forbid")


class LoginIn(_In):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1024)


class SubmissionIn(_In):
    code: str  # size is checked against settings.max_code_bytes by create_submission (413)


class MeOut(BaseModel):
    email: str
    role: Role

    @classmethod
    def of(cls, user: User) -> MeOut:
        return cls(email=user.email, role=user.role)


class ExerciseSummary(BaseModel):
    slug: str
    title: str
    kind: str
    topic: str
    difficulty: str
    framework: str
    points: float
    version: int

    @classmethod
    def of(cls, exercise: Exercise) -> ExerciseSummary:
        version = _current(exercise)
        return cls(
            slug=exercise.slug,
            title=version.title,
            kind=version.kind,
            topic=version.topic,
            difficulty=version.difficulty,
            framework=version.framework,
            points=version.max_score,
            version=version.number,
        )


class ExerciseDetail(ExerciseSummary):
    prompt_md: str
    prompt_html: str
    starter_code: str
    examples: dict[str, str]

    @classmethod
    def of(cls, exercise: Exercise) -> ExerciseDetail:
        version = _current(exercise)
        files: dict[str, str] = dict(version.files)
        prompt = files.get("prompt.md", "")
        examples = {p.removeprefix("examples/"): c for p, c in files.items() if p.startswith("examples/")}
        return cls(
            **ExerciseSummary.of(exercise).model_dump(),
            prompt_md=prompt,
            prompt_html=render_markdown(prompt),
            starter_code=files.get("starter.py", "") if version.kind == "code" else "",
            examples=dict(sorted(examples.items())),
        )


def _current(exercise: Exercise) -> ExerciseVersion:
    if exercise.current_version is None:  # list_published/get_published never return these
        raise ValueError(f"exercise {exercise.slug!r} has no current version")
    return exercise.current_version


class SubmissionCreated(BaseModel):
    id: str
    status: SubmissionStatus


class TestResultOut(BaseModel):
    __test__ = False  # not a pytest test class
    name: str
    outcome: str
    message: str
    points: float
    max_points: float


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

    @classmethod
    def of(cls, submission: Submission) -> SubmissionOut:
        settled = submission.status in SETTLED
        version = submission.exercise_version
        return cls(
            id=submission.id,
            exercise=version.exercise.slug,
            exercise_version=version.number,
            status=submission.status,
            verdict=submission.verdict.value if settled and submission.verdict else None,
            score=submission.score if settled else None,
            max_score=submission.max_score,
            tests=[TestResultOut.model_validate(t, from_attributes=True) for t in submission.tests],
            stdout=submission.stdout,
            stderr=submission.stderr,
            message=submission.message,
            created_at=submission.created_at,
            finished_at=submission.finished_at,
            runtime_ms=submission.runtime_ms,
            device=submission.device,
        )


class StaffSubmissionOut(SubmissionOut):
    """A submission as staff see it in an exercise's list: who sent it, too."""

    user: str | None

    @classmethod
    def of(cls, submission: Submission) -> StaffSubmissionOut:
        return cls(**SubmissionOut.of(submission).model_dump(), user=submission.user.email if submission.user else None)
