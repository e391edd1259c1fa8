"""``app.domain.courses.gradebook`` on real rows: cells as ``assignments.counted`` has them, totals, overrides, CSV,
queries."""

from __future__ import annotations

import csv
import io
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.domain.courses import assignments, gradebook, membership
from app.domain.courses.gradebook import AssignmentHead, Cell, Column, Gradebook, LearnerGrades, OverrideNote
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    CourseRole,
    Exercise,
    Extension,
    GradeOverride,
    Role,
    Submission,
    SubmissionStatus,
    User,
    utcnow,
)
from tests.app.web.test_query_counts import counting_selects
from tests.conftest import TinyExercise
from worker.core.errors import Forbidden, InvalidInput, NotFound
from worker.core.outcome import Verdict

pytestmark = pytest.mark.postgres

OPENS = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DUE = datetime(2026, 12, 8, 17, 0, tzinfo=UTC)
LATE = datetime(2026, 12, 10, 17, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MakeUser = Callable[..., User]


@dataclass
class World:
    """A course with three assignments (the last unpublished), its staff, four learners and an outsider."""

    course: Course
    instructor: User
    ta: User
    outsider: User
    ada: User  # late on week 1 / ex1; "last" counts on week 2
    bob: User  # extended on week 1
    cy: User  # a submission after every window
    dee: User  # nothing submitted
    week1: Assignment  # ex1 (weight 1), ex2 (weight 3); dated, 50 % late credit
    week2: Assignment  # ex1; no dates; the last attempt counts
    draft: Assignment  # ex2; unpublished
    ex1: Exercise
    ex2: Exercise

    @property
    def learners(self) -> list[User]:
        return [self.ada, self.bob, self.cy, self.dee]


def add_assignment(
    db: Session, course: Course, title: str, position: int, items: list[tuple[Exercise, float]], **fields: Any
) -> Assignment:
    assignment = Assignment(course_id=course.id, title=title, position=position, **fields)
    for at, (exercise, weight) in enumerate(items):
        assignment.items.append(AssignmentItem(exercise=exercise, position=at, weight=weight))
    db.add(assignment)
    db.commit()
    return assignment


def submit(
    db: Session,
    assignment: Assignment,
    user: User,
    exercise: Exercise,
    at: datetime,
    score: float | None = 5.0,
    *,
    status: SubmissionStatus = SubmissionStatus.graded,
    verdict: Verdict | None = Verdict.passed,
) -> Submission:
    assert exercise.current_version is not None
    submission = Submission(
        user_id=user.id, exercise_version_id=exercise.current_version.id, assignment_id=assignment.id,
        code="def add(a, b):\n    return a + b\n", status=status, verdict=verdict, score=score, max_score=5.0,
        created_at=at,
    )  # fmt: skip
    db.add(submission)
    db.commit()
    return submission


def extend(db: Session, assignment: Assignment, user: User, created_at: datetime, **fields: Any) -> Extension:
    extension = Extension(assignment_id=assignment.id, user_id=user.id, reason="ill", created_at=created_at, **fields)
    db.add(extension)
    db.commit()
    return extension


@pytest.fixture
def world(
    db_session: Session, make_user: MakeUser, make_exercise: Callable[..., TinyExercise], instructor: User
) -> World:
    db = db_session
    course = membership.create_course(
        session=db, slug=f"gpu-{uuid.uuid4().hex[:8]}", title="GPU programming", creator=instructor
    )
    names = ("ada", "bob", "cy", "dee", "ta", "outsider")
    people = {n: make_user(Role.learner, email=f"{n}-{uuid.uuid4().hex[:6]}@example.com") for n in names}
    for name in ("ada", "bob", "cy", "dee"):
        membership.enroll(session=db, course=course, user=people[name])
    membership.enroll(session=db, course=course, user=people["ta"], role=CourseRole.ta)
    db.commit()
    ex1, ex2 = make_exercise().exercise, make_exercise().exercise
    dated = {"opens_at": OPENS, "due_at": DUE, "late_until": LATE, "late_credit_pct": 50.0}
    week1 = add_assignment(db, course, "Week 1", 0, [(ex1, 1.0), (ex2, 3.0)], **dated)
    week2 = add_assignment(db, course, "Week 2", 1, [(ex1, 1.0)], counts="last")
    draft = add_assignment(db, course, "Draft", 2, [(ex2, 1.0)], is_published=False)
    ada, bob, cy = people["ada"], people["bob"], people["cy"]

    submit(db, week1, ada, ex1, DUE + HOUR)  # late: 5/5 at 50 % credit
    submit(db, week1, ada, ex2, DUE - HOUR, 2.5)  # on time: 2.5/5
    submit(db, week2, ada, ex1, OPENS, 5.0)
    submit(db, week2, ada, ex1, OPENS + HOUR, 2.0)  # the last settled one counts: 40 %
    submit(db, week2, ada, ex1, OPENS + 2 * HOUR, None, status=SubmissionStatus.error, verdict=None)
    submit(db, week2, ada, ex1, OPENS + 3 * HOUR, 5.0, verdict=Verdict.internal_error)  # platform failure
    submit(db, week2, ada, ex1, OPENS + 4 * HOUR, None, status=SubmissionStatus.queued, verdict=None)
    submit(db, draft, ada, ex2, OPENS, 5.0)

    # The newest unrevoked extension counts: the older one and the revoked newer one do not.
    extend(db, week1, bob, OPENS, due_at=DUE + HOUR / 2)
    extend(db, week1, bob, OPENS + HOUR, due_at=LATE)
    extend(db, week1, bob, OPENS + 2 * HOUR, due_at=DUE - 2 * HOUR, revoked_at=OPENS + 3 * HOUR)
    submit(db, week1, bob, ex1, DUE + HOUR)
    submit(db, week1, bob, ex1, LATE + HOUR)  # after the extended due date, with no late period: no credit

    submit(db, week1, cy, ex2, LATE + 24 * HOUR)  # after every window: no credit
    submit(db, week1, cy, ex1, DUE, 4.0)  # at the due date exactly: on time
    return World(
        course=course, instructor=instructor, ta=people["ta"], outsider=people["outsider"], ada=ada, bob=bob, cy=cy,
        dee=people["dee"], week1=week1, week2=week2, draft=draft, ex1=ex1, ex2=ex2,
    )  # fmt: skip


def item_of(assignment: Assignment, exercise: Exercise) -> AssignmentItem:
    return next(item for item in assignment.items if item.exercise_id == exercise.id)


def row_of(book: Gradebook, user: User) -> LearnerGrades:
    return next(row for row in book.rows if row.user_id == user.id)


def cell_of(db: Session, w: World, user: User, assignment: Assignment, exercise: Exercise) -> Cell:
    book = gradebook.gradebook(session=db, course=w.course, viewer=w.instructor)
    return row_of(book, user).cell(item_of(assignment, exercise).id)


# --- rows, columns, cells -------------------------------------------------------------------------------------


def test_rows_are_the_learners_by_email_and_columns_every_item_in_order(db_session: Session, world: World) -> None:
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)

    assert [row.email for row in book.rows] == sorted(u.email for u in world.learners)  # no TA, no instructor
    assert [(c.assignment, c.exercise, c.weight) for c in book.columns] == [
        ("Week 1", world.ex1.slug, 1.0), ("Week 1", world.ex2.slug, 3.0), ("Week 2", world.ex1.slug, 1.0),
        ("Draft", world.ex2.slug, 1.0),
    ]  # fmt: skip
    assert [(h.title, h.is_published, h.counts_in_total) for h in book.assignments] == [
        ("Week 1", True, True), ("Week 2", True, True), ("Draft", False, False),
    ]  # fmt: skip
    for row in book.rows:
        assert [cell.item_id for cell in row.cells] == [c.item_id for c in book.columns]


