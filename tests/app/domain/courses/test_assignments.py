"""``app.domain.courses.assignments`` on real rows: dates and extensions, windows, attempts, the rate, the gate, what
counts."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, delete, update
from sqlalchemy.orm import Session

from app.domain.courses import assignments
from app.domain.courses.assignments import Dates, Rate, Window, check_submit, credit_pct, window
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    Exercise,
    ExerciseVersion,
    Extension,
    GradeOverride,
    Submission,
    SubmissionStatus,
    User,
)
from tests.conftest import TinyExercise
from worker.core.errors import Forbidden, InvalidInput, RateLimited
from worker.core.outcome import Verdict

pytestmark = pytest.mark.postgres

OPENS = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DUE = datetime(2026, 12, 8, 17, 0, tzinfo=UTC)
LATE = datetime(2026, 12, 10, 17, 0, tzinfo=UTC)
TICK = timedelta(microseconds=1)
MakeAssignment = Callable[..., Assignment]
Submit = Callable[..., Submission]


@pytest.fixture
def make_assignment(db_session: Session, tiny_exercise: TinyExercise) -> MakeAssignment:
    """Return a factory of a published assignment (in a new course) holding ``exercises`` (the tiny one)."""

    def make(
        *, exercises: list[Exercise] | None = None, weights: list[float] | None = None, **fields: Any
    ) -> Assignment:
        course = Course(slug=f"course-{uuid.uuid4().hex[:10]}", title="GPU programming")
        values: dict[str, Any] = {"opens_at": OPENS, "due_at": DUE, "late_until": LATE, "late_credit_pct": 50.0}
        assignment = Assignment(course=course, title="Week 1", **(values | fields))
        chosen = exercises if exercises is not None else [tiny_exercise.exercise]
        for position, exercise in enumerate(chosen):
            weight = weights[position] if weights else 1.0
            assignment.items.append(AssignmentItem(exercise=exercise, position=position, weight=weight))
        db_session.add(assignment)
        db_session.commit()
        return assignment

    return make


@pytest.fixture
def submit(db_session: Session, tiny_exercise: TinyExercise) -> Submit:
    """Return a factory of a submission made ``at`` a time (graded ``score`` of 5 points unless told otherwise)."""

    def make(
        assignment: Assignment | None,
        user: User,
        at: datetime,
        *,
        score: float | None = 5.0,
        status: SubmissionStatus = SubmissionStatus.graded,
        verdict: Verdict | None = Verdict.passed,
        exercise: Exercise | None = None,
        version: ExerciseVersion | None = None,
    ) -> Submission:
        target = version or (exercise or tiny_exercise.exercise).current_version
        assert target is not None
        submission = Submission(
            user_id=user.id,
            exercise_version_id=target.id,
            assignment_id=assignment.id if assignment is not None else None,
            code="def add(a, b):\n    return a + b\n",
            status=status,
            verdict=verdict,
            score=score,
            max_score=5.0,
            created_at=at,
        )
        db_session.add(submission)
        db_session.commit()
        return submission

    return make


def _extend(db_session: Session, assignment: Assignment, user: User, **fields: Any) -> Extension:
    extension = Extension(assignment_id=assignment.id, user_id=user.id, reason="ill", **fields)
    db_session.add(extension)
    db_session.commit()
    return extension


def _gate(
    db_session: Session, assignment: Assignment, user: User, now: datetime, exercise: Exercise | None = None
) -> Any:
    target = exercise or assignment.items[0].exercise
    return assignments.gate(session=db_session, assignment=assignment, exercise=target, user=user, now=now)


def _cell(db_session: Session, assignment: Assignment, user: User, position: int = 0) -> assignments.Counted:
    item = assignment.items[position]
    return assignments.counted(session=db_session, assignment=assignment, item=item, user=user)


# --- windows and credit -------------------------------------------------------------------------------------


def test_windows_are_inclusive_at_due_and_at_the_end_of_the_late_period() -> None:
    dates = Dates(OPENS, DUE, LATE, None)
    assert window(dates, OPENS - TICK) is Window.not_open
    assert window(dates, OPENS) is Window.open
    assert window(dates, DUE) is Window.open, "exactly at the due date is on time"
    assert window(dates, DUE + TICK) is Window.late
    assert window(dates, LATE) is Window.late
    assert window(dates, LATE + TICK) is Window.closed
    assert window(Dates(OPENS, DUE, None, None), DUE + TICK) is Window.closed, "no late period: closed at once"
    assert window(Dates(OPENS, None, None, None), DUE + timedelta(days=999)) is Window.open, "no due date"
    assert window(Dates(None, DUE, None, None), OPENS - timedelta(days=999)) is Window.open, "no opening date"
    assert window(dates, DUE.replace(tzinfo=None)) is Window.open, "a naive instant is taken as UTC"


def test_credit_is_full_on_time_the_late_credit_when_late_and_none_otherwise() -> None:
    late_policy = Assignment(title="a", late_credit_pct=40.0)
    dates = Dates(OPENS, DUE, LATE, None)
    assert credit_pct(late_policy, dates, OPENS - TICK) is None
    assert credit_pct(late_policy, dates, DUE) == 100.0
    assert credit_pct(late_policy, dates, DUE + TICK) == 40.0
    assert credit_pct(late_policy, dates, LATE + TICK) is None


# --- dates and extensions -----------------------------------------------------------------------------------


def test_the_newest_unrevoked_extension_moves_due_and_late_but_never_the_opening(
    db_session: Session, make_assignment: MakeAssignment, learner: User, other_learner: User, instructor: User
) -> None:
    assignment = make_assignment()
    own = assignments.effective_dates(session=db_session, assignment=assignment, user=learner)
    assert own == Dates(OPENS, DUE, LATE, None) and not own.extended

    older = _extend(db_session, assignment, learner, due_at=DUE + timedelta(days=1), created_at=OPENS)
    newer = _extend(
        db_session, assignment, learner, due_at=DUE + timedelta(days=3), late_until=None, granted_by_id=instructor.id
    )
    dates = assignments.effective_dates(session=db_session, assignment=assignment, user=learner)
    assert (dates.opens_at, dates.due_at, dates.late_until) == (OPENS, DUE + timedelta(days=3), None)
    assert dates.extension is not None and dates.extension.id == newer.id and dates.extended
    other = assignments.effective_dates(session=db_session, assignment=assignment, user=other_learner)
    assert other == Dates(OPENS, DUE, LATE, None), "an extension is one learner's"

    newer.revoked_at, newer.revoked_by_id = DUE, instructor.id
    db_session.commit()
    dates = assignments.effective_dates(session=db_session, assignment=assignment, user=learner)
    assert dates.extension is not None and dates.extension.id == older.id, "the revoked one no longer counts"
    assert (dates.due_at, dates.late_until) == (DUE + timedelta(days=1), None)

    older.revoked_at = DUE
    db_session.commit()
    assert assignments.effective_dates(session=db_session, assignment=assignment, user=learner).extension is None


# --- attempts -----------------------------------------------------------------------------------------------


def test_attempts_count_pending_ones_and_every_version_but_not_platform_failures(
    db_session: Session,
    make_assignment: MakeAssignment,
    submit: Submit,
    learner: User,
    other_learner: User,
    tiny_exercise: TinyExercise,
) -> None:
    assignment, elsewhere = make_assignment(), make_assignment()
    exercise = tiny_exercise.exercise
    current = exercise.current_version
    assert current is not None
    older = ExerciseVersion(
        exercise_id=exercise.id,
        number=current.number + 1,
        content_hash="0" * 64,
        title=current.title,
        kind=current.kind,
        topic=current.topic,
        difficulty=current.difficulty,
        framework=current.framework,
        queue=current.queue,
        max_score=current.max_score,
        files=dict(current.files),
    )
    db_session.add(older)
    db_session.commit()
    at = OPENS + timedelta(hours=1)

    submit(assignment, learner, at)
    submit(assignment, learner, at, version=older)
    submit(assignment, learner, at, status=SubmissionStatus.queued, verdict=None, score=None)
    submit(assignment, learner, at, status=SubmissionStatus.running, verdict=None, score=None)
    submit(assignment, learner, at, score=0.0, verdict=Verdict.failed)
    submit(assignment, learner, at, status=SubmissionStatus.error, verdict=Verdict.internal_error, score=None)
    submit(assignment, learner, at, status=SubmissionStatus.error, verdict=None, score=None)
    submit(assignment, learner, at, status=SubmissionStatus.graded, verdict=Verdict.internal_error, score=None)
    submit(elsewhere, learner, at)  # another assignment
    submit(None, learner, at)  # practice
    submit(assignment, other_learner, at)

    used = assignments.attempts_used(session=db_session, assignment=assignment, exercise=exercise, user=learner)
    assert used == 5, "graded (two versions), queued, running and failed; no platform failure"
    assert _gate(db_session, assignment, learner, at).attempts_used == 5


def test_the_attempt_limit_refuses_and_an_extension_adds_attempts_until_revoked(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(max_attempts=3)
    now = OPENS + timedelta(days=1)
    submit(assignment, learner, now - timedelta(hours=2))
    submit(assignment, learner, now - timedelta(hours=1))
    gate = _gate(db_session, assignment, learner, now)
    assert gate.allowed and gate.attempts_used == 2 and gate.attempts_left == 1
    assert gate.reason == "due on 2026-12-08 17:00 UTC; 1 attempt left"
    check_submit(gate)

    submit(assignment, learner, now - timedelta(minutes=1))
    gate = _gate(db_session, assignment, learner, now)
    assert not gate.allowed and gate.attempts_left == 0
    with pytest.raises(Forbidden, match="no attempts left"):
        check_submit(gate)

    extension = _extend(db_session, assignment, learner, due_at=DUE, late_until=LATE, extra_attempts=2)
    gate = _gate(db_session, assignment, learner, now)
    assert gate.allowed and gate.attempts_left == 2 and gate.reason.endswith("2 attempts left")

    extension.revoked_at = now
    db_session.commit()
    assert _gate(db_session, assignment, learner, now).attempts_left == 0, "a revoked extension adds nothing"


def test_no_attempt_limit_is_unlimited(db_session: Session, make_assignment: MakeAssignment, learner: User) -> None:
    gate = _gate(db_session, make_assignment(due_at=None, late_until=None), learner, OPENS)
    assert gate.allowed and gate.attempts_left is None and gate.tokens_left is None and gate.next_at is None
    assert gate.reason == "open" and gate.credit_pct == 100.0


# --- the gate's windows -------------------------------------------------------------------------------------


def test_the_gate_follows_the_window_with_its_sentence(
    db_session: Session, make_assignment: MakeAssignment, learner: User
) -> None:
    assignment = make_assignment()
    early = _gate(db_session, assignment, learner, OPENS - TICK)
    assert early.window is Window.not_open and not early.allowed and early.credit_pct is None
    with pytest.raises(Forbidden, match=r"^opens on 2026-12-01 09:00 UTC$"):
        check_submit(early)

    at_due = _gate(db_session, assignment, learner, DUE)
    assert at_due.window is Window.open and at_due.allowed and at_due.credit_pct == 100.0

    late = _gate(db_session, assignment, learner, DUE + TICK)
    assert late.window is Window.late and late.allowed and late.credit_pct == 50.0
    assert late.reason == "late: 50% credit"
    check_submit(late)

    closed = _gate(db_session, assignment, learner, LATE + TICK)
    assert closed.window is Window.closed and not closed.allowed
    with pytest.raises(Forbidden, match=r"^closed on 2026-12-10 17:00 UTC$"):
        check_submit(closed)

    no_late = make_assignment(late_until=None)
    with pytest.raises(Forbidden, match=r"^closed on 2026-12-08 17:00 UTC$"):
        check_submit(_gate(db_session, no_late, learner, DUE + TICK))


def test_an_extension_reopens_a_closed_assignment_for_that_learner(
    db_session: Session, make_assignment: MakeAssignment, learner: User, other_learner: User
) -> None:
    assignment = make_assignment(late_until=None)
    now = DUE + timedelta(days=1)
    _extend(db_session, assignment, learner, due_at=DUE + timedelta(days=2))
    mine = _gate(db_session, assignment, learner, now)
    assert mine.allowed and mine.window is Window.open and mine.reason == "due on 2026-12-10 17:00 UTC"
    assert not _gate(db_session, assignment, other_learner, now).allowed


def test_an_unpublished_assignment_or_an_exercise_outside_it_is_refused(
    db_session: Session,
    make_assignment: MakeAssignment,
    make_exercise: Callable[..., TinyExercise],
    learner: User,
) -> None:
    hidden = make_assignment(is_published=False)
    with pytest.raises(Forbidden, match="not published"):
        check_submit(_gate(db_session, hidden, learner, OPENS))
    outside = make_exercise().exercise
    with pytest.raises(Forbidden, match="is not part of assignment 'Week 1'"):
        check_submit(_gate(db_session, make_assignment(), learner, OPENS, exercise=outside))


# --- the rate -----------------------------------------------------------------------------------------------


def test_the_bucket_empties_refills_one_token_per_period_and_refuses_with_retry_after(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User, tiny_exercise: TinyExercise
) -> None:
    assignment = make_assignment(rate_burst=2, rate_refill_s=600, max_attempts=5)
    t0 = OPENS + timedelta(hours=1)

    def bucket(now: datetime) -> Rate:
        return assignments.rate(
            session=db_session, assignment=assignment, exercise=tiny_exercise.exercise, user=learner, now=now
        )

    assert bucket(t0) == Rate(tokens_left=2, next_at=None)
    submit(assignment, learner, t0)
    assert bucket(t0) == Rate(tokens_left=1, next_at=t0 + timedelta(minutes=10))
    submit(assignment, learner, t0 + timedelta(minutes=1))
    assert bucket(t0 + timedelta(minutes=1)) == Rate(tokens_left=0, next_at=t0 + timedelta(minutes=10))

    gate = _gate(db_session, assignment, learner, t0 + timedelta(minutes=7))
    assert not gate.allowed and gate.tokens_left == 0 and gate.retry_after_s == 180
    assert gate.reason == "due on 2026-12-08 17:00 UTC; 3 attempts left; next in 3 min"
    with pytest.raises(RateLimited) as refused:
        check_submit(gate)
    assert refused.value.retry_after_s == 180
    assert refused.value.message.startswith("Wait 3 min, then submit again")  # an instruction, not the box's sentence

    at_refill = t0 + timedelta(minutes=10)
    assert bucket(at_refill - TICK).tokens_left == 0
    assert bucket(at_refill) == Rate(tokens_left=1, next_at=t0 + timedelta(minutes=20))
    assert _gate(db_session, assignment, learner, at_refill).allowed
    assert bucket(t0 + timedelta(minutes=21)) == Rate(tokens_left=2, next_at=None), "never more than the burst"


def test_platform_failures_refund_their_token(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(rate_burst=1, rate_refill_s=3600, max_attempts=1)
    at = OPENS + timedelta(hours=1)
    submit(assignment, learner, at, status=SubmissionStatus.error, verdict=Verdict.internal_error, score=None)
    gate = _gate(db_session, assignment, learner, at + timedelta(seconds=1))
    assert gate.allowed and gate.tokens_left == 1 and gate.attempts_left == 1, "neither an attempt nor a token"


def test_a_racing_submission_empties_the_bucket_but_costs_no_more() -> None:
    t0 = OPENS
    both = [t0, t0 + timedelta(seconds=10)]  # two processes let both in with one token
    rate = assignments.replay_bucket(burst=1, refill_s=60, times=both, now=t0 + timedelta(seconds=10))
    assert rate == Rate(tokens_left=0, next_at=t0 + timedelta(seconds=70))
    never = assignments.replay_bucket(burst=2, refill_s=None, times=both, now=t0 + timedelta(days=9))
    assert never == Rate(tokens_left=0, next_at=None), "a bucket that never refills"


def test_a_burst_that_never_refills_refuses_for_good(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(rate_burst=1, rate_refill_s=None)  # the field rules refuse it; stay safe anyway
    submit(assignment, learner, OPENS)
    gate = _gate(db_session, assignment, learner, OPENS + timedelta(days=1))
    assert not gate.allowed and gate.retry_after_s is None
    with pytest.raises(Forbidden, match="no submissions left"):
        check_submit(gate)


def test_two_processes_agree_on_the_rate_from_the_database_alone(pg_engine: Engine) -> None:
    # Real commits on two connections of their own: what one process wrote is all the other one knows.
    tag = uuid.uuid4().hex[:10]
    with Session(pg_engine) as setup:
        user = User(email=f"rate-{tag}@example.com", password_hash="-")
        exercise = Exercise(slug=f"rate-{tag}")
        version = ExerciseVersion(
            exercise=exercise,
            number=1,
            content_hash="0" * 64,
            title="Rate",
            kind="code",
            topic="t",
            difficulty="beginner",
            framework="python",
            queue="cpu",
            max_score=5.0,
            files={},
        )
        course = Course(slug=f"rate-{tag}", title="Rate")
        assignment = Assignment(course=course, title="Rate", rate_burst=1, rate_refill_s=300)
        assignment.items.append(AssignmentItem(exercise=exercise))
        setup.add_all([user, version, assignment])
        setup.flush()
        exercise.current_version = version
        setup.commit()
        ids = (assignment.id, exercise.id, user.id, version.id, course.id)
    now = OPENS + timedelta(hours=2)

    def gate_in(session: Session, at: datetime) -> assignments.Gate:
        found = session.get(Assignment, ids[0]), session.get(Exercise, ids[1]), session.get(User, ids[2])
        there, exercise_there, user_there = found
        assert there is not None and exercise_there is not None and user_there is not None
        return assignments.gate(session=session, assignment=there, exercise=exercise_there, user=user_there, now=at)

    try:
        with Session(pg_engine) as first, Session(pg_engine) as second:
            before = gate_in(first, now)
            assert before.allowed and gate_in(second, now) == before
            first.add(
                Submission(user_id=ids[2], exercise_version_id=ids[3], assignment_id=ids[0], code="x", created_at=now)
            )
            first.commit()

            later = now + timedelta(seconds=30)
            there = gate_in(second, later)
            assert not there.allowed and there.retry_after_s == 270, "the other process sees the token spent"
            assert gate_in(first, later) == there
    finally:
        with Session(pg_engine) as cleanup:
            cleanup.execute(delete(Submission).where(Submission.user_id == ids[2]))
            cleanup.execute(delete(Course).where(Course.id == ids[4]))
            cleanup.execute(update(Exercise).where(Exercise.id == ids[1]).values(current_version_id=None))
            cleanup.execute(delete(ExerciseVersion).where(ExerciseVersion.id == ids[3]))
            cleanup.execute(delete(Exercise).where(Exercise.id == ids[1]))
            cleanup.execute(delete(User).where(User.id == ids[2]))
            cleanup.commit()


# --- what counts --------------------------------------------------------------------------------------------


def test_best_counts_the_best_credited_score(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(counts="best")
    submit(assignment, learner, OPENS + timedelta(hours=1), score=2.0, verdict=Verdict.failed)
    on_time = submit(assignment, learner, DUE, score=3.0, verdict=Verdict.failed)
    submit(assignment, learner, DUE + TICK, score=5.0)  # 100 % late is worth 50 %: less than 60 % on time
    submit(assignment, learner, DUE + timedelta(hours=1), status=SubmissionStatus.queued, verdict=None, score=None)
    cell = _cell(db_session, assignment, learner)
    assert cell.submission is not None and cell.submission.id == on_time.id
    assert cell.raw_fraction == pytest.approx(0.6) and cell.credit_pct == 100.0
    assert cell.score_pct == pytest.approx(60.0) and not cell.late and not cell.extended and not cell.overridden


def test_best_keeps_the_earliest_of_equal_scores(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(counts="best")
    first = submit(assignment, learner, OPENS + timedelta(hours=1), score=4.0, verdict=Verdict.failed)
    submit(assignment, learner, OPENS + timedelta(hours=2), score=4.0, verdict=Verdict.failed)
    cell = _cell(db_session, assignment, learner)
    assert cell.submission is not None and cell.submission.id == first.id and cell.score_pct == pytest.approx(80.0)


def test_last_counts_the_newest_settled_one_with_its_late_credit(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(counts="last", late_credit_pct=40.0)
    submit(assignment, learner, OPENS + timedelta(hours=1), score=5.0)
    late = submit(assignment, learner, DUE + timedelta(hours=1), score=4.0, verdict=Verdict.failed)
    submit(assignment, learner, DUE + timedelta(hours=2), status=SubmissionStatus.error, verdict=Verdict.internal_error)
    submit(assignment, learner, DUE + timedelta(hours=3), status=SubmissionStatus.running, verdict=None, score=None)
    cell = _cell(db_session, assignment, learner)
    assert cell.submission is not None and cell.submission.id == late.id, "not the platform failure, not the pending"
    assert cell.late and cell.credit_pct == 40.0 and cell.score_pct == pytest.approx(0.8 * 40.0)


def test_a_submission_outside_every_window_counts_nothing(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment(counts="last")
    submit(assignment, learner, LATE + timedelta(days=1), score=5.0)  # made by staff, or before the dates moved
    cell = _cell(db_session, assignment, learner)
    assert cell.submission is not None and cell.late and cell.credit_pct is None and cell.score_pct == 0.0


def test_an_extension_makes_a_late_submission_on_time(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User
) -> None:
    assignment = make_assignment()
    submit(assignment, learner, DUE + timedelta(hours=5), score=5.0)
    assert _cell(db_session, assignment, learner).score_pct == pytest.approx(50.0)
    extension = _extend(db_session, assignment, learner, due_at=DUE + timedelta(days=1))
    cell = _cell(db_session, assignment, learner)
    assert cell.extended and not cell.late and cell.credit_pct == 100.0 and cell.score_pct == pytest.approx(100.0)
    extension.revoked_at = DUE + timedelta(days=2)
    db_session.commit()
    cell = _cell(db_session, assignment, learner)
    assert not cell.extended and cell.late and cell.score_pct == pytest.approx(50.0), "revoked: late again"


def test_no_submission_counts_zero(db_session: Session, make_assignment: MakeAssignment, learner: User) -> None:
    cell = _cell(db_session, make_assignment(), learner)
    assert cell.submission is None and cell.raw_fraction is None and cell.credit_pct is None
    assert cell.score_pct == 0.0 and not cell.late


def test_the_newest_override_replaces_the_score_and_a_reverted_one_does_not(
    db_session: Session, make_assignment: MakeAssignment, submit: Submit, learner: User, instructor: User
) -> None:
    assignment = make_assignment()
    submit(assignment, learner, OPENS + timedelta(hours=1), score=2.0, verdict=Verdict.failed)
    item = assignment.items[0]

    def override(score_pct: float, at: datetime) -> GradeOverride:
        row = GradeOverride(
            item_id=item.id, user_id=learner.id, score_pct=score_pct, comment="regraded", created_by_id=instructor.id
        )
        row.created_at = at
        db_session.add(row)
        db_session.commit()
        return row

    override(70.0, DUE)
    newest = override(90.0, DUE + timedelta(hours=1))
    cell = _cell(db_session, assignment, learner)
    assert cell.overridden and cell.override is not None and cell.override.id == newest.id
    assert cell.score_pct == 90.0 and cell.computed_pct == pytest.approx(40.0)

    newest.reverted_at, newest.reverted_by_id = DUE + timedelta(hours=2), instructor.id
    db_session.commit()
    assert _cell(db_session, assignment, learner).score_pct == 70.0, "the older unreverted one stands"

    for row in db_session.query(GradeOverride).filter_by(item_id=item.id):
        row.reverted_at = DUE + timedelta(hours=3)
    db_session.commit()
    cell = _cell(db_session, assignment, learner)
    assert not cell.overridden and cell.score_pct == pytest.approx(40.0)


def test_a_quiz_attempt_counts_like_any_submission(
    db_session: Session, make_assignment: MakeAssignment, learner: User
) -> None:
    from app.domain.exercises.bank import upsert_exercise
    from app.domain.submissions.quiz import answer_quiz
    from worker.bank.spec import ExerciseSpec

    files = {
        "exercise.toml": 'title = "A quiz"\nkind = "quiz"\ntopic = "Quizzes"\n',
        "prompt.md": "Answer.",
        "quiz.toml": (
            '[[question]]\nid = "q1"\ntype = "single"\nprompt = "Which?"\n'
            'options = [{ id = "a", text = "A" }, { id = "b", text = "B" }]\nanswer = ["b"]\nexplanation = "B."\n'
        ),
    }
    quiz, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(f"quiz-{uuid.uuid4().hex[:10]}", files))
    assignment = make_assignment(exercises=[quiz], opens_at=None, due_at=None, late_until=None, max_attempts=2)
    attempt, _ = answer_quiz(session=db_session, user=learner, exercise=quiz, answers={"q1": ["b"]})
    attempt.assignment_id = assignment.id
    db_session.commit()
    cell = _cell(db_session, assignment, learner)
    assert cell.submission is not None and cell.submission.id == attempt.id and cell.score_pct == pytest.approx(100.0)
    assert _gate(db_session, assignment, learner, attempt.created_at).attempts_left == 1


def test_the_assignment_grade_is_the_weighted_mean_of_its_items(
    db_session: Session,
    make_assignment: MakeAssignment,
    make_exercise: Callable[..., TinyExercise],
    submit: Submit,
    learner: User,
    tiny_exercise: TinyExercise,
) -> None:
    second = make_exercise().exercise
    assignment = make_assignment(exercises=[tiny_exercise.exercise, second], weights=[1.0, 3.0])
    submit(assignment, learner, OPENS + timedelta(hours=1), score=5.0)  # first item: 100 %
    submit(assignment, learner, OPENS + timedelta(hours=1), score=1.0, exercise=second)  # second item: 20 %
    grade = assignments.assignment_pct(session=db_session, assignment=assignment, user=learner)
    assert grade == pytest.approx((1 * 100.0 + 3 * 20.0) / 4)
    empty = make_assignment(exercises=[])
    assert assignments.assignment_pct(session=db_session, assignment=empty, user=learner) == 0.0


def test_the_pure_cores_apply_the_rules_to_rows_already_read() -> None:
    # What the gradebook calls with rows it read in bulk: no session, the same answers as the wrappers.
    naive = Assignment(opens_at=OPENS.replace(tzinfo=None), due_at=DUE.replace(tzinfo=None), late_until=None)
    assert assignments.dates_from(naive, None) == Dates(OPENS, DUE, None, None)  # naive is taken as UTC
    extension = Extension(due_at=LATE, late_until=None)
    assert assignments.dates_from(naive, extension) == Dates(OPENS, LATE, None, extension)

    assignment = Assignment(opens_at=OPENS, due_at=DUE, late_until=LATE, late_credit_pct=50.0, counts="best")
    item = AssignmentItem(position=0, weight=1.0)
    dates = assignments.dates_from(assignment, None)
    on_time = Submission(score=3.0, max_score=5.0, created_at=DUE, verdict=Verdict.failed)  # 60 % x 100
    late = Submission(score=5.0, max_score=5.0, created_at=DUE + TICK, verdict=Verdict.passed)  # 100 % x 50
    cell = assignments.choose(assignment=assignment, item=item, dates=dates, submissions=[on_time, late], override=None)
    assert (cell.submission, cell.computed_pct, cell.credit_pct, cell.late) == (on_time, 60.0, 100.0, False)
    assignment.counts = "last"
    high = GradeOverride(score_pct=140.0)
    cell = assignments.choose(assignment=assignment, item=item, dates=dates, submissions=[on_time, late], override=high)
    assert (cell.submission, cell.computed_pct, cell.score_pct, cell.late) == (late, 50.0, 100.0, True)

    assert assignments.weighted_pct([(1.0, 100.0), (3.0, 20.0), (-2.0, 0.0)]) == pytest.approx(40.0)
    assert assignments.weighted_pct([(0.0, 100.0), (-1.0, 100.0)]) == 0.0 == assignments.weighted_pct([])


# --- field rules --------------------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "opens_at": OPENS,
    "due_at": DUE,
    "late_until": LATE,
    "late_credit_pct": 50.0,
    "counts": "best",
    "max_attempts": 3,
    "rate_burst": 2,
    "rate_refill_s": 600,
}


def test_good_assignment_fields_pass() -> None:
    assignments.validate_assignment_fields(**GOOD)
    nothing = GOOD | {"opens_at": None, "due_at": None, "late_until": None}
    assignments.validate_assignment_fields(
        **nothing | {"max_attempts": None, "rate_burst": None, "rate_refill_s": None}
    )
    assignments.validate_assignment_fields(**GOOD | {"late_credit_pct": 0.0, "counts": "last"})


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"due_at": OPENS}, "due date must be after the opening date"),
        ({"late_until": DUE}, "late period must be after the due date"),
        ({"due_at": None}, "a late period needs a due date"),
        ({"late_credit_pct": 100.5}, "late credit must be a percentage from 0 to 100"),
        ({"late_credit_pct": -1.0}, "late credit must be a percentage"),
        ({"late_credit_pct": float("nan")}, "late credit must be a percentage"),
        ({"counts": "first"}, "must be 'best' or 'last', not 'first'"),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"rate_burst": 0}, "rate_burst must be at least 1"),
        ({"rate_refill_s": -5}, "rate_refill_s must be at least 1"),
        ({"rate_refill_s": None}, "needs both a burst and a refill time"),
        ({"late_until": LATE.replace(tzinfo=None), "due_at": DUE}, None),  # naive is UTC: fine
    ],
)
def test_bad_assignment_fields_say_what_is_wrong(change: dict[str, Any], problem: str | None) -> None:
    if problem is None:
        assignments.validate_assignment_fields(**GOOD | change)
        return
    with pytest.raises(InvalidInput, match=problem):
        assignments.validate_assignment_fields(**GOOD | change)


def test_extension_fields_say_what_is_wrong() -> None:
    assignment = Assignment(title="a", opens_at=OPENS, due_at=DUE)
    assignments.validate_extension_fields(assignment=assignment, due_at=LATE, late_until=None, extra_attempts=0)
    with pytest.raises(InvalidInput, match="after the assignment opens"):
        assignments.validate_extension_fields(assignment=assignment, due_at=OPENS, late_until=None, extra_attempts=0)
    with pytest.raises(InvalidInput, match="late period must be after its due date"):
        assignments.validate_extension_fields(assignment=assignment, due_at=LATE, late_until=DUE, extra_attempts=0)
    with pytest.raises(InvalidInput, match="cannot be negative"):
        assignments.validate_extension_fields(assignment=assignment, due_at=LATE, late_until=None, extra_attempts=-1)
