"""Quiz attempt bodies: the answers sent and the per-question results returned."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.domain.models import (
    Submission,
)
from app.web.schemas.common import AssignmentRef, StrictIn
from worker.bank.quiz.grading import QuizResult


class QuizAnswersIn(StrictIn):
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
        if answers_withheld:  # app.domain.courses.visibility decides; the feedback on each pick stays
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


# --- personal access tokens (app.domain.accounts.tokens)
# ---------------------------------------------------------------
