"""Staff grade records: the rubric a question is graded against, the grades a submission waits for, their points.

Contract:
- ``rubric_of_version``/``rubric_for``: a staff-graded text question's rubric (quiz), or a code exercise's
  ``[[rubric]]`` (question ``CODE``); ``Rubric.score`` is the checked items' points, clamped to 0..points for a text
  answer (a code rubric may deduct below 0).
- ``open_grades`` adds one ungraded ``ManualGrade`` per pending (staff-graded) answer of a quiz attempt;
  ``open_code_grade`` one for a just-graded code submission whose version has a rubric, for the learner's newest
  graded attempt of the item (exercise x assignment, or practice), replacing an older one nobody graded yet. A
  submission graded again (a regrade) keeps its staff grade, applied again once released.
- ``apply`` puts a submission's released grades into it: the question's ``TestResult`` (a ``RUBRIC_TEST`` one for
  code) gets the points, an outcome (``passed`` at full points, else ``failed``) and a message listing the items
  met and missed, the comment and line comments; the score is the sum of its tests' points clamped to 0..their
  maxima; a quiz's verdict follows its pass mark, a code exercise keeps its tests' verdict.
- ``rescore``: a new current version may not drop a question or rubric item that a grade checked (``Conflict``,
  naming them); otherwise every grade of the exercise is re-scored and released ones applied again.
- Only ``app.domain.results.settle`` calls the writers here: it lands what they change (LMS score, news).
  Functions take keyword-only arguments, flush, and never commit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, ExerciseVersion, ManualGrade, Submission, TestResult, in_archived_course
from worker.bank.quiz.format import Quiz, TextQuestion, parse_quiz
from worker.bank.quiz.grading import QuestionResult
from worker.bank.rubric import RubricItem, score_items
from worker.bank.spec import read_meta
from worker.core import humane
from worker.core.errors import Conflict, InvalidInput
from worker.core.outcome import Verdict

MAX_ID = 2**31 - 1
CODE = "code"  # the question name of a code submission's grade
RUBRIC_TEST = "staff rubric"  # the test result that carries a code grade's points


def current_quiz(exercise: Exercise) -> Quiz | None:
    """Return the quiz of the exercise's current version, or None for a code exercise."""
    version = exercise.current_version
    if version is None or version.kind != "quiz":
        return None
    return parse_quiz(exercise.slug, dict(version.files)["quiz.toml"])


@dataclass(frozen=True)
class Rubric:
    """What a grader grades against: a text question's rubric, or a code exercise's ``[[rubric]]``."""

    kind: str  # "text" or "code"
    prompt: str
    rubric_items: tuple[RubricItem, ...]
    points: float  # the most staff grading can give
    comments: tuple[str, ...]
    model_answer: str

    def score(self, checked: Iterable[str]) -> float:
        """Return the checked items' points: clamped to 0..points for a text answer; a code rubric may deduct."""
        return score_items(self.rubric_items, checked, most=self.points,
                           least=0.0 if self.kind == "text" else -math.inf)  # fmt: skip


def rubric_of_version(version: ExerciseVersion, question: str) -> Rubric | None:
    """Return the rubric ``question`` has in ``version`` (``CODE`` for a code exercise's), or None."""
    files = dict(version.files)
    if version.kind == "quiz":
        found = parse_quiz(version.exercise.slug, files["quiz.toml"]).by_id().get(question)
        if not isinstance(found, TextQuestion):
            return None
        return Rubric(kind="text", prompt=found.prompt, rubric_items=found.rubric_items, points=found.points,
                      comments=found.comments, model_answer=found.model_answer)  # fmt: skip
    if question != CODE or "rubric" not in files.get("exercise.toml", ""):
        return None
    meta = read_meta(version.exercise.slug, files["exercise.toml"])
    if not meta.rubric:
        return None
    positive = float(sum(r.points for r in meta.rubric if r.points > 0))
    return Rubric(kind="code", prompt=files.get("prompt.md", ""), rubric_items=meta.rubric, points=positive,
                  comments=meta.rubric_comments, model_answer="")  # fmt: skip


def rubric_for(exercise: Exercise, question: str) -> Rubric:
    """Return the rubric ``question`` has in the exercise's current version; ``InvalidInput`` if none."""
    found = rubric_of_version(exercise.current_version, question) if exercise.current_version else None
    if found is None:
        raise InvalidInput(f"the current version of {exercise.slug!r} has no rubric for {question!r}")
    return found


def open_grades(*, session: Session, submission: Submission, exercise: Exercise, results: list[QuestionResult]) -> None:
    """Add an ungraded ``ManualGrade`` for every pending answer among ``results``."""
    for result in results:
        if result.pending:
            session.add(ManualGrade(submission=submission, exercise_id=exercise.id, question=result.id,
                                    max_points=result.max_score))  # fmt: skip


def open_code_grade(*, session: Session, submission: Submission) -> None:
    """Queue a just-graded code submission for staff grading when its version has a rubric (see the contract)."""
    version = submission.exercise_version
    rubric = rubric_of_version(version, CODE) if version.kind == "code" and submission.user_id is not None else None
    if rubric is None:
        return
    existing = session.scalar(select(ManualGrade).where(ManualGrade.submission_id == submission.id))
    if existing is not None:  # graded again (a regrade): the staff grade stays, and counts again once released
        if existing.released_at is not None:
            apply(session=session, submission=submission)
        return
    # Only a learner's newest attempt waits for a grader: an older ungraded one of the same item is superseded.
    same_item = (
        select(Submission.id)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(ExerciseVersion.exercise_id == version.exercise_id, Submission.user_id == submission.user_id,
               Submission.assignment_id.is_not_distinct_from(submission.assignment_id))
    )  # fmt: skip
    stale = select(ManualGrade).where(ManualGrade.submission_id.in_(same_item), ManualGrade.graded_at.is_(None))
    for grade in session.scalars(stale):
        session.delete(grade)
    session.add(ManualGrade(submission_id=submission.id, exercise_id=version.exercise_id, question=CODE,
                            max_points=rubric.points))  # fmt: skip
    session.flush()


