"""Staff grading of quiz text answers against their rubrics: the queue, one grade, release, and re-scoring.

Contract:
- A staff-graded text question (``grading = "staff"``, the default) earns nothing when answered: ``open_grades``
  (called by ``quiz.answer_quiz``) adds one ungraded ``ManualGrade`` per pending answer of the attempt, and the
  attempt's ``TestResult`` for that question says ``pending``.
- Who grades: instructors and admins; for an attempt made under an assignment, the course's TAs too
  (``may_grade``). Anyone else gets ``NotFound``.
- ``queue``: an exercise's grades (or those of the work under an assignment, for its course's staff), oldest
  attempt first; ``next_ungraded`` the first ungraded one after ``after`` (or from the start), so a grader can
  skip one; ``counts`` how many are ungraded, graded, released.
- ``save``: the checked rubric item ids (each must be an item of the question in the exercise's current quiz:
  ``InvalidInput`` otherwise) and a comment (at most ``MAX_COMMENT_CHARS``). ``revision`` must be the one the
  grader loaded, else ``Conflict``: another grader saved in between, and the caller shows their version instead
  of silently overwriting it. Points are ``TextQuestion.rubric_score``: the checked items' sum, clamped to
  0..points. Each save records who and when and bumps the revision.
- ``release`` (instructors and admins; an assignment's also by its course's instructors, not its TAs): every
  graded, unreleased grade of the exercise (or assignment) becomes the learner's (``released_at``); from then
  on its points are in the submission (``apply``): the question's ``TestResult`` gets the points, an outcome
  (``passed`` at full points, else ``failed``) and a message listing the rubric items met and missed, plus the
  comment; the submission's score is the sum of its tests' points and its verdict follows the quiz's pass
  mark; the learner's LTI score is queued. A released grade saved again applies at once.
- ``version_changed``: a new current version of a quiz may not drop a question or a rubric item that a grade
  checked (``Conflict``, naming them: keep the item, or give it other points). Otherwise every grade of the
  exercise is re-scored with the new points and released ones are applied again: changing an item's points
  re-scores everything graded with it.
- Functions take keyword-only arguments, flush, and never commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Select, select
from sqlalchemy.orm import Session, selectinload

from app.domain import courses
from app.domain.lti.scores import queue_score
from app.domain.models import (
    Assignment,
    CourseRole,
    Exercise,
    ExerciseVersion,
    ManualGrade,
    Role,
    Submission,
    TestResult,
    User,
    utcnow,
)
from worker.bank.quiz import QuestionResult, Quiz, TextQuestion, parse_quiz
from worker.core.errors import Conflict, InvalidInput, NotFound
from worker.core.outcome import Verdict

MAX_COMMENT_CHARS = 4000
MAX_ID = 2**31 - 1


@dataclass(frozen=True)
class Counts:
    ungraded: int
    graded: int  # graded, not released yet
    released: int


def current_quiz(exercise: Exercise) -> Quiz | None:
    """Return the quiz of the exercise's current version, or None for a code exercise."""
    version = exercise.current_version
    if version is None or version.kind != "quiz":
        return None
    return parse_quiz(exercise.slug, dict(version.files)["quiz.toml"])


def question_of(exercise: Exercise, question_id: str) -> TextQuestion:
    """Return the staff-graded text question ``question_id`` of the exercise's current quiz."""
    quiz = current_quiz(exercise)
    question = quiz.by_id().get(question_id) if quiz is not None else None
    if not isinstance(question, TextQuestion):
        raise InvalidInput(f"the current version of {exercise.slug!r} has no text question {question_id!r}")
    return question


def open_grades(*, session: Session, submission: Submission, exercise: Exercise, results: list[QuestionResult]) -> None:
    """Add an ungraded ``ManualGrade`` for every pending answer among ``results``."""
    for result in results:
        if result.pending:
            session.add(ManualGrade(submission=submission, exercise_id=exercise.id, question=result.id,
                                    max_points=result.max_score))  # fmt: skip


def answer_text(grade: ManualGrade) -> str:
    """Return the learner's text answer to the grade's question (an attempt stores its answers as JSON)."""
    try:
        answers = json.loads(grade.submission.code)
    except ValueError:
        return ""
    value = answers.get(grade.question) if isinstance(answers, dict) else None
    return value if isinstance(value, str) else ""


def may_grade(*, session: Session, grade: ManualGrade, user: User) -> bool:
    """Say whether ``user`` may grade ``grade``: instructors, admins, and the course staff of its assignment."""
    if user.role in (Role.instructor, Role.admin):
        return True
    assignment_id = grade.submission.assignment_id
    assignment = session.get(Assignment, assignment_id) if assignment_id is not None else None
    if assignment is None:
        return False
    return courses.is_staff(courses.course_role(session=session, course=assignment.course, user=user))


