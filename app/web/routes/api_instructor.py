"""``/api/instructor``: JSON for the instructor pages: prompt preview, check and regrade progress, submissions,
publish and unpublish, and what the class gets wrong on an exercise.

Contract: instructors and admins only (``InstructorDep``: 401 logged out, 403 for learners). State-changing
calls are JSON and so covered by the API's CSRF rule. Unknown exercises, versions, checks and regrades are 404.
Learners' work (an exercise's submissions, a submission's history, insights) is that of the courses the caller
staffs (``WorkScopeDep``, ``StaffSubmissionDep``: 404 for another course's submission).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from app.domain.exercises import authoring
from app.domain.models import Exercise
from app.domain.platform.clock import UtcDatetime
from app.domain.platform.markdown import render_markdown
from app.domain.review.insights import exercise_insights, learners_csv, tests_csv
from app.domain.review.listing import SubmissionFilter, filter_submissions
from app.domain.submissions.regrade import history, progress
from app.web.deps import (
    CheckDep,
    InstructorDep,
    RegradeDep,
    SessionDep,
    StaffExerciseDep,
    StaffSubmissionDep,
    StaffVersionDep,
    WorkScopeDep,
)
from app.web.errors import problem_responses
from app.web.schemas.submissions import StaffSubmissionOut

router = APIRouter(prefix="/api/instructor", tags=["instructor"])
MAX_PREVIEW_CHARS = 256 * 1024


class PreviewIn(BaseModel):
    markdown: str = Field(max_length=MAX_PREVIEW_CHARS)


class PreviewOut(BaseModel):
    html: str


class CheckOut(BaseModel):
    id: int
    status: str
    total: int
    done: int
    lines: list[str]
    problems: list[str]
    finished_at: UtcDatetime | None


class RegradeOut(BaseModel):
    id: int
    total: int
    done: int
    passed: int
    finished: bool


class VersionOut(BaseModel):
    number: int
    title: str
    source: str
    state: str
    created_at: UtcDatetime


class StaffExerciseOut(BaseModel):
    slug: str
    published: bool
    current_version: int | None
    versions: list[VersionOut]

    @classmethod
    def of(cls, exercise: Exercise) -> StaffExerciseOut:
        return cls(
            slug=exercise.slug,
            published=exercise.is_published and exercise.current_version is not None,
            current_version=exercise.current_version.number if exercise.current_version else None,
            versions=[
                VersionOut(
                    number=v.number, title=v.title, source=v.source, state=authoring.version_state(exercise, v),
                    created_at=v.created_at,
                )
                for v in exercise.versions
            ],
        )  # fmt: skip


class HistoryOut(BaseModel):
    exercise_version: int
    status: str
    verdict: str | None
    score: float | None
    max_score: float
    tests: list[dict[str, object]]
    graded_at: UtcDatetime | None
    archived_at: UtcDatetime


@router.post("/preview")
def preview(body: PreviewIn, _staff: InstructorDep) -> PreviewOut:
    """Render prompt Markdown exactly as learners will see it (sanitised)."""
    return PreviewOut(html=render_markdown(body.markdown))


@router.get("/exercises")
def exercises(session: SessionDep, _staff: InstructorDep) -> list[StaffExerciseOut]:
    """List every exercise with its versions, drafts included."""
    return [StaffExerciseOut.of(e) for e in session.scalars(select(Exercise).order_by(Exercise.slug))]


PUBLISH_ERRORS = problem_responses(
    409, 422, described={409: "The version has no passed check yet (and did not come from the bank)"}
)
FILTER_ERRORS = problem_responses(
    422, described={422: "The request does not match the schema, a date is not YYYY-MM-DD, or the verdict is unknown"}
)


@router.post("/exercises/{slug}/versions/{number}/publish", responses=PUBLISH_ERRORS)
def publish(exercise: StaffExerciseDep, version: StaffVersionDep, session: SessionDep) -> StaffExerciseOut:
    """Make the version what learners get (needs a passed check unless it came from the bank)."""
    authoring.publish(session=session, exercise=exercise, version=version)
    session.commit()
    return StaffExerciseOut.of(exercise)


@router.post("/exercises/{slug}/unpublish")
def unpublish(exercise: StaffExerciseDep, session: SessionDep) -> StaffExerciseOut:
    """Hide the exercise from learners."""
    authoring.unpublish(exercise=exercise)
    session.commit()
    return StaffExerciseOut.of(exercise)


@router.get("/exercises/{slug}/submissions", responses=FILTER_ERRORS)
def submissions(
    exercise: StaffExerciseDep,
    scope: WorkScopeDep,
    session: SessionDep,
    learner: str = "",
    verdict: str = "",
    since: str = "",
    until: str = "",
) -> list[StaffSubmissionOut]:
    """List the exercise's submissions, newest first, filtered by learner e-mail, verdict and dates."""
    filters = SubmissionFilter(learner=learner, verdict=verdict, since=since, until=until)
    return [
        StaffSubmissionOut.of(s)
        for s in filter_submissions(session=session, exercise=exercise, scope=scope, filters=filters)
    ]


