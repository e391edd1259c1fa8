"""Visibility tiers on real rows: what a learner's result shows of each test, in the API, SSE and history page."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.courses.visibility import EVERYTHING, shown_for, shown_tests
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    ExerciseVersion,
    Extension,
    Role,
    Submission,
    SubmissionStatus,
    TestResult,
    User,
)
from app.web.schemas.submissions import SubmissionOut
from tests.app.web.test_api_submissions import SUBMISSION_KEYS, TEST_KEYS, _events
from tests.app.web.test_query_counts import counting_selects
from tests.conftest import tiny_files
from worker.bank.spec import ExerciseSpec
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

SMALL, NEGATIVE = "test_add.py::test_small", "test_add.py::test_negative"
SECRET = "assert add(-1, -2) == -3 SECRET-INPUT"  # the failure message a held-back test must never show
NOW = datetime.now(UTC)
PAST, FUTURE = NOW - timedelta(days=2), NOW + timedelta(days=2)
MakeExercise = Callable[..., Exercise]
Submit = Callable[..., Submission]


@pytest.fixture
def make_tiered(db_session: Session) -> MakeExercise:
    """Return a factory of a synced tiny exercise whose ``exercise.toml`` ends with ``tiers``."""

    def make(tiers: str = "") -> Exercise:
        tag = uuid.uuid4().hex[:12]
        files = tiny_files(prompt_md="# Add\n", queue="cpu", tag=tag)
        # Top-level keys go before the first table; [visibility] goes last.
        head, _, tables = files["exercise.toml"].partition("\n[points]")
        default, _, table = tiers.partition("[visibility]")
        files["exercise.toml"] = f"{head}\n{default}\n[points]{tables}\n" + (f"[visibility]{table}" if table else "")
        exercise, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(f"tiers-{tag}", files))
        db_session.commit()
        return exercise

    return make


@pytest.fixture
def submit(db_session: Session) -> Submit:
    """Return a factory of a graded submission: ``test_small`` passed (2/2), ``test_negative`` failed (0/3)."""

    def make(user: User, exercise: Exercise, assignment: Assignment | None = None) -> Submission:
        assert exercise.current_version is not None
        submission = Submission(
            user=user,
            exercise_version=exercise.current_version,
            assignment_id=assignment.id if assignment else None,
            code="def add(a, b):\n    return a + b\n",
            status=SubmissionStatus.graded,
            verdict=Verdict.failed,
            score=2.0,
            max_score=5.0,
            stdout="learner output",
            finished_at=NOW,
        )
        submission.tests = [
            TestResult(position=0, name=SMALL, outcome="passed", message="", points=2, max_points=2),
            TestResult(position=1, name=NEGATIVE, outcome="failed", message=SECRET, points=0, max_points=3),
        ]
        db_session.add(submission)
        db_session.commit()
        return submission

    return make


@pytest.fixture
def make_assignment(db_session: Session) -> Callable[..., Assignment]:
    """Return a factory of a published assignment, in a new course, holding ``exercise``."""

    def make(exercise: Exercise, **dates: Any) -> Assignment:
        course = Course(slug=f"course-{uuid.uuid4().hex[:10]}", title="GPU programming")
        assignment = Assignment(course=course, title="Week 1", opens_at=NOW - timedelta(days=9), **dates)
        assignment.items.append(AssignmentItem(exercise=exercise, position=0))
        db_session.add(assignment)
        db_session.commit()
        return assignment

    return make


def _tests(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in body["tests"]}


def _withheld(body: dict[str, Any], name: str, max_points: float) -> bool:
    """Say whether ``name`` is shown by name and worth only."""
    test = _tests(body)[name]
    return test == {
        "name": name, "outcome": "hidden", "message": "", "details": "", "points": 0.0, "max_points": max_points,
        "visible": False,
    }  # fmt: skip


def _as_utc(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


# --- "never" ----------------------------------------------------------------------------------------------------


def test_a_never_test_never_reveals_its_message_to_the_learner(
    learner_client: TestClient,
    learner: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    db_session: Session,
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "never"\n')
    closed = make_assignment(exercise, due_at=PAST)  # even long after the deadline
    ids = [submit(learner, exercise).id, submit(learner, exercise, closed).id]

    for submission_id in ids:
        body = learner_client.get(f"/api/submissions/{submission_id}").json()
        assert set(body) == SUBMISSION_KEYS and [set(t) for t in body["tests"]] == [TEST_KEYS, TEST_KEYS]
        assert _withheld(body, NEGATIVE, 3.0) and _tests(body)[SMALL]["visible"] is True
        assert body["hidden_tests"] == 1 and body["newly_visible"] == [] and body["reveals_at"] is None
        assert SECRET not in json.dumps(body)
        # The grade and the program's own output stay as they were.
        assert (body["score"], body["max_score"], body["verdict"], body["stdout"]) == (
            2.0,
            5.0,
            "failed",
            "learner output",
        )

        with learner_client.stream("GET", f"/api/submissions/{submission_id}/events") as stream:
            events = list(_events(stream.iter_lines()))
        assert len(events) == 1 and events[0][0] == "status"
        snapshot = json.loads(events[0][1])
        assert _withheld(snapshot, NEGATIVE, 3.0) and snapshot["hidden_tests"] == 1 and SECRET not in events[0][1]

    mine = learner_client.get("/api/me/submissions").json()
    assert {s["id"] for s in mine} == set(ids) and all(_withheld(s, NEGATIVE, 3.0) for s in mine)
    assert SECRET not in json.dumps(mine)
    attempts = learner_client.get(f"/api/exercises/{exercise.slug}/attempts").json()
    assert {s["id"] for s in attempts} == set(ids) and all(_withheld(s, NEGATIVE, 3.0) for s in attempts)
    assert SECRET not in json.dumps(attempts)

    page = learner_client.get(f"/exercises/{exercise.slug}/history")
    assert page.status_code == 200 and NEGATIVE in page.text and SMALL in page.text
    assert "SECRET-INPUT" not in page.text
    assert "held back" in page.text and "1 test shows only its name and points" in page.text


def test_default_visibility_covers_the_tests_the_table_does_not_name(
    learner_client: TestClient, learner: User, make_tiered: MakeExercise, submit: Submit
) -> None:
    exercise = make_tiered(f'default_visibility = "never"\n[visibility]\n"{SMALL}" = "now"\n')
    body = learner_client.get(f"/api/submissions/{submit(learner, exercise).id}").json()
    assert _withheld(body, NEGATIVE, 3.0) and _tests(body)[SMALL]["points"] == 2.0 and body["hidden_tests"] == 1


# --- "after_due" ------------------------------------------------------------------------------------------------


def test_an_after_due_test_shows_once_the_learners_deadline_passed(
    learner_client: TestClient,
    learner: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "after_due"\n')
    before = submit(learner, exercise, make_assignment(exercise, due_at=FUTURE))
    body = learner_client.get(f"/api/submissions/{before.id}").json()
    assert _withheld(body, NEGATIVE, 3.0) and body["newly_visible"] == []
    assert _as_utc(body["reveals_at"]) == FUTURE and SECRET not in json.dumps(body)

    after = submit(learner, exercise, make_assignment(exercise, due_at=PAST))
    body = learner_client.get(f"/api/submissions/{after.id}").json()
    assert _tests(body)[NEGATIVE] == {
        "name": NEGATIVE, "outcome": "failed", "message": SECRET, "details": "", "points": 0.0, "max_points": 3.0,
        "visible": True,
    }  # fmt: skip
    assert body["hidden_tests"] == 0 and body["newly_visible"] == [NEGATIVE] and body["reveals_at"] is None


def test_a_late_period_and_an_extension_postpone_the_reveal(
    learner: User,
    other_learner: User,
    instructor: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    db_session: Session,
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "after_due"\n')
    late_open = make_assignment(exercise, due_at=PAST, late_until=FUTURE)
    shown = shown_tests(session=db_session, submission=submit(learner, exercise, late_open), viewer=learner, now=NOW)
    assert shown.withheld == {NEGATIVE} and shown.reveals_at == FUTURE  # late submissions are still taken

    due_passed = make_assignment(exercise, due_at=PAST)
    mine, theirs = submit(learner, exercise, due_passed), submit(other_learner, exercise, due_passed)
    extension = Extension(
        assignment_id=due_passed.id, user=learner, due_at=FUTURE, granted_by=instructor, reason="ill", created_at=NOW
    )
    db_session.add(extension)
    db_session.commit()
    shown = shown_tests(session=db_session, submission=mine, viewer=learner, now=NOW)
    assert shown.withheld == {NEGATIVE} and shown.reveals_at == FUTURE and shown.newly_visible == ()
    # The extension is the learner's own: the others' deadline has passed.
    assert shown_tests(session=db_session, submission=theirs, viewer=other_learner, now=NOW).newly_visible == (
        NEGATIVE,
    )
    # Once the extended date passes it shows; and a revoked extension no longer holds it back.
    later = shown_tests(session=db_session, submission=mine, viewer=learner, now=FUTURE + timedelta(seconds=1))
    assert later.withheld == frozenset() and later.newly_visible == (NEGATIVE,)
    extension.revoked_at = NOW
    db_session.commit()
    assert shown_tests(session=db_session, submission=mine, viewer=learner, now=NOW).newly_visible == (NEGATIVE,)


def test_practice_and_an_assignment_without_due_date_never_reveal_after_due_tests(
    learner: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    db_session: Session,
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "after_due"\n')
    far = NOW + timedelta(days=3650)
    for assignment in (None, make_assignment(exercise)):
        shown = shown_tests(
            session=db_session, submission=submit(learner, exercise, assignment), viewer=learner, now=far
        )
        assert shown.withheld == {NEGATIVE} and shown.reveals_at is None and shown.newly_visible == ()


# --- staff --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", [Role.instructor, Role.admin])
def test_staff_see_everything(
    client: TestClient,
    login: Callable[..., None],
    make_user: Callable[..., User],
    learner: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    role: Role,
    db_session: Session,
) -> None:
    exercise = make_tiered(f'default_visibility = "never"\n[visibility]\n"{NEGATIVE}" = "after_due"\n')
    assignment = make_assignment(exercise, due_at=FUTURE)
    submission = submit(learner, exercise, assignment)
    staff = make_user(role)
    if role is Role.instructor:  # staff rights are per course: an instructor of the assignment's course
        membership.enroll(session=db_session, course=assignment.course, user=staff, role=CourseRole.instructor)
        db_session.commit()
    login(client, staff)
    body = client.get(f"/api/submissions/{submission.id}").json()
    assert all(t["visible"] for t in body["tests"]) and _tests(body)[NEGATIVE]["message"] == SECRET
    assert body["hidden_tests"] == 0 and body["newly_visible"] == [] and body["reveals_at"] is None
    listed = client.get(f"/api/instructor/exercises/{exercise.slug}/submissions").json()
    assert [t["message"] for t in listed[0]["tests"]] == ["", SECRET]


def test_course_staff_see_everything_of_their_course_only(
    make_user: Callable[..., User],
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    db_session: Session,
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "never"\n')
    theirs, elsewhere = make_assignment(exercise, due_at=FUTURE), make_assignment(exercise, due_at=FUTURE)
    ta = make_user(Role.learner)  # a site learner who is a TA of one course
    db_session.add(CourseMember(course_id=theirs.course_id, user=ta, role=CourseRole.ta))
    db_session.commit()
    staffed, learning = submit(ta, exercise, theirs), submit(ta, exercise, elsewhere)
    shown = shown_for(session=db_session, submissions=[staffed, learning], viewer=ta, now=NOW)
    assert shown[staffed.id] == EVERYTHING and shown[learning.id].withheld == {NEGATIVE}


def test_a_site_instructor_is_staff_of_their_courses_only(
    make_user: Callable[..., User],
    learner: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    db_session: Session,
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "never"\n')
    elsewhere = make_assignment(exercise, due_at=FUTURE)
    lecturer, reviewer = make_user(Role.instructor), make_user(Role.instructor)
    practice = membership.practice_course(session=db_session)
    membership.enroll(session=db_session, course=practice, user=reviewer, role=CourseRole.instructor)
    db_session.commit()
    own_work = submit(lecturer, exercise, elsewhere)  # a lecturer taking another course as a learner
    practised = submit(learner, exercise)
    by_lecturer = shown_for(session=db_session, submissions=[own_work, practised], viewer=lecturer, now=NOW)
    assert by_lecturer[own_work.id].withheld == {NEGATIVE} and by_lecturer[practised.id].withheld == {NEGATIVE}
    by_reviewer = shown_for(session=db_session, submissions=[practised], viewer=reviewer, now=NOW)
    assert by_reviewer[practised.id] == EVERYTHING  # the practice course's staff review practice work whole


# --- no tiers -------------------------------------------------------------------------------------------------------


def test_an_exercise_without_tiers_shows_everything_as_before(
    learner_client: TestClient, learner: User, make_tiered: MakeExercise, submit: Submit, db_session: Session
) -> None:
    exercise = make_tiered()
    submission = submit(learner, exercise)
    body = learner_client.get(f"/api/submissions/{submission.id}").json()
    assert body == SubmissionOut.of(submission).model_dump(mode="json")  # the staff view: nothing held back
    assert [(t["outcome"], t["message"], t["points"], t["visible"]) for t in body["tests"]] == [
        ("passed", "", 2.0, True),
        ("failed", SECRET, 0.0, True),
    ]
    assert body["hidden_tests"] == 0 and body["newly_visible"] == [] and body["reveals_at"] is None


# --- reading --------------------------------------------------------------------------------------------------------


def test_a_stored_exercise_toml_that_no_longer_reads_withholds_every_test(
    learner: User, make_tiered: MakeExercise, submit: Submit, db_session: Session
) -> None:
    exercise = make_tiered()
    version = exercise.current_version
    assert version is not None
    files = {**version.files, "exercise.toml": 'title = "x"\nno_such_key = 1\n'}
    db_session.execute(
        update(ExerciseVersion)
        .where(ExerciseVersion.id == version.id)
        .values(files=files, content_hash=uuid.uuid4().hex)
    )
    db_session.commit()
    db_session.refresh(version)
    shown = shown_tests(session=db_session, submission=submit(learner, exercise), viewer=learner, now=NOW)
    assert shown.withheld == {SMALL, NEGATIVE}


def test_a_list_is_read_in_a_fixed_number_of_queries(
    learner: User,
    make_tiered: MakeExercise,
    make_assignment: Callable[..., Assignment],
    submit: Submit,
    db_session: Session,
    pg_engine: Engine,
) -> None:
    def count(n: int) -> int:
        rows = []
        for _ in range(n):
            exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "after_due"\n')
            rows.append(submit(learner, exercise, make_assignment(exercise, due_at=PAST)))
        with counting_selects(pg_engine) as statements:
            shown = shown_for(session=db_session, submissions=rows, viewer=learner, now=NOW)
        assert all(s.newly_visible == (NEGATIVE,) for s in shown.values())
        return len(statements)

    assert count(1) == count(4) <= 4  # the new versions' exercise.toml, assignments, staff roles, extensions


def _measurement(test: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "test": test, "name": name, "value": 196.0, "unit": "B", "target": 196.0, "compare": "<=", "met": True,
        "modelled": False, "basis": "", "chart": None, **extra,
    }  # fmt: skip


def test_measurements_show_beside_their_targets_and_hide_with_their_test(
    learner_client: TestClient, learner: User, make_tiered: MakeExercise, submit: Submit, db_session: Session
) -> None:
    exercise = make_tiered(f'[visibility]\n"{NEGATIVE}" = "never"\n')
    submission = submit(learner, exercise)
    modelled = _measurement(SMALL, "modelled step time", modelled=True, basis="compute measured + PCIe-class link")
    submission.measurements = [
        _measurement(SMALL, "bytes per step"),
        modelled,
        _measurement(NEGATIVE, "SECRET-INPUT bytes"),
    ]
    db_session.commit()

    body = learner_client.get(f"/api/submissions/{submission.id}").json()
    assert [m["name"] for m in body["measurements"]] == ["bytes per step", "modelled step time"]
    assert body["measurements"][1] == modelled, "a modelled figure keeps its label and its basis"
    assert "SECRET-INPUT" not in json.dumps(body), "a held-back test's measurements are held back with it"
    staff = SubmissionOut.of(submission)
    assert [m.name for m in staff.measurements] == ["bytes per step", "modelled step time", "SECRET-INPUT bytes"]