def get_grade(*, session: Session, grade_id: int, user: User) -> ManualGrade:
    """Return grade ``grade_id`` if ``user`` may grade it; else ``NotFound``."""
    grade = session.get(ManualGrade, grade_id) if 0 < grade_id <= MAX_ID else None
    if grade is None or not may_grade(session=session, grade=grade, user=user):
        raise NotFound(f"no grade {grade_id} to grade")
    return grade


def _scoped(*, exercise: Exercise | None = None, assignment: Assignment | None = None) -> Select[ManualGrade]:
    stmt = select(ManualGrade).join(Submission, ManualGrade.submission_id == Submission.id)
    if exercise is not None:
        stmt = stmt.where(ManualGrade.exercise_id == exercise.id)
    if assignment is not None:
        stmt = stmt.where(Submission.assignment_id == assignment.id)
    return stmt.order_by(Submission.created_at, ManualGrade.id)


def queue(
    *, session: Session, exercise: Exercise | None = None, assignment: Assignment | None = None, limit: int = 500
) -> list[ManualGrade]:
    """Return the grades of an exercise (or of the work under an assignment), oldest attempt first."""
    stmt = _scoped(exercise=exercise, assignment=assignment).options(
        selectinload(ManualGrade.submission).selectinload(Submission.user)
    )
    return list(session.scalars(stmt.limit(limit)))


def next_ungraded(
    *,
    session: Session,
    exercise: Exercise | None = None,
    assignment: Assignment | None = None,
    after: ManualGrade | None = None,
) -> ManualGrade | None:
    """Return the oldest ungraded grade of the exercise (or assignment), after ``after`` in the queue when given."""
    stmt = _scoped(exercise=exercise, assignment=assignment).where(ManualGrade.graded_at.is_(None))
    if after is not None:
        at, key = after.submission.created_at, after.id
        stmt = stmt.where((Submission.created_at > at) | ((Submission.created_at == at) & (ManualGrade.id > key)))
    return session.scalars(stmt.limit(1)).first()


def counts(*, session: Session, exercise: Exercise | None = None, assignment: Assignment | None = None) -> Counts:
    """Count the grades of an exercise (or assignment): ungraded, graded but not released, released."""
    rows = session.execute(_scoped(exercise=exercise, assignment=assignment).order_by(None).with_only_columns(
        ManualGrade.graded_at.is_not(None), ManualGrade.released_at.is_not(None)
    )).all()  # fmt: skip
    graded = [bool(g) for g, _ in rows]
    released = sum(1 for _, r in rows if r)
    return Counts(ungraded=graded.count(False), graded=graded.count(True) - released, released=released)


def _comment(text: str) -> str:
    comment = text.strip()
    if len(comment) > MAX_COMMENT_CHARS:
        raise InvalidInput(f"the comment is longer than {MAX_COMMENT_CHARS} characters; shorten it")
    if "\x00" in comment:
        raise InvalidInput("the comment holds a NUL character, which is not text")
    return comment


def save(
    *, session: Session, grade: ManualGrade, user: User, checked: list[str], comment: str, revision: int
) -> ManualGrade:
    """Record ``user``'s grade: the ``checked`` rubric items and a comment, if ``revision`` is still current."""
    if not may_grade(session=session, grade=grade, user=user):
        raise NotFound(f"no grade {grade.id} to grade")
    exercise = session.get(Exercise, grade.exercise_id)
    assert exercise is not None  # the foreign key cascades
    question = question_of(exercise, grade.question)
    known = [r.id for r in question.rubric_items]
    unknown = sorted(set(checked) - set(known))
    if unknown:
        raise InvalidInput(f"no rubric item {', '.join(map(repr, unknown))} in question {grade.question!r}")
    text = _comment(comment)
    if revision != grade.revision:
        who = grade.graded_by.email if grade.graded_by else "someone"
        raise Conflict(f"{who} saved this grade while you were grading it: look at their grade, then save again")
    grade.checked = [i for i in known if i in set(checked)]
    grade.comment = text
    grade.points = question.rubric_score(grade.checked)
    grade.max_points = question.points
    grade.graded_by_id, grade.graded_at = user.id, utcnow()
    grade.revision += 1
    session.flush()
    if grade.released_at is not None:
        apply(session=session, submission=grade.submission)
    return grade


