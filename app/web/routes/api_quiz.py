"""``POST /api/exercises/{slug}/quiz``: answer a quiz and get per-question feedback at once.

Contract: needs a login (and, with the session cookie, a JSON body: the CSRF rule). The attempt is graded in
the request, stored as a graded submission and committed before the answer is returned; malformed answers are
422 with a message naming the question or option. Explanations come back only in this response, for the
questions this attempt answered. Retries are unlimited; ``best_score`` is the best over all attempts.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.domain.quiz import answer_quiz, progress
from app.domain.schemas import QuizAnswersIn, QuizAttemptOut
from app.web.deps import CurrentUser, ExerciseDep, SessionDep
from app.web.errors import problem_responses

router = APIRouter(prefix="/api/exercises", tags=["quiz"])


QUIZ_ERRORS = problem_responses(
    422, described={422: "The request does not match the schema, an answer names no such question or option, or "
                    "the exercise is not a quiz"}
)  # fmt: skip


@router.post("/{slug}/quiz", responses=QUIZ_ERRORS)
def answer(body: QuizAnswersIn, exercise: ExerciseDep, user: CurrentUser, session: SessionDep) -> QuizAttemptOut:
    """Grade the answers, store the attempt and return the feedback for each question."""
    submission, result = answer_quiz(session=session, user=user, exercise=exercise, answers=body.answers)
    standing = progress(session=session, user=user, exercise=exercise)
    session.commit()
    return QuizAttemptOut.of(submission, result, best_score=standing.best_score, attempts=standing.attempts)
