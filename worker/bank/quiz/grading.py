"""Grading a quiz attempt's canonical answers (from ``worker.bank.quiz.answers.check_answers``).

Contract: ``grade`` scores the answers question by question, in the quiz's order, into a ``QuizResult`` of
``QuestionResult``. Rules, per question worth ``points``:
- ``single``: all points for the keyed option, else none.
- ``multiple``: ``points * max(0, right picks - wrong picks) / number of keyed options``; it counts as correct only
  when the picks are exactly the key. Picking everything therefore earns nothing unless all are keyed.
- ``text`` with ``grading = "staff"`` (the default): any non-empty answer is *pending*, 0 points until staff grade
  it against the rubric's items (``app.domain.review.staff_grading``, ``TextQuestion.rubric_score``).
- ``text`` with ``grading = "self"`` (practice, labelled so): all points once the answer has ``min_words`` words
  with letters in them (``count_words``), at least half of them different; only then are the model answer and the
  rubric returned, so an empty answer never unlocks them.
- an unanswered question scores 0 and gets only its hint: its explanation would give the key away.
The attempt passes when its score is at least ``pass_percent`` of the maximum.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from worker.bank.quiz.format import ChoiceQuestion, Question, Quiz, SingleQuestion, TextQuestion
from worker.core import humane

WORD_RE = re.compile(r"[^\W\d_][\w'\u2019-]*")


@dataclass(frozen=True)
class QuestionResult:
    id: str
    answered: bool
    correct: bool
    score: float
    max_score: float
    feedback: str
    explanation: str | None
    hint: str | None
    common_mistakes: list[str]
    model_answer: str | None = None
    rubric: list[str] = field(default_factory=list)
    pending: bool = False  # a staff-graded answer waiting for its grade


@dataclass(frozen=True)
class QuizResult:
    score: float
    max_score: float
    passed: bool
    questions: list[QuestionResult]

    @property
    def pending(self) -> list[str]:
        """Return the ids of the answers waiting for staff grading."""
        return [q.id for q in self.questions if q.pending]


def count_words(text: str) -> tuple[int, int]:
    """Return (words, distinct words) of ``text``, counting only tokens that contain a letter."""
    words = [w.lower() for w in WORD_RE.findall(text)]
    return len(words), len(set(words))


def _choice_score(question: ChoiceQuestion, picked: list[str]) -> float:
    key = set(question.answer)
    if isinstance(question, SingleQuestion):
        return question.points if set(picked) == key else 0.0
    hits = len(key & set(picked))
    misses = len(set(picked) - key)
    return question.points * max(0, hits - misses) / len(key)


def _grade_choice(question: ChoiceQuestion, picked: list[str]) -> QuestionResult:
    score = _choice_score(question, picked)
    correct = set(picked) == set(question.answer)
    if correct:
        verdict = "Correct."
    elif score > 0:
        verdict = (f"Partly right: {humane.number(score)} of {humane.number(question.points)} points. "
                   "Some picks are missing or wrong.")  # fmt: skip
    else:
        verdict = "Not right."
    notes = [question.feedback[p] for p in picked if p in question.feedback]
    return QuestionResult(
        id=question.id,
        answered=True,
        correct=correct,
        score=score,
        max_score=question.points,
        feedback="\n".join([verdict, *notes]),
        explanation=question.explanation,
        hint=question.hint or None,
        common_mistakes=list(question.common_mistakes),
    )


STAFF_PENDING = (
    "Sent to staff, who grade it against the rubric. Its points count once they release the grades; until then "
    "it counts 0."
)


def _grade_text(question: TextQuestion, text: str) -> QuestionResult:
    if question.staff_graded:
        return QuestionResult(
            id=question.id, answered=True, correct=False, score=0.0, max_score=question.points,
            feedback=STAFF_PENDING, explanation=None, hint=None, common_mistakes=[], pending=True,
        )  # fmt: skip
    words, distinct = count_words(text)
    complete = words >= question.min_words and distinct * 2 >= question.min_words
    if complete:
        feedback = (
            "Complete (practice, self-assessed): compare your answer with the model answer and tick off the rubric "
            "yourself."
        )
    else:
        feedback = (
            f"Not complete yet: write at least {question.min_words} words of your own "
            f"(you wrote {words}, {distinct} different). The model answer appears once it is complete."
        )
    return QuestionResult(
        id=question.id,
        answered=True,
        correct=complete,
        score=question.points if complete else 0.0,
        max_score=question.points,
        feedback=feedback,
        explanation=(question.explanation or None) if complete else None,
        hint=question.hint or None,
        common_mistakes=list(question.common_mistakes) if complete else [],
        model_answer=question.model_answer if complete else None,
        rubric=[r.text for r in question.rubric_items] if complete else [],
    )


def _unanswered(question: Question) -> QuestionResult:
    return QuestionResult(
        id=question.id,
        answered=False,
        correct=False,
        score=0.0,
        max_score=question.points,
        feedback="Not answered. Answer it and submit again to see the explanation.",
        explanation=None,
        hint=question.hint or None,
        common_mistakes=[],
    )


def grade(quiz: Quiz, answers: dict[str, list[str] | str]) -> QuizResult:
    """Grade canonical answers (from ``check_answers``) question by question, in the quiz's order."""
    results: list[QuestionResult] = []
    for question in quiz.questions:
        value = answers.get(question.id)
        if isinstance(question, TextQuestion) and isinstance(value, str) and value.strip():
            results.append(_grade_text(question, value))
        elif not isinstance(question, TextQuestion) and isinstance(value, list) and value:
            results.append(_grade_choice(question, value))
        else:
            results.append(_unanswered(question))
    score = round(sum(r.score for r in results), 6)
    return QuizResult(
        score=score,
        max_score=quiz.max_score,
        passed=score >= quiz.max_score * quiz.pass_percent / 100 - 1e-9,
        questions=results,
    )