def _message(question: TextQuestion, grade: ManualGrade) -> str:
    lines = [f"Graded by staff: {grade.points or 0:g} of {question.points:g} points."]
    for item in question.rubric_items:
        if item.id in grade.checked:
            lines.append(f"✓ {item.points:+g} {item.text}")
        elif item.points > 0:  # a deduction that did not apply is not worth a line
            lines.append(f"✗ missed {item.points:+g}: {item.text}")
    if grade.comment:
        lines.append(f"Comment: {grade.comment}")
    lines.append(f"Model answer: {question.model_answer}")
    return "\n".join(lines)


def apply(*, session: Session, submission: Submission) -> None:
    """Put the submission's released grades into its test results, score and verdict; queue its LTI score."""
    grades = {g.question: g for g in session.scalars(
        select(ManualGrade).where(ManualGrade.submission_id == submission.id, ManualGrade.released_at.is_not(None))
    )}  # fmt: skip
    exercise = submission.exercise_version.exercise
    quiz = current_quiz(exercise)
    if quiz is None or not grades:
        return
    for test in session.scalars(select(TestResult).where(TestResult.submission_id == submission.id)):
        grade = grades.get(test.name)
        question = quiz.by_id().get(test.name)
        if grade is None or not isinstance(question, TextQuestion) or grade.points is None:
            continue
        test.points = grade.points
        test.max_points = question.points
        test.outcome = "passed" if grade.points >= question.points else "failed"
        test.message = _message(question, grade)
    session.flush()
    tests = session.scalars(select(TestResult).where(TestResult.submission_id == submission.id)).all()
    submission.score = round(sum(t.points for t in tests), 6)
    submission.max_score = round(sum(t.max_points for t in tests), 6)  # the current quiz's, after a re-score
    pass_mark = submission.max_score * quiz.pass_percent / 100 - 1e-9
    submission.verdict = Verdict.passed if submission.score >= pass_mark else Verdict.failed
    submission.message = (f"quiz attempt: {submission.score:g} of {submission.max_score:g} points "
                          f"(pass mark {quiz.pass_percent:g}%), staff-graded answers included")  # fmt: skip
    session.flush()
    queue_score(session=session, submission=submission)


def may_release(*, session: Session, user: User, assignment: Assignment | None = None) -> bool:
    """Say whether ``user`` may release grades: instructors and admins; for an assignment, its course's instructors."""
    if user.role in (Role.instructor, Role.admin):
        return True
    if assignment is None:
        return False
    return courses.course_role(session=session, course=assignment.course, user=user) is CourseRole.instructor


def release(
    *, session: Session, user: User, exercise: Exercise | None = None, assignment: Assignment | None = None
) -> int:
    """Release every graded, unreleased grade of the exercise (or assignment) to its learner; return how many."""
    if not may_release(session=session, user=user, assignment=assignment):
        raise NotFound("no grades here that you may release")
    stmt = _scoped(exercise=exercise, assignment=assignment)
    chosen = list(session.scalars(stmt.where(ManualGrade.graded_at.is_not(None), ManualGrade.released_at.is_(None))))
    now = utcnow()
    for grade in chosen:
        grade.released_at = now
    session.flush()
    for submission_id in sorted({g.submission_id for g in chosen}):
        submission = session.get(Submission, submission_id)
        if submission is not None:
            apply(session=session, submission=submission)
    return len(chosen)


def version_changed(*, session: Session, exercise: Exercise, version: ExerciseVersion) -> None:
    """Refuse ``version`` if it drops a graded question or checked item; else re-score the exercise's grades."""
    if version.kind != "quiz":
        return
    grades = list(session.scalars(select(ManualGrade).where(ManualGrade.exercise_id == exercise.id)))
    if not grades:
        return
    quiz = parse_quiz(exercise.slug, dict(version.files)["quiz.toml"])
    questions = quiz.by_id()
    missing: set[str] = set()
    for grade in grades:
        question = questions.get(grade.question)
        if not isinstance(question, TextQuestion):
            missing.add(f"question {grade.question!r}")
            continue
        ids = {r.id for r in question.rubric_items}
        missing.update(f"item {i!r} of question {grade.question!r}" for i in grade.checked if i not in ids)
    if missing:
        raise Conflict(
            f"version {version.number} of {exercise.slug!r} drops what staff grades use: {', '.join(sorted(missing))}; "
            "keep it (give it other points instead, and every grade using it is re-scored)"
        )
    touched: set[str] = set()
    for grade in grades:
        question = questions[grade.question]
        assert isinstance(question, TextQuestion)
        grade.max_points = question.points
        if grade.graded_at is not None:
            grade.points = question.rubric_score(grade.checked)
            if grade.released_at is not None:
                touched.add(grade.submission_id)
    session.flush()
    for submission_id in sorted(touched):
        submission = session.get(Submission, submission_id)
        if submission is not None:
            apply(session=session, submission=submission)
