"""Staff grading of code against an exercise's ``[[rubric]]``: the newest attempt waits, points on top of the tests,
deductions, line comments, release, regrades, and rubric changes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.exercises.bank import upsert_exercise
from app.domain.models import Exercise, ManualGrade, Role, Submission, SubmissionStatus, TestResult, User
from app.domain.results import staff_grades as sg
from app.domain.review import staff_grading as mg
from app.domain.submissions.regrade import start_regrade
from tests.app.web.test_api_instructor import token as csrf_token
from tests.conftest import tiny_files
from worker.bank.spec import ExerciseSpec
from worker.core.errors import Conflict, ExerciseFormatError, InvalidInput
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
RUBRIC = """
[[rubric]]
id = "clear-names"
points = 1
text = "Names say what they hold."

[[rubric]]
id = "explains"
points = 1
text = "A comment says why negative numbers work."

[[rubric]]
id = "hardcoded"
points = -2
text = "Hard-codes the answers of the visible tests."
"""
CODE = "def add(a, b):\n    # plain addition\n    return a + b\n"


def exercise_files(rubric: str = RUBRIC, comments: str = 'rubric_comments = ["Name the numbers."]\n') -> dict[str, str]:
    files = tiny_files(prompt_md="Write `add`.\n", queue="cpu", tag="rubric")
    head, points = files["exercise.toml"].split("\n[points]\n", 1)
    files["exercise.toml"] = head + "\n" + comments + "\n[points]\n" + points + rubric
    return files


@pytest.fixture
def exercise(db_session: Session) -> Exercise:
    spec = ExerciseSpec.from_files(f"rubric-{uuid.uuid4().hex[:8]}", exercise_files())
    found, _ = upsert_exercise(session=db_session, spec=spec)
    db_session.commit()
    return found


def graded(
    db: Session, exercise: Exercise, user: User, *, small: bool = True, assignment_id: int | None = None
) -> Submission:
    """Store a graded submission (test_small 2 points, test_negative 3) and queue it as the task would."""
    assert exercise.current_version is not None
    sub = Submission(user_id=user.id, exercise_version_id=exercise.current_version.id, code=CODE,
                     status=SubmissionStatus.graded, verdict=Verdict.passed if small else Verdict.failed,
                     score=5.0 if small else 3.0, max_score=5.0, assignment_id=assignment_id)  # fmt: skip
    sub.tests.extend([
        TestResult(position=0, name="test_add.py::test_small", outcome="passed" if small else "failed",
                   points=2.0 if small else 0.0, max_points=2.0),
        TestResult(position=1, name="test_add.py::test_negative", outcome="passed", points=3.0, max_points=3.0),
    ])  # fmt: skip
    db.add(sub)
    db.flush()
    sg.open_code_grade(session=db, submission=sub)
    db.commit()
    return sub


def grades(db: Session, exercise: Exercise) -> list[ManualGrade]:
    return list(db.scalars(select(ManualGrade).where(ManualGrade.exercise_id == exercise.id).order_by(ManualGrade.id)))


def test_the_format_checks_the_rubric() -> None:
    spec = ExerciseSpec.from_files("ok-rubric", exercise_files())
    assert [r.id for r in spec.rubric] == ["clear-names", "explains", "hardcoded"] and spec.rubric_points == 2.0
    assert spec.rubric_comments == ("Name the numbers.",) and spec.max_score == 5.0  # the tests' points only
    twice = RUBRIC + '\n[[rubric]]\nid = "explains"\npoints = 1\ntext = "Again."\n'
    with pytest.raises(ExerciseFormatError, match="'explains' twice"):
        ExerciseSpec.from_files("bad-rubric", exercise_files(twice))
    with pytest.raises(ExerciseFormatError, match="must not be 0"):
        ExerciseSpec.from_files("bad-rubric", exercise_files('\n[[rubric]]\nid = "x"\npoints = 0\ntext = "Nothing."\n'))


def test_only_the_newest_attempt_waits_and_a_graded_one_stays(
    db_session: Session, exercise: Exercise, learner: User, instructor: User, make_user: Callable[..., User]
) -> None:
    first = graded(db_session, exercise, learner, small=False)
    second = graded(db_session, exercise, learner)
    assert [g.submission_id for g in grades(db_session, exercise)] == [second.id]  # the first was superseded
    mg.save(session=db_session, grade=grades(db_session, exercise)[0], user=instructor, checked=["clear-names"],
            comment="", revision=0)  # fmt: skip
    third = graded(db_session, exercise, learner)
    other = graded(db_session, exercise, make_user(Role.learner))
    assert [g.submission_id for g in grades(db_session, exercise)] == [second.id, third.id, other.id]
    assert first.id not in {g.submission_id for g in grades(db_session, exercise)}


def test_release_adds_the_rubric_on_top_of_the_tests_with_line_comments(
    db_session: Session, exercise: Exercise, learner: User, instructor: User
) -> None:
    sub = graded(db_session, exercise, learner, small=False)  # tests: 3 of 5
    (grade,) = grades(db_session, exercise)
    assert (grade.question, grade.max_points, sg.answer_text(grade)) == (sg.CODE, 2.0, CODE)
    mg.save(session=db_session, grade=grade, user=instructor, checked=["clear-names", "explains"], comment="Tidy.",
            revision=0, line_comments=[(2, "This comment earns its point."), (3, "  ")])  # fmt: skip
    assert grade.points == 2.0 and grade.line_comments == [{"line": 2, "text": "This comment earns its point."}]
    with pytest.raises(InvalidInput, match="line 9 is not in the submission"):
        mg.save(session=db_session, grade=grade, user=instructor, checked=[], comment="", revision=1,
                line_comments=[(9, "far away")])  # fmt: skip
    assert sub.score == 3.0  # not released yet
    mg.release(session=db_session, user=instructor, exercise=exercise)
    db_session.commit()
    db_session.refresh(sub)
    assert (sub.score, sub.max_score, sub.verdict) == (5.0, 7.0, Verdict.failed)  # the tests' verdict stands
    rubric = next(t for t in sub.tests if t.name == sg.RUBRIC_TEST)
    assert (rubric.points, rubric.max_points, rubric.position) == (2.0, 2.0, 2)
    assert "Line 2: This comment earns its point." in rubric.message and "Comment: Tidy." in rubric.message
    # A deduction can take points the tests gave, never below 0 in all.
    mg.save(session=db_session, grade=grade, user=instructor, checked=["hardcoded"], comment="", revision=1)
    assert (grade.points, sub.score) == (-2.0, 1.0)


def test_a_regrade_keeps_the_staff_grade_and_applies_it_again(
    db_session: Session, exercise: Exercise, learner: User, instructor: User
) -> None:
    sub = graded(db_session, exercise, learner)
    (grade,) = grades(db_session, exercise)
    mg.save(session=db_session, grade=grade, user=instructor, checked=["explains"], comment="", revision=0)
    mg.release(session=db_session, user=instructor, exercise=exercise)
    db_session.commit()
    assert sub.score == 6.0
    assert exercise.current_version is not None
    start_regrade(session=db_session, exercise=exercise, target=exercise.current_version, submissions=[sub],
                  user=instructor)  # fmt: skip
    assert sub.status is SubmissionStatus.queued and sub.tests == []
    # The grading stores its tests again, then the task calls open_code_grade.
    sub.status, sub.score = SubmissionStatus.graded, 5.0
    small = TestResult(position=0, name="test_add.py::test_small", outcome="passed", points=2.0, max_points=2.0)
    negative = TestResult(position=1, name="test_add.py::test_negative", outcome="passed", points=3.0, max_points=3.0)
    sub.tests.extend([small, negative])
    db_session.flush()
    sg.open_code_grade(session=db_session, submission=sub)
    assert sub.score == 6.0 and len(grades(db_session, exercise)) == 1


def test_rubric_changes_rescore_and_dropping_a_used_item_is_refused(
    db_session: Session, exercise: Exercise, learner: User, instructor: User
) -> None:
    sub = graded(db_session, exercise, learner)
    (grade,) = grades(db_session, exercise)
    mg.save(session=db_session, grade=grade, user=instructor, checked=["clear-names"], comment="", revision=0)
    mg.release(session=db_session, user=instructor, exercise=exercise)
    db_session.commit()
    assert (sub.score, sub.max_score) == (6.0, 7.0)
    richer = RUBRIC.replace('id = "clear-names"\npoints = 1', 'id = "clear-names"\npoints = 2')
    upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(exercise.slug, exercise_files(richer)))
    assert (grade.points, grade.max_points, sub.score, sub.max_score) == (2.0, 3.0, 7.0, 8.0)
    db_session.commit()
    without = RUBRIC.split('\n[[rubric]]\nid = "explains"')[0].replace('id = "clear-names"', 'id = "names"')
    with pytest.raises(Conflict, match="item 'clear-names' of the code rubric"):
        upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(exercise.slug, exercise_files(without)))


def test_the_form_refuses_a_line_that_is_not_one(
    client: TestClient, login: Callable[..., None], db_session: Session, exercise: Exercise, learner: User,
    instructor: User,
) -> None:  # fmt: skip
    graded(db_session, exercise, learner)
    (grade,) = grades(db_session, exercise)
    login(client, instructor)
    url = f"/grading/{grade.id}"
    page = client.get(url)
    assert page.status_code == 200 and 'id="learner-code"' in page.text and "# plain addition" in page.text
    base = {"csrf_token": csrf_token(client, url), "revision": "0", "item": ["explains"]}
    for number, reason in (("abc", "as a number"), ("99", "line 99 is not in the submission")):
        refused = client.post(url, data={**base, "line": [number, ""], "line_text": ["Look here.", ""]})
        assert refused.status_code == 422 and reason in refused.text, number
    saved = client.post(url, data={**base, "line": ["2", ""], "line_text": ["Nice comment.", ""]},
                        follow_redirects=False)  # fmt: skip
    assert saved.status_code == 303
    db_session.refresh(grade)
    assert grade.line_comments == [{"line": 2, "text": "Nice comment."}] and grade.points == 1.0
    assert "Nice comment." in client.get(url).text


def test_the_grading_page_shows_the_variant_the_learner_had(
    client: TestClient, login: Callable[..., None], db_session: Session, exercise: Exercise, learner: User,
    instructor: User, make_user: Callable[..., User],
) -> None:  # fmt: skip
    with_variant = graded(db_session, exercise, learner)
    with_variant.params = {
        "gpus": 4,
        "batch": 32,
    }  # as an exercise with [params] stores it (app.domain.catalog.variants)
    plain = graded(db_session, exercise, make_user(Role.learner))
    db_session.commit()
    by_submission = {g.submission_id: g for g in grades(db_session, exercise)}
    login(client, instructor)
    page = client.get(f"/grading/{by_submission[with_variant.id].id}")
    assert page.status_code == 200
    assert 'id="grade-variant"' in page.text and "variant: <code>batch=32</code>, <code>gpus=4</code>" in page.text
    assert 'id="grade-variant"' not in client.get(f"/grading/{by_submission[plain.id].id}").text