def test_a_late_submission_gets_the_late_credit_and_an_extension_makes_it_on_time(
    db_session: Session, world: World
) -> None:
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)
    ex1 = item_of(world.week1, world.ex1).id

    late = row_of(book, world.ada).cell(ex1)
    assert (late.score_pct, late.computed_pct, late.credit_pct, late.late, late.extended) == (50.0, 50.0, 50.0, True,
                                                                                              False)  # fmt: skip
    extended = row_of(book, world.bob).cell(ex1)
    assert (extended.score_pct, extended.credit_pct, extended.late, extended.extended) == (100.0, 100.0, False, True)
    on_the_dot = row_of(book, world.cy).cell(ex1)
    assert (on_the_dot.score_pct, on_the_dot.late) == (80.0, False)
    closed = row_of(book, world.cy).cell(item_of(world.week1, world.ex2).id)
    assert (closed.score_pct, closed.credit_pct, closed.late) == (0.0, None, True)
    assert closed.submission_id is not None
    nothing = row_of(book, world.dee).cell(ex1)
    assert (nothing.submission_id, nothing.score_pct, nothing.late, nothing.overridden) == (None, 0.0, False, False)


def test_assignments_are_weighted_means_and_the_total_weighs_published_assignments_equally(
    db_session: Session, world: World
) -> None:
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)
    ada = row_of(book, world.ada)

    # Week 1: (1 x 50 + 3 x 50) / 4; week 2: the last settled attempt, 2/5; the draft's 100 counts in no total.
    assert ada.assignment_pct == {world.week1.id: 50.0, world.week2.id: 40.0, world.draft.id: 100.0}
    assert ada.total_pct == pytest.approx(45.0)
    bob = row_of(book, world.bob)
    assert bob.assignment_pct[world.week1.id] == pytest.approx(25.0) and bob.total_pct == pytest.approx(12.5)
    assert row_of(book, world.dee).total_pct == 0.0


