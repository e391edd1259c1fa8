"""Request and response bodies of the JSON API, and the only code that turns rows into them.

Contract:
- Exercise responses are built from an explicit allow-list of a version's files (``prompt.md``,
  ``starter.py``, ``examples/*``): hidden tests, solutions and wrong/right variants are never read here, so they
  cannot leak through a new field. A quiz's questions come only from ``worker.bank.quiz.Quiz.public()``, which
  leaves out keys, explanations, hints and model answers.
- E-mail fields say ``format: email``. ``Email`` (a new account's address) is checked and normalised by
  ``app.domain.security.check_email`` (422 saying why); ``LoginIn.email`` is not checked, so an account made
  under older e-mail rules can still log in (a wrong address is the usual 401).
- ``SubmissionOut`` has exactly the documented keys; datetimes are ISO-8601 in UTC (naive values from SQLite
  are taken as UTC); ``verdict`` and ``score`` stay null until the submission is graded or errored.
- A learner's result withholds what their tests' visibility tiers hold back (``app.domain.visibility``, passed
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
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer

from app.domain.markdown import render_markdown
from app.domain.models import (
    ApiToken,
    Exercise,
    ExerciseVersion,
    Role,
    Submission,
    SubmissionStatus,
    TestResult,
    User,
)
from app.domain.progress import DiffLine, Progress
from app.domain.security import MAX_EMAIL_CHARS, check_email
from app.domain.specs import spec_of
from app.domain.tokens import Scope
from worker.bank.quiz import QuizResult, parse_quiz
from worker.core.errors import InvalidInput
from worker.core.outcome import GradeOutcome

if TYPE_CHECKING:
    from app.domain.visibility import ShownTests  # imports this module (through assignments): a type only

SETTLED = (SubmissionStatus.graded, SubmissionStatus.error)


def as_utc(value: datetime) -> datetime:
    """Return ``value`` in UTC, taking a naive datetime to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Aware in UTC both ways: validated into UTC, and written in UTC with its offset even from a dataclass or model
# that skipped validation (SQLite hands back naive datetimes, which a browser would read as its own local time).
UtcDatetime = Annotated[datetime, AfterValidator(as_utc), PlainSerializer(as_utc, return_type=datetime)]


def _checked_email(value: str) -> str:
    try:
        return check_email(value)
    except InvalidInput as exc:
        raise ValueError(exc.message) from exc  # pydantic reports a ValueError as a 422 with this message


LoginEmail = Annotated[str, Field(max_length=MAX_EMAIL_CHARS, json_schema_extra={"format": "email"})]
Email = Annotated[LoginEmail, AfterValidator(_checked_email)]


class _In(BaseModel):
    # Unknown fields are refused, so a typo ("cod") is a clear 422, not a silently empty submission.
    model_config = ConfigDict(extra="forbid")


class LoginIn(_In):
    email: LoginEmail
    password: str = Field(max_length=1024)


MAX_ID = 2**31 - 1  # the id columns are Integer (PostgreSQL int4)
AssignmentRef = Annotated[
    int | None,
    Field(default=None, ge=1, le=MAX_ID, description="the assignment this is submitted under (none: practice)"),
]


class SubmissionIn(_In):
    code: str  # size is checked against settings.max_code_bytes by create_submission (413)
    assignment_id: AssignmentRef = None


class NotebookIn(_In):
    notebook: str = Field(description="the .ipynb file's text (JSON), as saved by Jupyter; at most 4 MiB")
    assignment_id: AssignmentRef = None


class MeOut(BaseModel):
    email: str
    role: Role
    must_change_password: bool = Field(
        default=False, description="a one-time password: POST /api/auth/password before anything else"
    )

    @classmethod
    def of(cls, user: User) -> MeOut:
        return cls(email=user.email, role=user.role, must_change_password=bool(user.must_change_password))


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
    def of(cls, exercise: Exercise, version: ExerciseVersion | None = None) -> ExerciseSummary:
        """Describe ``version`` of ``exercise`` (its current version unless given, e.g. a draft's preview)."""
        version = version or _current(exercise)
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


class QuizOptionOut(BaseModel):
    id: str
    text: str
    code: bool


class QuizQuestionOut(BaseModel):
    """A quiz question as learners see it before answering: no key, explanation, hint or model answer."""

    id: str
    type: str
    prompt: str
    prompt_html: str
    code: str
    points: float
    options: list[QuizOptionOut]
    min_words: int | None
    max_chars: int | None
    grading: Literal["staff", "self"] | None = Field(
        default=None, description="text questions: graded by staff against a rubric, or self-assessed practice"
    )


class QuizOut(BaseModel):
    pass_percent: float
    questions: list[QuizQuestionOut]

    @classmethod
    def of(cls, quiz_toml: str, slug: str) -> QuizOut:
        quiz = parse_quiz(slug, quiz_toml)
        questions = [QuizQuestionOut(**q, prompt_html=render_markdown(q["prompt"])) for q in quiz.public()]
        return cls(pass_percent=quiz.pass_percent, questions=questions)