@router.get("/submissions/{submission_id}/history")
def submission_history(submission: StaffSubmissionDep, session: SessionDep) -> list[HistoryOut]:
    """Return a submission's earlier results, oldest first."""
    return [
        HistoryOut(
            exercise_version=r.exercise_version.number, status=r.status, verdict=r.verdict, score=r.score,
            max_score=r.max_score, tests=r.tests, graded_at=r.graded_at, archived_at=r.archived_at,
        )
        for r in history(session=session, submission=submission)
    ]  # fmt: skip


@router.get("/checks/{check_id}")
def check_status(check: CheckDep) -> CheckOut:
    """Return a check's progress: the lines graded so far and, once settled, its problems."""
    return CheckOut(
        id=check.id, status=check.status, total=check.total, done=len(check.lines), lines=list(check.lines),
        problems=list(check.problems), finished_at=check.finished_at,
    )  # fmt: skip


@router.get("/regrades/{regrade_id}")
def regrade_status(job: RegradeDep, session: SessionDep) -> RegradeOut:
    """Return how many of a regrade's submissions are graded again."""
    p = progress(session=session, regrade=job)
    return RegradeOut(id=job.id, total=p.total, done=p.done, passed=p.passed, finished=p.finished)


class _FromAttributes(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class MessageGroupOut(_FromAttributes):
    text: str
    count: int


class TestInsightOut(_FromAttributes):
    name: str
    failures: int
    learners: int
    points_lost: float
    messages: list[MessageGroupOut]


class OptionPickOut(_FromAttributes):
    option: str
    text: str
    count: int
    correct: bool


class QuestionPicksOut(_FromAttributes):
    question: str
    wrong_attempts: int
    options: list[OptionPickOut]


class LearnerInsightOut(_FromAttributes):
    email: str
    attempts: int
    best_score: float | None
    max_score: float
    passed: bool
    stuck: bool
    first_at: UtcDatetime
    last_at: UtcDatetime
    passed_at: UtcDatetime | None
    attempts_to_pass: int | None
    time_to_pass_s: float | None
    latest_failing: list[str]


class InsightsOut(_FromAttributes):
    slug: str
    title: str
    kind: str
    submissions: int = Field(description="graded learner submissions counted (platform errors left out)")
    passed: int
    median_attempts_to_pass: float | None
    median_time_to_pass_s: float | None
    attempts_histogram: list[int] = Field(description="learners who passed, by attempts to pass: 1, 2, ..., 6+")
    tests: list[TestInsightOut]
    picks: list[QuestionPicksOut]
    learners: list[LearnerInsightOut]


@router.get("/exercises/{slug}/insights")
def insights(exercise: StaffExerciseDep, scope: WorkScopeDep, session: SessionDep) -> InsightsOut:
    """Return what the class gets wrong on an exercise: failing tests, wrong picks, attempts, who is stuck."""
    return InsightsOut.model_validate(exercise_insights(session=session, exercise=exercise, scope=scope))


@router.get(
    "/exercises/{slug}/insights.csv",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}},
                     "description": "one row per learner (`table=learners`) or per hidden test (`table=tests`)"}},
)  # fmt: skip
def insights_csv(
    exercise: StaffExerciseDep,
    scope: WorkScopeDep,
    session: SessionDep,
    table: Literal["learners", "tests"] = "learners",
) -> PlainTextResponse:
    """Return the exercise's insights as CSV, safe to open in a spreadsheet: per learner or per test."""
    found = exercise_insights(session=session, exercise=exercise, scope=scope)
    text = learners_csv(found) if table == "learners" else tests_csv(found)
    return PlainTextResponse(
        text, media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{exercise.slug}-{table}.csv"'},
    )  # fmt: skip