def test_every_cell_and_assignment_agrees_with_the_assignments_module(db_session: Session, world: World) -> None:
    gradebook.override(
        session=db_session, course=world.course, item=item_of(world.week2, world.ex1), learner=world.cy,
        score_pct=75.0, comment="regraded by hand", actor=world.ta,
    )  # fmt: skip
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)

    chosen = [world.week1, world.week2, world.draft]
    for user in world.learners:
        row = row_of(book, user)
        for assignment in chosen:
            for item in assignment.items:
                want = assignments.counted(session=db_session, assignment=assignment, item=item, user=user)
                got = row.cell(item.id)
                assert got.submission_id == (want.submission.id if want.submission else None), (user.email, item)
                assert (got.score_pct, got.computed_pct, got.credit_pct, got.late, got.extended) == (
                    want.score_pct, want.computed_pct, want.credit_pct, want.late, want.extended
                ), (user.email, item.id)  # fmt: skip
                assert (got.override.id if got.override else None) == (want.override.id if want.override else None)
            pct = assignments.assignment_pct(session=db_session, assignment=assignment, user=user)
            assert row.assignment_pct[assignment.id] == pytest.approx(pct)


def test_my_grades_is_my_row_without_unpublished_assignments(db_session: Session, world: World) -> None:
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)
    mine = gradebook.my_grades(session=db_session, course=world.course, user=world.ada)
    row = row_of(book, world.ada)

    published = [c.item_id for c in book.columns if c.assignment != "Draft"]
    assert [c.item_id for c in mine.cells] == published
    assert list(mine.cells) == [row.cell(i) for i in published]
    assert mine.assignment_pct == {k: v for k, v in row.assignment_pct.items() if k != world.draft.id}
    assert mine.total_pct == row.total_pct
    with pytest.raises(NotFound):
        gradebook.my_grades(session=db_session, course=world.course, user=world.outsider)


def test_an_empty_course_has_no_rows_and_no_total(db_session: Session, instructor: User, learner: User) -> None:
    course = membership.create_course(session=db_session, slug="empty-101", title="Empty", creator=instructor)
    book = gradebook.gradebook(session=db_session, course=course, viewer=instructor)
    assert (book.rows, book.columns, book.assignments) == ((), (), ())
    membership.enroll(session=db_session, course=course, user=learner)
    (row,) = gradebook.gradebook(session=db_session, course=course, viewer=instructor).rows
    assert (row.cells, row.assignment_pct, row.total_pct) == ((), {}, None)


# --- overrides --------------------------------------------------------------------------------------------------