class ExerciseDetail(ExerciseSummary):
    prompt_md: str
    prompt_html: str
    starter_code: str
    examples: dict[str, str]
    quiz: QuizOut | None = None  # only for kind "quiz"
    params: dict[str, int | float | str] = Field(
        default_factory=dict,
        description="The learner's variant of an exercise with parameters: the values filled into the prompt and "
        "the starter, and the ones the hidden tests grade against (empty for an exercise without parameters)",
    )

    @classmethod
    def of(
        cls, exercise: Exercise, version: ExerciseVersion | None = None, params: dict[str, Any] | None = None
    ) -> ExerciseDetail:
        """Return what a learner receives for ``version`` (default: current): never hidden tests or keys.

        ``params``: the learner's variant (``app.domain.variants``) the prompt and starter are rendered for;
        ``None``: the default variant.
        """
        version = version or _current(exercise)
        files: dict[str, str] = dict(version.files)
        variant: dict[str, Any] = {}
        if version.kind == "code":
            spec = spec_of(version)
            variant = spec.default_params if params is None else dict(params)
            files.update({p: spec.rendered(p, variant) for p in ("prompt.md", "starter.py") if p in files})
        prompt = files.get("prompt.md", "")
        examples = {p.removeprefix("examples/"): c for p, c in files.items() if p.startswith("examples/")}
        return cls(
            **ExerciseSummary.of(exercise, version).model_dump(),
            prompt_md=prompt,
            prompt_html=render_markdown(prompt),
            starter_code=files.get("starter.py", "") if version.kind == "code" else "",
            examples=dict(sorted(examples.items())),
            quiz=QuizOut.of(files["quiz.toml"], exercise.slug) if version.kind == "quiz" else None,
            params=variant,
        )


def _current(exercise: Exercise) -> ExerciseVersion:
    if exercise.current_version is None:  # list_published/get_published never return these
        raise ValueError(f"exercise {exercise.slug!r} has no current version")
    return exercise.current_version


class SubmissionCreated(BaseModel):
    id: str
    status: SubmissionStatus


HIDDEN_OUTCOME = "hidden"


class TestResultOut(BaseModel):
    __test__ = False  # not a pytest test class
    name: str
    outcome: str
    message: str
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
        """Return ``submission`` as ``shown`` lets its viewer see it (``app.domain.visibility``); all of it without."""
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


# --- the learner's progress, attempts and example runs (app.domain.progress, app.domain.example_runs) ---------


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
            points=_current(exercise).max_score,
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
                name=t.name, outcome=t.outcome.value, message=t.message, points=t.points, max_points=t.max_points
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


# --- quiz attempts (app.domain.quiz) ----------------------------------------------------------------------------------


class QuizAnswersIn(_In):
    """``{"answers": {"q1": ["b"], "q2": "my own words"}}``: option ids for choice questions, text otherwise."""

    answers: dict[str, list[str] | str]
    assignment_id: AssignmentRef = None


class QuizQuestionResultOut(BaseModel):
    """One question of an attempt; ``explanation`` and the rest appear only once it was answered."""

    id: str
    answered: bool
    correct: bool
    score: float
    max_score: float
    feedback: str
    explanation: str | None
    hint: str | None
    common_mistakes: list[str]
    model_answer: str | None
    rubric: list[str]
    pending: bool = Field(default=False, description="a staff-graded answer waiting for its grade (0 until then)")


class QuizAttemptOut(BaseModel):
    submission_id: str
    score: float
    max_score: float
    passed: bool
    verdict: str
    best_score: float | None
    attempts: int
    questions: list[QuizQuestionResultOut]
    answers_withheld: bool = Field(
        default=False,
        description="explanations, model answers and rubrics are held back: attempts are left under the assignment",
    )

    @classmethod
    def of(
        cls,
        submission: Submission,
        result: QuizResult,
        *,
        best_score: float | None,
        attempts: int,
        answers_withheld: bool = False,
    ) -> QuizAttemptOut:
        questions = [QuizQuestionResultOut.model_validate(q, from_attributes=True) for q in result.questions]
        if answers_withheld:  # app.domain.visibility decides; the feedback on each pick stays
            held: dict[str, Any] = {"explanation": None, "model_answer": None, "rubric": [], "common_mistakes": []}
            questions = [q.model_copy(update=held) for q in questions]
        return cls(
            submission_id=submission.id,
            score=result.score,
            max_score=result.max_score,
            passed=result.passed,
            verdict=submission.verdict.value if submission.verdict else "failed",
            best_score=best_score,
            attempts=attempts,
            questions=questions,
            answers_withheld=answers_withheld,
        )


# --- personal access tokens (app.domain.tokens) ---------------------------------------------------------------


class TokenIn(_In):
    name: str = Field(min_length=1, max_length=100, description="what the token is for, e.g. the machine")
    scopes: list[Scope] = Field(
        min_length=1, max_length=3, description="read: GET my work; submit: submit and run; staff: everything else"
    )


class TokenOut(BaseModel):
    """A token as its owner sees it in the list: never the token itself."""

    id: int
    name: str
    prefix: str
    scopes: list[Scope]
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None
    revoked_at: UtcDatetime | None

    @classmethod
    def of(cls, row: ApiToken) -> TokenOut:
        return cls(
            id=row.id,
            name=row.name,
            prefix=row.prefix,
            scopes=[Scope(s) for s in row.scopes],
            created_at=row.created_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


class TokenCreated(TokenOut):
    token: str = Field(description="the token: shown this once, only its hash is kept")