def answer_text(grade: ManualGrade) -> str:
    """Return the learner's answer: their code, or their text answer to the question (quiz answers are JSON)."""
    if grade.question == CODE:
        return grade.submission.code
    try:
        answers = json.loads(grade.submission.code)
    except ValueError:
        return ""
    value = answers.get(grade.question) if isinstance(answers, dict) else None
    return value if isinstance(value, str) else ""


def _message(rubric: Rubric, grade: ManualGrade) -> str:
    lines = [f"Graded by staff: {humane.number(grade.points or 0)} of {humane.number(rubric.points)} points."]
    for item in rubric.rubric_items:
        if item.id in grade.checked:
            lines.append(f"✓ {item.points:+g} {item.text}")
        elif item.points > 0:  # a deduction that did not apply is not worth a line
            lines.append(f"✗ missed {item.points:+g}: {item.text}")
    if grade.comment:
        lines.append(f"Comment: {grade.comment}")
    lines.extend(f"Line {c['line']}: {c['text']}" for c in grade.line_comments or [])
    if rubric.model_answer:
        lines.append(f"Model answer: {rubric.model_answer}")
    return "\n".join(lines)


def apply(*, session: Session, submission: Submission) -> None:
    """Put the submission's released grades into its test results and score (``settle`` lands the change)."""
    grades = list(session.scalars(
        select(ManualGrade).where(ManualGrade.submission_id == submission.id, ManualGrade.released_at.is_not(None),
                                  ManualGrade.points.is_not(None))
    ))  # fmt: skip
    exercise = submission.exercise_version.exercise
    if not grades or exercise.current_version is None:
        return
    tests = {t.name: t for t in session.scalars(select(TestResult).where(TestResult.submission_id == submission.id))}
    for grade in grades:
        rubric = rubric_of_version(exercise.current_version, grade.question)
        if rubric is None:
            continue
        name = RUBRIC_TEST if grade.question == CODE else grade.question
        test = tests.get(name)
        if test is None:
            if grade.question != CODE:
                continue  # a question the attempt does not have
            test = TestResult(submission_id=submission.id, position=len(tests), name=RUBRIC_TEST)
            session.add(test)
            tests[name] = test
        test.points = grade.points or 0.0
        test.max_points = rubric.points
        test.outcome = "passed" if test.points >= rubric.points else "failed"
        test.message = _message(rubric, grade)
    session.flush()
    every = list(tests.values())
    maximum = round(sum(t.max_points for t in every), 6)  # the current rubric's, after a re-score
    submission.score = round(min(maximum, max(0.0, sum(t.points for t in every))), 6)
    submission.max_score = maximum
    quiz = current_quiz(exercise)
    if quiz is not None:  # a quiz passes at its pass mark; a code exercise keeps its tests' verdict
        pass_mark = submission.max_score * quiz.pass_percent / 100 - 1e-9
        submission.verdict = Verdict.passed if submission.score >= pass_mark else Verdict.failed
        score, of, mark = (humane.number(v) for v in (submission.score, submission.max_score, quiz.pass_percent))
        submission.message = f"quiz attempt: {score} of {of} points (pass mark {mark}%), staff-graded answers included"
    session.flush()


def rescore(*, session: Session, exercise: Exercise, version: ExerciseVersion) -> list[Submission]:
    """Refuse ``version`` if it drops a graded question or checked item; else re-score the exercise's grades.

    Return the submissions whose released grades changed: the caller lands them (``settle.version_changed``).
    """
    # An archived course's grades stay as they were given: a new version never re-scores them.
    frozen = select(Submission.id).where(in_archived_course(Submission.assignment_id))
    grades = list(
        session.scalars(
            select(ManualGrade).where(ManualGrade.exercise_id == exercise.id, ManualGrade.submission_id.not_in(frozen))
        )
    )
    if not grades:
        return []
    rubrics = {q: rubric_of_version(version, q) for q in {g.question for g in grades}}
    missing: set[str] = set()
    for grade in grades:
        rubric = rubrics[grade.question]
        what = "the code rubric" if grade.question == CODE else f"question {grade.question!r}"
        if rubric is None:
            if grade.graded_at is not None:
                missing.add(what)
            continue
        ids = {r.id for r in rubric.rubric_items}
        missing.update(f"item {i!r} of {what}" for i in grade.checked if i not in ids)
    if missing:
        raise Conflict(
            f"version {version.number} of {exercise.slug!r} drops what staff grades use: {', '.join(sorted(missing))}; "
            "keep it (give it other points instead, and every grade using it is re-scored)"
        )
    touched: set[str] = set()
    for grade in grades:
        rubric = rubrics[grade.question]
        if rubric is None:  # ungraded, and nothing to grade it against any more
            session.delete(grade)
            continue
        grade.max_points = rubric.points
        if grade.graded_at is not None:
            grade.points = rubric.score(grade.checked)
            if grade.released_at is not None:
                touched.add(grade.submission_id)
    session.flush()
    found = (session.get(Submission, submission_id) for submission_id in sorted(touched))
    return [submission for submission in found if submission is not None]
