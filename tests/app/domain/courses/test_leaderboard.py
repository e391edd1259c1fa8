"""``app.domain.courses.leaderboard`` on real rows: who ranks, best per learner, ties, pseudonyms, who sees names."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.domain.courses import leaderboard, membership
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import Assignment, Course, CourseRole, Exercise, Role, Submission, SubmissionStatus, User
from tests.app.domain.courses.test_gradebook import add_assignment
from worker.bank.spec import ExerciseSpec
from worker.core.errors import NotFound
from worker.core.outcome import Verdict

pytestmark = pytest.mark.postgres

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
METRIC = "bytes per step"
SECRET = "a-test-secret-of-enough-characters-0123456789"
MakeUser = Callable[..., User]


def board_files(tag: str, *, order: str = "lower", extra: str = "") -> dict[str, str]:
    """Return a code exercise whose hidden test records ``METRIC`` and opts in to a board of it."""
    return {
        "exercise.toml": (
            f'title = "Fewer bytes {tag}"\nframework = "python"\n{extra}\n'
            f'[leaderboard]\nmetric = "{METRIC}"\norder = "{order}"\nlabel = "Bytes"\n'
        ),
        "prompt.md": "Send fewer bytes.\n",
        "starter.py": "def f():\n    return 0\n",
        "solution.py": "def f():\n    return 1\n",
        "tests/test_bytes.py": (
            f'def test_bytes(measure):\n    measure.record("{METRIC}", 10.0, unit="B")\n\n\n'
            'def test_other(measure):\n    measure.record("other", 1.0)\n'
        ),
    }


def board_exercise(db: Session, *, order: str = "lower", extra: str = "") -> Exercise:
    """Sync a board exercise with a unique slug."""
    tag = uuid.uuid4().hex[:10]
    exercise, _ = upsert_exercise(
        session=db, spec=ExerciseSpec.from_files(f"board-{tag}", board_files(tag, order=order, extra=extra))
    )
    db.commit()
    return exercise


def measured(
    db: Session, assignment: Assignment, user: User, exercise: Exercise, value: float | None, at: datetime, **kw: Any
) -> Submission:
    """Add a graded submission whose test recorded ``value`` of the metric (``None``: no such measurement)."""
    assert exercise.current_version is not None
    found = [{"test": "test_bytes.py::test_other", "name": "other", "value": 0.5, "unit": ""}]
    if value is not None:
        found.append({"test": kw.pop("test", "test_bytes.py::test_bytes"), "name": METRIC, "value": value, "unit": "B"})
    submission = Submission(
        user_id=user.id, exercise_version_id=exercise.current_version.id, assignment_id=assignment.id, code="x",
        status=kw.pop("status", SubmissionStatus.graded), verdict=kw.pop("verdict", Verdict.passed),
        score=kw.pop("score", 2.0), max_score=2.0, created_at=at, measurements=found, **kw,
    )  # fmt: skip
    db.add(submission)
    db.commit()
    return submission


@dataclass
class World:
    course: Course
    assignment: Assignment
    exercise: Exercise
    instructor: User
    ta: User
    learners: list[User]
    outsider: User
    other_learner: User  # a learner of another course


@pytest.fixture
def world(db_session: Session, make_user: MakeUser) -> World:
    db = db_session
    tag = uuid.uuid4().hex[:8]
    instructor, ta = make_user(Role.instructor), make_user(Role.learner)
    learners = [make_user(Role.learner, email=f"l{i}-{tag}@example.com") for i in range(5)]
    outsider, other_learner = make_user(Role.instructor), make_user(Role.learner)
    course = membership.create_course(session=db, slug=f"board-{tag}", title="Boards", creator=instructor)
    other = membership.create_course(session=db, slug=f"other-{tag}", title="Other", creator=outsider)
    membership.enroll(session=db, course=course, user=ta, role=CourseRole.ta)
    for learner in learners:
        membership.enroll(session=db, course=course, user=learner)
    membership.enroll(session=db, course=other, user=other_learner)
    db.commit()
    exercise = board_exercise(db)
    assignment = add_assignment(db, course, "Week", 0, [(exercise, 1.0)], is_published=True)
    return World(course, assignment, exercise, instructor, ta, learners, outsider, other_learner)


def read(db: Session, world: World, viewer: User) -> leaderboard.Board:
    return leaderboard.leaderboard(
        session=db, assignment=world.assignment, exercise=world.exercise, viewer=viewer, secret=SECRET
    )


def test_each_learners_best_passing_value_ranks_and_ties_share_a_rank(db_session: Session, world: World) -> None:
    db = db_session
    a, b, c, d, e = world.learners
    measured(db, world.assignment, a, world.exercise, 300.0, AT)
    best_a = measured(db, world.assignment, a, world.exercise, 100.0, AT + MINUTE)
    measured(db, world.assignment, a, world.exercise, 100.0, AT + 2 * MINUTE)  # equal later: the earlier stays
    measured(db, world.assignment, b, world.exercise, 50.0, AT, verdict=Verdict.failed, score=1.0)  # failed
    best_b = measured(db, world.assignment, b, world.exercise, 200.0, AT + 3 * MINUTE)
    measured(db, world.assignment, c, world.exercise, 100.0, AT + 5 * MINUTE)  # ties a, later
    failure = {"status": SubmissionStatus.error, "verdict": Verdict.internal_error}
    measured(db, world.assignment, d, world.exercise, 1.0, AT, **failure)  # the platform's failure
    measured(db, world.assignment, d, world.exercise, None, AT + MINUTE)  # passed, but nothing measured
    measured(db, world.assignment, e, world.exercise, 5.0, AT)
    board = read(db, world, world.instructor)
    ranks = [(r.rank, r.email, r.value) for r in board.rows]
    assert ranks == [
        (1, e.email, 5.0), (2, a.email, 100.0), (2, c.email, 100.0), (4, b.email, 200.0),
    ]  # fmt: skip
    assert board.rows[1].submission_id == best_a.id and board.rows[3].submission_id == best_b.id
    assert board.rows[1].submitted_at == AT + MINUTE


def test_higher_is_better_when_the_exercise_says_so(db_session: Session, world: World) -> None:
    db = db_session
    exercise = board_exercise(db, order="higher")
    assignment = add_assignment(db, world.course, "Higher", 1, [(exercise, 1.0)], is_published=True)
    a, b = world.learners[:2]
    measured(db, assignment, a, exercise, 0.5, AT)
    measured(db, assignment, b, exercise, 0.9, AT)
    board = leaderboard.leaderboard(session=db, assignment=assignment, exercise=exercise, viewer=a, secret=SECRET)
    assert [(r.rank, r.value, r.you) for r in board.rows] == [(1, 0.9, False), (2, 0.5, True)]


def test_a_measurement_a_tier_holds_back_never_ranks(db_session: Session, world: World) -> None:
    db = db_session
    exercise = board_exercise(db, extra='[visibility]\n"test_bytes.py::test_bytes" = "after_due"')
    assignment = add_assignment(db, world.course, "Tiered", 1, [(exercise, 1.0)], is_published=True)
    measured(db, assignment, world.learners[0], exercise, 1.0, AT)
    board = leaderboard.leaderboard(
        session=db, assignment=assignment, exercise=exercise, viewer=world.instructor, secret=SECRET
    )
    assert board.rows == ()


def test_only_current_learners_of_the_course_rank(db_session: Session, world: World, make_user: MakeUser) -> None:
    db = db_session
    a, b = world.learners[:2]
    measured(db, world.assignment, a, world.exercise, 10.0, AT)
    measured(db, world.assignment, b, world.exercise, 20.0, AT)
    measured(db, world.assignment, world.ta, world.exercise, 1.0, AT)  # staff: not a competitor
    membership.unenroll(session=db, course=world.course, user=b)
    db.commit()
    assert [r.value for r in read(db, world, world.instructor).rows] == [10.0]


def test_learners_see_pseudonyms_only_and_their_own_row_marked(db_session: Session, world: World) -> None:
    db = db_session
    a, b = world.learners[:2]
    mine = measured(db, world.assignment, a, world.exercise, 10.0, AT)
    measured(db, world.assignment, b, world.exercise, 20.0, AT)
    board = read(db, world, a)
    assert not board.names
    assert [(r.you, r.name, r.email) for r in board.rows] == [(True, None, None), (False, None, None)]
    assert [r.submission_id for r in board.rows] == [mine.id, None]  # another's submission stays unnamed
    text = repr(board.rows)
    for learner in (a, b):
        assert learner.email not in text and learner.email.split("@")[0] not in text
    staff = read(db, world, world.ta)
    assert staff.names and [r.email for r in staff.rows] == [a.email, b.email]
    assert [r.pseudonym for r in staff.rows] == [r.pseudonym for r in board.rows]  # the same words for everyone


def test_pseudonyms_are_stable_per_course_and_keyed_by_the_secret() -> None:
    one = leaderboard.pseudonym(secret=SECRET, course_id=1, user_id=7)
    assert one == leaderboard.pseudonym(secret=SECRET, course_id=1, user_id=7)
    adjective, animal, number = one.split(" ")
    assert adjective in leaderboard.ADJECTIVES and animal in leaderboard.ANIMALS and len(number) == 3
    others = {leaderboard.pseudonym(secret=SECRET, course_id=c, user_id=7) for c in range(2, 12)}
    assert len(others) > 5  # another course draws anew
    assert leaderboard.pseudonym(secret=SECRET + "x", course_id=1, user_id=7) != one
    drawn = {leaderboard.pseudonym(secret=SECRET, course_id=1, user_id=u) for u in range(200)}
    assert len(drawn) > 190  # words spread: collisions are rare (and told apart on a board)


def test_pseudonyms_that_collide_on_a_board_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leaderboard, "pseudonym", lambda **_: "Calm Otter 007")
    assert leaderboard._names(SECRET, 1, [9, 3, 5]) == {
        3: "Calm Otter 007", 5: "Calm Otter 007 (2)", 9: "Calm Otter 007 (3)",
    }  # fmt: skip


def test_a_pseudonym_is_the_same_across_assignments_of_the_course(db_session: Session, world: World) -> None:
    db = db_session
    a = world.learners[0]
    second = add_assignment(db, world.course, "Week 2", 1, [(world.exercise, 1.0)], is_published=True)
    measured(db, world.assignment, a, world.exercise, 10.0, AT)
    measured(db, second, a, world.exercise, 10.0, AT)
    first_name = read(db, world, a).rows[0].pseudonym
    again = leaderboard.leaderboard(session=db, assignment=second, exercise=world.exercise, viewer=a, secret=SECRET)
    assert again.rows[0].pseudonym == first_name


def test_no_board_without_opt_in_switched_off_or_for_outsiders(
    db_session: Session, world: World, make_exercise: Callable[..., Any]
) -> None:
    db = db_session
    for viewer in (world.outsider, world.other_learner):
        with pytest.raises(NotFound):
            read(db, world, viewer)
    plain = make_exercise().exercise
    held = add_assignment(db, world.course, "Plain", 1, [(plain, 1.0)], is_published=True)
    assert leaderboard.board_for(held, plain) is None
    with pytest.raises(NotFound):
        leaderboard.leaderboard(session=db, assignment=held, exercise=plain, viewer=world.instructor)
    assert leaderboard.board_for(held, world.exercise) is None  # not an exercise of that assignment
    assert leaderboard.board_for(world.assignment, world.exercise) is not None
    world.assignment.leaderboard = False
    db.commit()
    assert leaderboard.board_for(world.assignment, world.exercise) is None
    with pytest.raises(NotFound):
        read(db, world, world.instructor)


def test_a_draft_assignments_board_is_for_its_staff(db_session: Session, world: World) -> None:
    db = db_session
    world.assignment.is_published = False
    db.commit()
    with pytest.raises(NotFound):
        read(db, world, world.learners[0])
    assert read(db, world, world.ta).names
