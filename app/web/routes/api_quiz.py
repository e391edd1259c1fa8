"""``POST /api/exercises/{slug}/quiz``: answer a quiz and get per-question feedback at once.

Contract: needs a login (and, with the session cookie, a JSON body: the CSRF rule). The attempt is graded in
the request, stored as a graded submission and committed before the answer is returned; malformed answers are
422 with a message naming the question or option. Explanations come back only in this response, for the
questions this attempt answered, and under an assignment only once no attempt is left or the window closed
(``answers_withheld``; ``app.domain.courses.visibility``). Retries are unlimited in practice. Under an assignment
(``assignment_id``, or practice that an assignment's ``counted`` policy puts under it:
``coursework.practice_under``) every question must be answered (422 naming how many are not, no attempt used)
and its gate applies first (dates, attempt limit, rate: 403/429 with the sentence the page shows, 404 for an
assignment this user is not in). ``best_score`` is the best over all attempts. An attempt under an assignment
an LMS links queues the learner's score for it (``app.domain.lti.scores``) in the same commit.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.domain.courses import coursework
from app.domain.courses.visibility import shown_tests
from app.domain.models import utcnow
from app.domain.results import settle
from app.domain.submissions.quiz import answer_quiz, progress
from app.web.deps import CurrentUser, ExerciseDep, SessionDep
from app.web.errors import problem_responses
from app.web.schemas.quiz import QuizAnswersIn, QuizAttemptOut
from app.web.sessions import client_ip

router = APIRouter(prefix="/api/exercises", tags=["quiz"])


QUIZ_ERRORS = problem_responses(
    403, 404, 422, 429,
    described={
        403: "Under an assignment: not open yet, closed or no attempts left (or a cross-site request)",
        404: "No such exercise, or no such assignment for this user",
        422: "The request does not match the schema, an answer names no such question or option, the exercise "
        "is not a quiz, or (under an assignment) a question is unanswered: no attempt is used",
        429: "Under an assignment: its submission rate is used up; wait Retry-After seconds",
    },
)  # fmt: skip


@router.post("/{slug}/quiz", responses=QUIZ_ERRORS)
def answer(
    body: QuizAnswersIn, exercise: ExerciseDep, user: CurrentUser, session: SessionDep, request: Request
) -> QuizAttemptOut:
    """Grade the answers, store the attempt and return the feedback for each question."""
    under = coursework.gate_submission(
        session=session, assignment_id=body.assignment_id, exercise=exercise, user=user, client_ip=client_ip(request)
    )
    submission, result = answer_quiz(
        session=session,
        user=user,
        exercise=exercise,
        answers=body.answers,
        assignment_id=under,
        complete=under is not None,  # an attempt that counts answers every question
    )
    settle.quiz_answered(session=session, submission=submission, exercise=exercise, results=result.questions)
    standing = progress(session=session, user=user, exercise=exercise)
    shown = shown_tests(session=session, submission=submission, viewer=user, now=utcnow())  # answers after the last
    session.commit()
    return QuizAttemptOut.of(
        submission, result, best_score=standing.best_score, attempts=standing.attempts,
        answers_withheld=shown.answers_withheld,
    )  # fmt: skip
