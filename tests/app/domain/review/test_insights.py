"""What the class gets wrong: failing tests with grouped messages, wrong quiz picks, attempts, who is stuck, CSV."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.domain.courses.policy import EVERYTHING
from app.domain.models import Exercise, Role, Submission, SubmissionStatus, TestResult, User
from app.domain.review.insights import exercise_insights
from app.domain.submissions.lifecycle import create_submission
from app.domain.submissions.quiz import answer_quiz
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
SMALL, NEGATIVE = "test_add.py::test_small", "test_add.py::test_negative"
QUIZ = """
[[question]]
id = "q1"
type = "single"
prompt = "Which one?"
options = [{ id = "a", text = "Option A" }, { id = "b", text = "Option B" }, { id = "c", text = "Option C" }]
answer = ["b"]
explanation = "Because B."

[[question]]
id = "q2"
type = "single"
prompt = "And this?"
options = [{ id = "a", text = "Yes" }, { id = "b", text = "No" }]
answer = ["a"]
explanation = "Because yes."
"""


def graded(
    db: Session, user: User, ex: TinyExercise, *, failing: dict[str, str], minutes: int, verdict: Verdict | None = None
) -> Submission:
    """Add a graded submission ``minutes`` after a fixed start, failing the tests named in ``failing``."""
    sub = create_submission(session=db, user=user, exercise=ex.exercise, code="x", max_bytes=65536)
    passed = not failing
    sub.status = SubmissionStatus.graded
    sub.verdict = verdict or (Verdict.passed if passed else Verdict.failed)
    sub.score = 5.0 - (2.0 if SMALL in failing else 0.0) - (3.0 if NEGATIVE in failing else 0.0)
    sub.created_at = START + timedelta(minutes=minutes)
    for position, (name, points) in enumerate(((SMALL, 2.0), (NEGATIVE, 3.0))):
        failed = name in failing
        sub.tests.append(TestResult(position=position, name=name, outcome="failed" if failed else "passed",
                                    message=failing.get(name, ""), points=0.0 if failed else points,
                                    max_points=points))  # fmt: skip
    db.flush()
    return sub


@pytest.fixture
def classroom(db_session: Session, make_user: Callable[..., User], tiny_exercise: TinyExercise) -> dict[str, User]:
    """Ada passes on her third attempt after 30 min; Bob is stuck after two; Cy passes at once; staff are ignored."""
    ada, bob, cy = (
        make_user(Role.learner, email=f"{n}-{uuid.uuid4().hex[:6]}@example.com") for n in ("ada", "bob", "cy")
    )
    staff = make_user(Role.instructor)
    off_by_one = "AssertionError: assert 2 == 3\nmore detail"
    graded(db_session, ada, tiny_exercise, failing={SMALL: off_by_one, NEGATIVE: "AssertionError: sign"}, minutes=0)
    graded(db_session, ada, tiny_exercise, failing={NEGATIVE: "AssertionError: sign"}, minutes=10)
    graded(db_session, ada, tiny_exercise, failing={}, minutes=30)
    graded(db_session, bob, tiny_exercise, failing={SMALL: off_by_one}, minutes=5)
    graded(db_session, bob, tiny_exercise, failing={SMALL: "AssertionError: assert 2 == 3\nother detail"}, minutes=6)
    graded(db_session, cy, tiny_exercise, failing={}, minutes=1)
    graded(db_session, staff, tiny_exercise, failing={SMALL: "STAFF-ONLY"}, minutes=2)
    # A platform error is not the learner's mistake: never counted, even with a failing test in it.
    graded(db_session, bob, tiny_exercise, failing={SMALL: "PLATFORM"}, minutes=7, verdict=Verdict.internal_error)
    db_session.commit()
    return {"ada": ada, "bob": bob, "cy": cy}


def test_failing_tests_rank_first_with_their_messages_grouped(
    db_session: Session, tiny_exercise: TinyExercise, classroom: dict[str, User]
) -> None:
    ins = exercise_insights(session=db_session, exercise=tiny_exercise.exercise, scope=EVERYTHING)
    assert ins.submissions == 6  # staff's and the platform error left out
    small, negative = ins.tests
    assert (small.name, small.failures, small.learners, small.points_lost) == (SMALL, 3, 2, 6.0)
    assert [(m.text, m.count) for m in small.messages] == [("AssertionError: assert 2 == 3", 3)]
    assert (negative.name, negative.failures, negative.learners) == (NEGATIVE, 2, 1)
    assert all("STAFF-ONLY" not in m.text and "PLATFORM" not in m.text for t in ins.tests for m in t.messages)


def test_attempts_and_time_to_pass_and_who_is_stuck(
    db_session: Session, tiny_exercise: TinyExercise, classroom: dict[str, User]
) -> None:
    ins = exercise_insights(session=db_session, exercise=tiny_exercise.exercise, scope=EVERYTHING)
    rows = {r.email: r for r in ins.learners}
    ada, bob, cy = (rows[classroom[n].email] for n in ("ada", "bob", "cy"))
    assert ins.learners[0] is bob and bob.stuck and [s.email for s in ins.stuck] == [bob.email]
    assert (bob.attempts, bob.best_score, bob.attempts_to_pass, bob.latest_failing) == (2, 3.0, None, [SMALL])
    assert (ada.attempts_to_pass, ada.time_to_pass_s, ada.best_score, ada.latest_failing) == (3, 1800.0, 5.0, [])
    assert (cy.attempts_to_pass, cy.time_to_pass_s) == (1, 0.0)
    assert ins.passed == 2 and ins.median_attempts_to_pass == 2.0 and ins.median_time_to_pass_s == 900.0
    assert ins.attempts_histogram == [1, 0, 1, 0, 0, 0]


def test_an_exercise_nobody_tried_has_empty_insights(
    db_session: Session, make_exercise: Callable[..., TinyExercise]
) -> None:
    ins = exercise_insights(session=db_session, exercise=make_exercise().exercise, scope=EVERYTHING)
    assert (ins.submissions, ins.tests, ins.learners, ins.picks) == (0, [], [], [])
    assert ins.median_attempts_to_pass is None and ins.attempts_histogram == [0] * 6


@pytest.fixture
def quiz(db_session: Session) -> Exercise:
    from app.domain.exercises.bank import upsert_exercise
    from worker.bank.spec import ExerciseSpec

    files = {"exercise.toml": 'title = "A quiz"\nkind = "quiz"\ntopic = "Quizzes"\n', "prompt.md": "Answer.",
             "quiz.toml": QUIZ}  # fmt: skip
    exercise, _ = upsert_exercise(
        session=db_session, spec=ExerciseSpec.from_files(f"quiz-{uuid.uuid4().hex[:8]}", files)
    )
    db_session.commit()
    return exercise


def test_quiz_picks_count_the_options_chosen_in_wrong_answers(
    db_session: Session, quiz: Exercise, make_user: Callable[..., User]
) -> None:
    one, two, three = (make_user(Role.learner) for _ in range(3))
    for user, q1 in ((one, "a"), (two, "a"), (three, "c")):
        answer_quiz(session=db_session, user=user, exercise=quiz, answers={"q1": [q1], "q2": ["a"]})
    answer_quiz(session=db_session, user=three, exercise=quiz, answers={"q1": ["b"], "q2": ["a"]})  # right: not a pick
    db_session.commit()
    ins = exercise_insights(session=db_session, exercise=quiz, scope=EVERYTHING)
    assert len(ins.picks) == 1  # q2 was never answered wrong
    (q1,) = ins.picks
    assert (q1.question, q1.wrong_attempts) == ("q1", 3)
    assert [(o.option, o.text, o.count, o.correct) for o in q1.options] == [("a", "Option A", 2, False),
                                                                            ("c", "Option C", 1, False)]  # fmt: skip
    assert [t.name for t in ins.tests][:1] == ["q1"] and ins.tests[0].failures == 3
    assert ins.passed == 1 and ins.stuck and len(ins.stuck) == 2


def test_page_api_and_csv_agree_and_are_staff_only(
    client: TestClient, login: Callable[..., None], instructor: User, learner: User, tiny_exercise: TinyExercise,
    classroom: dict[str, User],
) -> None:  # fmt: skip
    slug = tiny_exercise.slug
    login(client, learner)
    for path in (f"/instructor/exercises/{slug}/insights", f"/api/instructor/exercises/{slug}/insights",
                 f"/api/instructor/exercises/{slug}/insights.csv"):  # fmt: skip
        assert client.get(path, follow_redirects=False).status_code == 403, path
    login(client, instructor)
    body = client.get(f"/api/instructor/exercises/{slug}/insights").json()
    assert body["submissions"] == 6 and body["passed"] == 2
    assert body["tests"][0]["name"] == SMALL and body["tests"][0]["messages"][0]["count"] == 3
    assert body["learners"][0]["email"] == classroom["bob"].email and body["learners"][0]["stuck"] is True
    page = client.get(f"/instructor/exercises/{slug}/insights")
    assert page.status_code == 200
    assert "AssertionError: assert 2 == 3" in page.text and classroom["bob"].email in page.text and "stuck" in page.text
    csv_learners = client.get(f"/api/instructor/exercises/{slug}/insights.csv?table=learners")
    assert csv_learners.status_code == 200 and csv_learners.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(csv_learners.text)))
    by_email = {r["email"]: r for r in rows}
    assert by_email[classroom["ada"].email]["attempts_to_pass"] == "3"
    assert by_email[classroom["ada"].email]["time_to_pass_s"] == "1800"
    assert by_email[classroom["bob"].email]["passed"] == "no"
    tests = list(
        csv.DictReader(io.StringIO(client.get(f"/api/instructor/exercises/{slug}/insights.csv?table=tests").text))
    )
    assert [(r["test"], r["failures"]) for r in tests] == [(SMALL, "3"), (NEGATIVE, "2")]
    assert client.get(f"/api/instructor/exercises/{slug}/insights.csv?table=nope").status_code == 422
    assert client.get("/api/instructor/exercises/no-such-exercise/insights").status_code == 404


def test_csv_cells_that_a_spreadsheet_would_run_are_escaped(
    client: TestClient, login: Callable[..., None], instructor: User, make_user: Callable[..., User],
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    sly = make_user(Role.learner, email="=HYPERLINK@example.com")
    graded(db_session, sly, tiny_exercise, failing={SMALL: "=cmd|' /C calc'!A0"}, minutes=0)
    db_session.commit()
    login(client, instructor)
    learners = client.get(f"/api/instructor/exercises/{tiny_exercise.slug}/insights.csv").text
    tests = client.get(f"/api/instructor/exercises/{tiny_exercise.slug}/insights.csv?table=tests").text
    assert "'=hyperlink@example.com" in learners
    assert "'=cmd|' /C calc'!A0" in tests
