"""Exercise bodies: the catalogue's summaries and what a learner reads (never hidden tests or keys).

Contract: built from an explicit allow-list of a version's files (``prompt.md``, ``starter.py``, ``examples/*``):
hidden tests, solutions and wrong/right variants are never read here, so they cannot leak through a new field. A
quiz's questions come only from ``worker.bank.quiz.format.Quiz.public()``, which leaves out keys, explanations,
hints and model answers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.domain.catalog.specs import spec_of
from app.domain.exercises.learning_path import PathView
from app.domain.models import (
    Exercise,
    ExerciseVersion,
)
from app.domain.platform.markdown import render_markdown
from worker.bank.quiz.format import parse_quiz


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
        version = version or current_version_of(exercise)
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

        ``params``: the learner's variant (``app.domain.catalog.variants``) the prompt and starter are rendered for;
        ``None``: the default variant.
        """
        version = version or current_version_of(exercise)
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


def current_version_of(exercise: Exercise) -> ExerciseVersion:
    if exercise.current_version is None:  # list_published/get_published never return these
        raise ValueError(f"exercise {exercise.slug!r} has no current version")
    return exercise.current_version


class PathModuleOut(BaseModel):
    """One module of the learning path: its published exercises in order and, for a learner, their standing.

    ``status`` is ``ready``, ``in_progress``, ``done`` or ``locked`` (advice only: nothing is refused), and
    ``waiting_for`` the prerequisites not done yet; both, like ``passed``, are null for staff.
    """

    slug: str
    number: int = Field(description="The module's place in the path, from 1")
    title: str
    why: str
    exercises: list[str] = Field(description="Slugs of the module's published exercises, in the path's order")
    requires: list[str] = Field(description="Slugs of the modules to finish first")
    total: int
    passed: int | None
    status: Literal["ready", "in_progress", "done", "locked"] | None
    waiting_for: list[str]


class PathOut(BaseModel):
    """The learning path of the practice course; ``modules`` is empty when the bank has none."""

    modules: list[PathModuleOut]
    others: list[str] = Field(description="Slugs of published exercises on no module of the path")

    @classmethod
    def of(cls, view: PathView | None) -> PathOut:
        if view is None:
            return cls(modules=[], others=[])
        modules = [
            PathModuleOut(
                slug=m.module.slug, number=m.number, title=m.module.title, why=m.module.why,
                exercises=[e.slug for e in m.exercises], requires=[r.slug for r in m.requires], total=m.total,
                passed=m.passed, status=m.status.value if m.status else None,
                waiting_for=[r.slug for r in m.waiting_for],
            )
            for m in view.modules
        ]  # fmt: skip
        return cls(modules=modules, others=[e.slug for e in view.others])
