"""Staff grading against rubrics, of quiz text answers and of code: the queue, one grade, release, re-scoring.

Contract:
- A staff-graded text question (``grading = "staff"``, the default) earns nothing when answered: ``open_grades``
  (called by ``quiz.answer_quiz``) adds one ungraded ``ManualGrade`` per pending answer of the attempt, and the
  attempt's ``TestResult`` for that question says ``pending``.
- A code exercise with ``[[rubric]]`` items in its ``exercise.toml``: ``open_code_grade`` (called where a grading
  is stored) adds one ungraded grade (question ``CODE``) for the learner's newest graded submission of the item
  (exercise x assignment, or practice), replacing an older one nobody graded yet. Its points (the checked items'
  sum, at most the positive items' sum, deductions allowed) and its line comments come on top of the tests:
  once released, a ``RUBRIC_TEST`` test result carries them, and the submission's score is the sum of its
  tests' points clamped to 0..the sum of their maxima; the tests' verdict stands. A submission graded again
  (a regrade) keeps its staff grade, applied again once released.
- Who grades: instructors and admins; for an attempt made under an assignment, the course's TAs too
  (``may_grade``). Anyone else gets ``NotFound``.
- ``queue``: an exercise's grades (or those of the work under an assignment, for its course's staff), oldest
  attempt first; ``next_ungraded`` the first ungraded one after ``after`` (or from the start), so a grader can
  skip one; ``counts`` how many are ungraded, graded, released.
- ``save``: the checked rubric item ids (each must be an item of the question in the exercise's current quiz:
  ``InvalidInput`` otherwise) and a comment (at most ``MAX_COMMENT_CHARS``). ``revision`` must be the one the
  grader loaded, else ``Conflict``: another grader saved in between, and the caller shows their version instead
  of silently overwriting it. Points are ``Rubric.score``: the checked items' sum, clamped to 0..points for a
  text answer (a code rubric may deduct below 0). Line comments (code only, at most ``MAX_LINE_COMMENTS``) name a
  line of the submission. Each save records who and when and bumps the revision.
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
import math
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Select, func, select
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
from worker.bank.quiz import QuestionResult, Quiz, RubricItem, TextQuestion, parse_quiz, score_items
from worker.bank.spec import read_meta
from worker.core import humane
from worker.core.errors import Conflict, InvalidInput, NotFound
from worker.core.outcome import Verdict

MAX_COMMENT_CHARS = 4000
MAX_LINE_COMMENTS = 200
CODE = "code"  # the question name of a code submission's grade
RUBRIC_TEST = "staff rubric"  # the test result that carries a code grade's points
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
    graded, released = ManualGrade.graded_at.is_not(None), ManualGrade.released_at.is_not(None)
    scoped = _scoped(exercise=exercise, assignment=assignment).order_by(None)
    rows = session.execute(scoped.with_only_columns(graded, released, func.count()).group_by(graded, released))
    tally = {(bool(g), bool(r)): int(n) for g, r, n in rows}
    return Counts(ungraded=tally.get((False, False), 0), graded=tally.get((True, False), 0),
                  released=tally.get((True, True), 0))  # fmt: skip


def _comment(text: str) -> str:
    comment = text.strip()
    if len(comment) > MAX_COMMENT_CHARS:
        raise InvalidInput(f"the comment is longer than {MAX_COMMENT_CHARS} characters; shorten it")
    if "\x00" in comment:
        raise InvalidInput("the comment holds a NUL character, which is not text")
    return comment


def _line_comments(grade: ManualGrade, lines: list[tuple[int, str]]) -> list[dict[str, object]]:
    if lines and grade.question != CODE:
        raise InvalidInput("line comments are for code submissions")
    if len(lines) > MAX_LINE_COMMENTS:
        raise InvalidInput(f"at most {MAX_LINE_COMMENTS} line comments")
    count = grade.submission.code.count("\n") + 1
    out: list[dict[str, object]] = []
    for line, text in sorted(lines):
        body = text.strip()
        if not body:
            continue
        if not 1 <= line <= count:
            raise InvalidInput(f"line {line} is not in the submission (it has {count} lines)")
        out.append({"line": line, "text": _comment(body)})
    return out


def save(
    *,
    session: Session,
    grade: ManualGrade,
    user: User,
    checked: list[str],
    comment: str,
    revision: int,
    line_comments: list[tuple[int, str]] | None = None,
) -> ManualGrade:
    """Record ``user``'s grade: the ``checked`` rubric items and a comment, if ``revision`` is still current."""
    if not may_grade(session=session, grade=grade, user=user):
        raise NotFound(f"no grade {grade.id} to grade")
    exercise = session.get(Exercise, grade.exercise_id)
    assert exercise is not None  # the foreign key cascades
    question = rubric_for(exercise, grade.question)
    lines = _line_comments(grade, list(line_comments or []))
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
    grade.line_comments = lines
    grade.points = question.score(grade.checked)
    grade.max_points = question.points
    grade.graded_by_id, grade.graded_at = user.id, utcnow()
    grade.revision += 1
    session.flush()
    if grade.released_at is not None:
        apply(session=session, submission=grade.submission)
    return grade


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
    """Put the submission's released grades into its test results and score; queue its LTI score."""
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
    grades = list(session.scalars(select(ManualGrade).where(ManualGrade.exercise_id == exercise.id)))
    if not grades:
        return
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
    for submission_id in sorted(touched):
        submission = session.get(Submission, submission_id)
        if submission is not None:
            apply(session=session, submission=submission)