def test_an_override_replaces_the_cell_and_reverting_restores_the_computed_score(
    db_session: Session, world: World
) -> None:
    item = item_of(world.week1, world.ex1)
    first = gradebook.override(
        session=db_session, course=world.course, item=item, learner=world.ada, score_pct=90.0,
        comment="  late because of our outage  ", actor=world.ta,
    )  # fmt: skip
    cell = cell_of(db_session, world, world.ada, world.week1, world.ex1)
    assert (cell.score_pct, cell.computed_pct, cell.late, cell.overridden) == (90.0, 50.0, True, True)
    assert cell.override == OverrideNote(first.id, 90.0, "late because of our outage", world.ta.email, first.created_at)
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)
    assert row_of(book, world.ada).assignment_pct[world.week1.id] == pytest.approx((90 + 3 * 50) / 4)

    second = gradebook.override(
        session=db_session, course=world.course, item=item, learner=world.ada, score_pct=70,
        comment="second look", actor=world.instructor,
    )  # fmt: skip
    assert cell_of(db_session, world, world.ada, world.week1, world.ex1).score_pct == 70.0  # the newest counts
    gradebook.revert_override(session=db_session, override_id=second.id, actor=world.ta)
    assert cell_of(db_session, world, world.ada, world.week1, world.ex1).override == cell.override  # the older again
    gradebook.revert_override(session=db_session, override_id=first.id, actor=world.instructor)
    restored = cell_of(db_session, world, world.ada, world.week1, world.ex1)
    assert (restored.score_pct, restored.overridden) == (50.0, False)
    # Nothing was deleted: both rows stay, with who reverted them and when.
    assert (first.reverted_by_id, second.reverted_by_id) == (world.instructor.id, world.ta.id)
    assert first.reverted_at is not None and second.reverted_at is not None


def test_reverting_twice_keeps_the_first_revert(db_session: Session, world: World) -> None:
    row = gradebook.override(
        session=db_session, course=world.course, item=item_of(world.week1, world.ex2), learner=world.bob,
        score_pct=0, comment="copied", actor=world.instructor,
    )  # fmt: skip
    gradebook.revert_override(session=db_session, override_id=row.id, actor=world.ta)
    when = row.reverted_at
    again = gradebook.revert_override(session=db_session, override_id=row.id, actor=world.instructor)
    assert again is row and (row.reverted_at, row.reverted_by_id) == (when, world.ta.id)


def test_the_history_lists_every_override_newest_first_with_the_one_in_force(db_session: Session, world: World) -> None:
    def ada(score: float, comment: str, actor: User) -> GradeOverride:
        item = item_of(world.week1, world.ex1)
        return gradebook.override(
            session=db_session, course=world.course, item=item, learner=world.ada, score_pct=score, comment=comment,
            actor=actor,
        )  # fmt: skip

    one, two, three = ada(10, "one", world.ta), ada(20, "two", world.instructor), ada(30, "three", world.ta)
    other = gradebook.override(
        session=db_session, course=world.course, item=item_of(world.week2, world.ex1), learner=world.dee,
        score_pct=100, comment="other", actor=world.ta,
    )  # fmt: skip
    gradebook.revert_override(session=db_session, override_id=three.id, actor=world.instructor)

    history = gradebook.override_history(session=db_session, course=world.course, viewer=world.ta)
    assert [e.id for e in history] == [other.id, three.id, two.id, one.id]
    assert [(e.comment, e.in_force, e.reverted) for e in history] == [
        ("other", True, False), ("three", False, True), ("two", True, False), ("one", False, False),
    ]  # fmt: skip
    latest = history[1]
    assert (latest.learner, latest.by, latest.reverted_by, latest.assignment, latest.exercise) == (
        world.ada.email, world.ta.email, world.instructor.email, "Week 1", world.ex1.slug
    )  # fmt: skip
    assert latest.at.tzinfo is not None and latest.reverted_at is not None


@pytest.mark.parametrize(
    ("score", "comment", "problem"),
    [
        (101.0, "x", "from 0 to 100"),
        (-0.5, "x", "from 0 to 100"),
        (math.nan, "x", "from 0 to 100"),
        (math.inf, "x", "from 0 to 100"),
        (50.0, "   ", "say why"),
        (50.0, "x" * (gradebook.MAX_COMMENT_CHARS + 1), "say why"),
        (50.0, "a\x00b", "say why"),
        (50.0, "\ud800", "not valid text"),
    ],
)
def test_bad_scores_and_comments_are_refused(
    db_session: Session, world: World, score: float, comment: str, problem: str
) -> None:
    with pytest.raises(InvalidInput, match=problem):
        gradebook.override(
            session=db_session, course=world.course, item=item_of(world.week1, world.ex1), learner=world.ada,
            score_pct=score, comment=comment, actor=world.instructor,
        )  # fmt: skip


