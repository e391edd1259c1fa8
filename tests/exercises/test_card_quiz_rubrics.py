"""Every quiz's text questions are graded by staff against point rubrics that can award full marks."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.bank.quiz.format import TextQuestion, parse_quiz

BANK = Path(__file__).resolve().parents[2] / "exercises"
QUIZZES = sorted(p.parent.name for p in BANK.glob("quiz-*/quiz.toml"))
CARD_QUIZZES = [
    "quiz-tf-mirroredstrategy-practice", "quiz-tf-multigpu-basics",
    "quiz-torch-dataparallel-practice", "quiz-torch-dataparallel-why",
]  # fmt: skip


def test_the_four_card_quizzes_are_there_with_their_text_questions() -> None:
    assert set(CARD_QUIZZES) <= set(QUIZZES), QUIZZES
    texts = [f"{s}::{q.id}" for s in CARD_QUIZZES for q in parse_quiz(s, (BANK / s / "quiz.toml").read_text()).questions
             if isinstance(q, TextQuestion)]  # fmt: skip
    assert len(texts) >= 3, texts


@pytest.mark.parametrize("slug", QUIZZES)
def test_text_questions_are_staff_graded_with_points_that_reach_full_marks(slug: str) -> None:
    quiz = parse_quiz(slug, (BANK / slug / "quiz.toml").read_text())
    for question in quiz.questions:
        if not isinstance(question, TextQuestion):
            continue
        assert question.grading == "staff", f"{slug}::{question.id} is self-assessed"
        positive = [r.id for r in question.rubric_items if r.points > 0]
        assert len(positive) >= 2, f"{slug}::{question.id}: a rubric of one item is a yes/no, not a rubric"
        assert question.rubric_score(positive) == question.points, f"{slug}::{question.id} cannot reach full marks"
        assert question.rubric_score([r.id for r in question.rubric_items if r.points < 0]) == 0
        assert question.comments, f"{slug}::{question.id} offers graders no reusable comment"


@pytest.mark.parametrize("slug", QUIZZES)
def test_the_intro_calls_staff_graded_questions_staff_graded(slug: str) -> None:
    quiz = parse_quiz(slug, (BANK / slug / "quiz.toml").read_text())
    intro = (BANK / slug / "prompt.md").read_text().lower()
    if any(isinstance(q, TextQuestion) and q.grading == "staff" for q in quiz.questions):
        assert "self-assessed" not in intro, f"{slug}: its intro calls a staff-graded question self-assessed"
