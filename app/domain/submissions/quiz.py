"""Quiz attempts: grade a learner's answers at once and keep each attempt as an ordinary submission.

Contract:
- No table of its own: an attempt is a ``Submission`` against the quiz's current version whose ``code`` is the
  canonical JSON of the answers, already ``graded`` with verdict ``passed``/``failed``, and one ``TestResult``
  per question (name = question id; outcome ``passed`` for full points, ``skipped`` if unanswered, ``pending``
  for a staff-graded answer waiting for its grade, else ``failed``; message = feedback plus explanation). The
  caller lands it (``app.domain.results.settle.quiz_answered``: a pending answer gets its ungraded staff grade,
  whose release later puts its points into the attempt). So the submissions API, staff lists and recovery treat
  attempts like any other graded submission (recovery never sees them: they are never queued).
- With ``complete`` (the API's rule for an attempt under an assignment) every question must be answered
  (``InvalidInput`` naming how many are not: no attempt is used); practice, which costs nothing, may check
  some questions only.
- Retries are unlimited; ``progress`` reports the best score over the learner's attempts on any version.
- Functions take keyword-only arguments and never commit; the route does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, ExerciseVersion, Submission, SubmissionStatus, TestResult, User, utcnow
from worker.bank.quiz.answers import canonical_json, check_answers
from worker.bank.quiz.format import Quiz, parse_quiz
from worker.bank.quiz.grading import QuestionResult, QuizResult, grade
from worker.core import humane
from worker.core.errors import InvalidInput
from worker.core.outcome import Verdict


@dataclass(frozen=True)
class Progress:
    best_score: float | None
    attempts: int


def quiz_of(version: ExerciseVersion) -> Quiz:
    """Return the quiz stored in a version; raise ``InvalidInput`` if the version is not a quiz."""
    if version.kind != "quiz":
        raise InvalidInput(f"exercise {version.exercise.slug!r} is a {version.kind} exercise, not a quiz")
    return parse_quiz(version.exercise.slug, dict(version.files)["quiz.toml"])


def _message(result: QuestionResult) -> str:
    parts = [result.feedback]
    if result.explanation:
        parts.append(f"Why: {result.explanation}")
    if result.model_answer:
        parts.append(f"Model answer: {result.model_answer}")
    return "\n\n".join(parts)


def _outcome(result: QuestionResult) -> str:
    if result.pending:
        return "pending"
    if not result.answered:
        return "skipped"
    return "passed" if result.score >= result.max_score else "failed"


def _require_complete(quiz: Quiz, canonical: dict[str, list[str] | str]) -> None:
    """Refuse an attempt that leaves a question unanswered: it would cost an attempt for nothing."""
    unanswered = [q.id for q in quiz.questions if not _answered(canonical.get(q.id))]
    if unanswered:
        total = len(quiz.questions)
        verb = "is" if len(unanswered) == 1 else "are"
        raise InvalidInput(
            f"{len(unanswered)} of {total} questions {verb} unanswered ({', '.join(unanswered)}): "
            "answer every question, then submit (no attempt was used)"
        )


def _answered(value: list[str] | str | None) -> bool:
    return bool(value.strip()) if isinstance(value, str) else bool(value)


def answer_quiz(
    *,
    session: Session,
    user: User,
    exercise: Exercise,
    answers: dict[str, Any],
    assignment_id: int | None = None,
    complete: bool = False,
) -> tuple[Submission, QuizResult]:
    """Check and grade ``answers`` against the current version; add the graded attempt and return it.

    ``complete``: refuse answers that leave a question unanswered (an attempt that counts under an assignment).
    ``assignment_id``: the assignment the attempt is made under (the caller has gated it), or None for practice.
    """
    version = exercise.current_version
    if version is None:
        raise InvalidInput(f"exercise {exercise.slug!r} has no version to answer")
    quiz = quiz_of(version)
    canonical = check_answers(quiz, answers)
    if complete:
        _require_complete(quiz, canonical)
    code = canonical_json(canonical)
    try:
        code.encode("utf-8")  # a lone surrogate (a JSON "\ud800" escape) has no UTF-8 form for PostgreSQL
    except UnicodeEncodeError:
        raise InvalidInput("an answer holds a lone UTF-16 surrogate, which is not text") from None
    result = grade(quiz, canonical)
    now = utcnow()
    submission = Submission(
        user_id=user.id,
        exercise_version_id=version.id,
        assignment_id=assignment_id,
        code=code,
        status=SubmissionStatus.graded,
        verdict=Verdict.passed if result.passed else Verdict.failed,
        score=result.score,
        max_score=result.max_score,
        message=f"quiz attempt: {humane.number(result.score)} of {humane.number(result.max_score)} points "
        f"(pass mark {humane.number(quiz.pass_percent)}%)",
        attempts=1,
        runtime_ms=0,
        started_at=now,
        finished_at=now,
    )
    for position, question in enumerate(result.questions):
        submission.tests.append(
            TestResult(
                position=position,
                name=question.id,
                outcome=_outcome(question),
                message=_message(question),
                points=question.score,
                max_points=question.max_score,
            )
        )
    session.add(submission)
    session.flush()
    return submission, result


def progress(*, session: Session, user: User, exercise: Exercise) -> Progress:
    """Return ``user``'s best score and number of attempts on any version of ``exercise``."""
    stmt = (
        select(func.max(Submission.score), func.count(Submission.id))
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(
            Submission.user_id == user.id,
            ExerciseVersion.exercise_id == exercise.id,
            Submission.status == SubmissionStatus.graded,
        )
    )
    best, count = session.execute(stmt).one()
    return Progress(best_score=float(best) if best is not None else None, attempts=int(count))