def test_an_override_needs_a_learner_of_the_course_and_an_item_of_the_course(
    db_session: Session, world: World, instructor: User, make_exercise: Callable[..., TinyExercise]
) -> None:
    item = item_of(world.week1, world.ex1)
    for not_a_learner in (world.ta, world.outsider, world.instructor):
        with pytest.raises(InvalidInput, match="is not a learner of"):
            gradebook.override(
                session=db_session, course=world.course, item=item, learner=not_a_learner, score_pct=1,
                comment="x", actor=world.instructor,
            )  # fmt: skip
    elsewhere = membership.create_course(session=db_session, slug="elsewhere", title="Elsewhere", creator=instructor)
    foreign = add_assignment(db_session, elsewhere, "Theirs", 0, [(make_exercise().exercise, 1.0)])
    with pytest.raises(NotFound, match="no item"):
        gradebook.override(
            session=db_session, course=world.course, item=foreign.items[0], learner=world.ada, score_pct=1,
            comment="x", actor=world.instructor,
        )  # fmt: skip


# --- who may -------------------------------------------------------------------------------------------------------


def test_staff_may_grade_a_learner_may_not_and_an_outsider_learns_nothing(
    db_session: Session, world: World, admin: User
) -> None:
    item = item_of(world.week1, world.ex1)
    made = gradebook.override(
        session=db_session, course=world.course, item=item, learner=world.ada, score_pct=60, comment="ta",
        actor=world.ta,
    )  # fmt: skip
    for staff in (world.ta, world.instructor, admin):
        assert len(gradebook.gradebook(session=db_session, course=world.course, viewer=staff).rows) == 4
        assert gradebook.override_history(session=db_session, course=world.course, viewer=staff)

    for who, error in ((world.bob, Forbidden), (world.outsider, NotFound)):
        with pytest.raises(error):
            gradebook.gradebook(session=db_session, course=world.course, viewer=who)
        with pytest.raises(error):
            gradebook.override(
                session=db_session, course=world.course, item=item, learner=world.ada, score_pct=100,
                comment="mine now", actor=who,
            )  # fmt: skip
        with pytest.raises(error):
            gradebook.revert_override(session=db_session, override_id=made.id, actor=who)
        with pytest.raises(error):
            gradebook.override_history(session=db_session, course=world.course, viewer=who)
    with pytest.raises(NotFound, match=f"no grade override {made.id}"):  # not the course's name either
        gradebook.revert_override(session=db_session, override_id=made.id, actor=world.outsider)
    for missing in (made.id + 1000, 0, -1, 2**63):
        with pytest.raises(NotFound, match="no grade override"):
            gradebook.revert_override(session=db_session, override_id=missing, actor=world.instructor)
    assert made.reverted_at is None
    assert cell_of(db_session, world, world.ada, world.week1, world.ex1).score_pct == 60.0


# --- CSV ------------------------------------------------------------------------------------------------------------


def read_csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_the_csv_has_a_row_per_learner_with_scores_flags_and_totals(db_session: Session, world: World) -> None:
    gradebook.override(
        session=db_session, course=world.course, item=item_of(world.week1, world.ex1), learner=world.bob,
        score_pct=66.66, comment="checked", actor=world.ta,
    )  # fmt: skip
    world.ada.name = "Ada Lovelace"
    db_session.commit()
    book = gradebook.gradebook(session=db_session, course=world.course, viewer=world.instructor)
    header, *rows = read_csv(gradebook.gradebook_csv(book))

    e1, e2 = world.ex1.slug, world.ex2.slug
    assert header == [
        "email", "name", f"Week 1 / {e1}", f"Week 1 / {e1} flags", f"Week 1 / {e2}", f"Week 1 / {e2} flags",
        f"Week 2 / {e1}", f"Week 2 / {e1} flags", f"Draft / {e2}", f"Draft / {e2} flags", "Week 1 %", "Week 2 %",
        "Draft %", "total %",
    ]  # fmt: skip
    by_email = {row[0]: row for row in rows}
    assert list(by_email) == [row.email for row in book.rows]
    assert by_email[world.ada.email] == [
        world.ada.email, "Ada Lovelace", "50.0", "L", "50.0", "", "40.0", "", "100.0", "", "50.0", "40.0", "100.0",
        "45.0",
    ]  # fmt: skip
    bob = by_email[world.bob.email]
    assert bob[2:4] == ["66.7", "EO"] and bob[4:6] == ["0.0", "E"] and bob[-1] == "8.3"  # (66.66 / 4 + 0) / 2
    assert by_email[world.cy.email][2:6] == ["80.0", "", "0.0", "L"]


def test_csv_cells_that_look_like_formulas_are_prefixed() -> None:
    names = ['=HYPERLINK("http://evil")', "+1", "-1", "@SUM(A1)", "\tTab", "\rCR", "plain", "a=b"]
    cell = Cell(1, None, 0.0, 0.0, None, False, False, None)
    rows = tuple(
        LearnerGrades(user_id=i, email=f"u{i}@example.com", name=name, cells=(cell,), assignment_pct={9: 12.25},
                      total_pct=12.25)
        for i, name in enumerate(names)
    )  # fmt: skip
    rows += (LearnerGrades(99, "=x@example.com", "", (cell,), {9: 0.0}, None),)
    book = Gradebook(
        course_id=1,
        assignments=(AssignmentHead(9, "=cmd|' /C calc'!A0", True, True, (1,)),),
        columns=(Column(1, 9, "-Week", "ex", 1.0),),
        rows=rows,
    )
    header, *lines = read_csv(gradebook.gradebook_csv(book))

    assert header == ["email", "name", "'-Week / ex", "'-Week / ex flags", "'=cmd|' /C calc'!A0 %", "total %"]
    assert [line[1] for line in lines[:-1]] == [
        "'=HYPERLINK(\"http://evil\")", "'+1", "'-1", "'@SUM(A1)", "'\tTab", "'\rCR", "plain", "a=b",
    ]  # fmt: skip
    assert lines[0][2:] == ["0.0", "", "12.2", "12.2"]  # one decimal (12.25 rounds half to even)
    assert lines[-1] == ["'=x@example.com", "", "0.0", "", "0.0", ""]  # no total: an empty cell


# --- queries --------------------------------------------------------------------------------------------------------


def test_the_gradebook_reads_a_fixed_number_of_queries(
    db_session: Session, world: World, make_user: MakeUser, make_exercise: Callable[..., TinyExercise],
    pg_engine: Engine,
) -> None:  # fmt: skip
    def selects() -> tuple[int, int]:
        course_id, viewer_id, learner_id = world.course.id, world.instructor.id, world.ada.id
        db_session.expunge_all()  # nothing cached: each call loads what it reads
        course, viewer, learner = (db_session.get(Course, course_id), db_session.get(User, viewer_id),
                                   db_session.get(User, learner_id))  # fmt: skip
        assert course is not None and viewer is not None and learner is not None
        with counting_selects(pg_engine) as book_statements:
            gradebook.gradebook(session=db_session, course=course, viewer=viewer)
        with counting_selects(pg_engine) as mine_statements:
            gradebook.my_grades(session=db_session, course=course, user=learner)
        return len(book_statements), len(mine_statements)

    few = selects()
    course, instructor = db_session.get(Course, world.course.id), db_session.get(User, world.instructor.id)
    assert course is not None and instructor is not None
    more = [make_exercise().exercise for _ in range(3)]
    week3 = add_assignment(db_session, course, "Week 3", 3, [(e, 1.0) for e in more])
    for n in range(5):
        user = make_user(Role.learner)
        membership.enroll(session=db_session, course=course, user=user)
        extend(db_session, week3, user, utcnow(), due_at=LATE)
        for exercise in more:
            submit(db_session, week3, user, exercise, DUE + n * HOUR)
        gradebook.override(
            session=db_session, course=course, item=week3.items[0], learner=user, score_pct=50, comment="x",
            actor=instructor,
        )  # fmt: skip
    db_session.commit()
    many = selects()

    assert many == few
    assert many[0] <= 9 and many[1] <= 8, many  # one of them reads the exercises' titles for the columns
