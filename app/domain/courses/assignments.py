"""The rules of an assignment: a learner's dates, window, attempts, rate, what they may submit and what counts.

Contract:
- Dates: ``effective_dates`` is the assignment's ``opens_at``/``due_at``/``late_until``, except that the newest
  unrevoked ``Extension`` of the learner replaces ``due_at`` *and* ``late_until`` (an extension without a
  ``late_until`` means no late period for that learner); ``opens_at`` never moves. Dates are whatever holds
  now: a revoked extension no longer counts, not even for submissions made while it stood.
- Window at an instant: ``not_open`` before ``opens_at``; ``open`` up to ``due_at`` inclusive (always, once
  opened, without a ``due_at``); ``late`` after ``due_at`` up to ``late_until`` inclusive; ``closed`` after.
  Credit is 100 % when open, ``late_credit_pct`` when late, nothing (not accepted) otherwise.
- Attempts: the learner's submissions made under the assignment to any version of the exercise, platform
  failures left out (status ``error``, or verdict ``internal_error``): the platform's fault costs nothing.
  Queued and running submissions count (they may still pass). The limit is ``max_attempts`` plus the
  extension's ``extra_attempts``; no ``max_attempts`` is no limit.
- Rate: a token bucket of ``rate_burst`` tokens, one back every ``rate_refill_s``, replayed over the counted
  submissions' ``created_at`` in order, so every API process computes the same answer from the database with
  no shared memory. A submission that was let in with the bucket empty (two processes racing, a policy made
  stricter) empties it and costs no more. No ``rate_burst`` is no limit (``tokens_left`` None).
- ``gate`` is what the learner sees before submitting and what submitting enforces (``check_submit``):
  ``Forbidden`` for an unpublished assignment, an exercise not in it, a window not yet open or closed, no attempts
  left; ``RateLimited`` (with ``retry_after_s``) for an empty bucket. Course membership is checked elsewhere.
- What counts (``counted``): among the learner's settled, non-failed submissions under the assignment to the
  item's exercise, the best credited score (``counts = "best"``, the earliest of equals) or the newest
  (``"last"``). Its credit comes from its ``created_at`` against the learner's effective dates (a submission
  outside every window gets none). The newest unreverted ``GradeOverride`` replaces the score; the computed
  one stays in ``computed_pct``. Quiz attempts are submissions and count alike. ``assignment_pct`` is the
  weighted mean of the items' ``score_pct`` (negative weights as 0; 0 for an assignment without weight).
- Each rule is written once, as a pure core that takes rows already read, so a bulk reader (the gradebook)
  applies the very same rules: ``dates_from`` (dates from the extension in force), ``countable`` and
  ``not_platform_failure`` (the SQL conditions), ``fraction`` (a score over its maximum), ``choose`` (which
  submission counts, its credit, late, the override), ``weighs`` and ``weighted_pct`` (the weighted mean).
  ``effective_dates``, ``counted`` and ``assignment_pct`` only read their rows and call them.
- ``validate_assignment_fields``/``validate_extension_fields`` hold the field rules and raise ``InvalidInput``.
- Times are timezone-aware UTC (naive values, as SQLite returns them, are taken as UTC). Functions that take a
  session take keyword-only arguments, only read, and never commit.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from app.domain.courses import timing
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Exercise,
    Extension,
    GradeOverride,
    Submission,
    SubmissionStatus,
    User,
)
from app.domain.platform.clock import as_utc
from app.domain.submissions.lifecycle import of_exercise
from worker.core import humane
from worker.core.errors import Forbidden, InvalidInput, RateLimited
from worker.core.outcome import Verdict

COUNTS = ("best", "last")
PRACTICE = ("examples_only", "counted")  # what practice on an assignment's exercises does (coursework.practice_under)
FULL_CREDIT_PCT = 100.0


class Window(enum.StrEnum):
    not_open = "not_open"
    open = "open"
    late = "late"
    closed = "closed"


@dataclass(frozen=True)
class Dates:
    """One learner's dates on one assignment, and the extension that set them (None: the assignment's own)."""

    opens_at: datetime | None
    due_at: datetime | None
    late_until: datetime | None
    extension: Extension | None

    @property
    def extended(self) -> bool:
        return self.extension is not None


@dataclass(frozen=True)
class Rate:
    """Tokens left in the bucket now (None: no limit) and when the next one comes back (None: full or no limit)."""

    tokens_left: int | None
    next_at: datetime | None


@dataclass(frozen=True)
class Gate:
    """What a learner may do on one exercise of an assignment now, and the sentence that says so."""

    window: Window
    credit_pct: float | None
    attempts_used: int
    attempts_left: int | None  # None: unlimited
    tokens_left: int | None  # None: no rate limit
    next_at: datetime | None
    allowed: bool
    reason: str
    retry_after_s: int | None = None  # set only when the rate alone refuses


@dataclass(frozen=True)
class Counted:
    """The counted result of one item for one learner: which submission, its credit and the final score."""

    item: AssignmentItem
    submission: Submission | None
    raw_fraction: float | None  # the submission's score over its max score, 0..1
    credit_pct: float | None  # the credit applied to it (100, the late credit, or None outside every window)
    computed_pct: float  # 0..100 from the submissions alone
    score_pct: float  # 0..100: the override's when there is one, else computed_pct
    late: bool
    extended: bool
    override: GradeOverride | None

    @property
    def overridden(self) -> bool:
        return self.override is not None


def _utc(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


def _wait(seconds: float) -> str:
    """Say how long a wait is, rounded up: "45 s", "3 min", "2 h 5 min"."""
    whole_s = max(1, math.ceil(seconds))
    if whole_s < 60:
        return f"{whole_s} s"
    minutes = math.ceil(whole_s / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


# --- dates and windows --------------------------------------------------------------------------------------


def current_extension(*, session: Session, assignment: Assignment, user: User) -> Extension | None:
    """Return the newest unrevoked extension of ``user`` on ``assignment``, if any."""
    stmt = (
        select(Extension)
        .where(
            Extension.assignment_id == assignment.id,
            Extension.user_id == user.id,
            Extension.revoked_at.is_(None),
        )
        .order_by(Extension.created_at.desc(), Extension.id.desc())
        .limit(1)
    )
    return session.scalar(stmt)


def extensions_in_force(
    *, session: Session, assignment_ids: list[int], user_ids: list[int]
) -> dict[tuple[int, int], Extension]:
    """Return the extension in force per (assignment, learner): the newest unrevoked, as ``current_extension``."""
    if not assignment_ids or not user_ids:
        return {}
    stmt = (
        select(Extension)
        .where(
            Extension.assignment_id.in_(assignment_ids),
            Extension.user_id.in_(user_ids),
            Extension.revoked_at.is_(None),
        )
        .order_by(Extension.created_at, Extension.id)
    )
    # Oldest first: a newer extension overwrites an older one.
    return {(e.assignment_id, e.user_id): e for e in session.scalars(stmt)}


def dates_from(assignment: Assignment, extension: Extension | None) -> Dates:
    """Return a learner's dates on ``assignment`` given the extension in force (None: the assignment's own)."""
    opens_at = _utc(assignment.opens_at)
    if extension is None or extension.due_at is None:  # none, or one that only gives time or attempts
        return Dates(opens_at, _utc(assignment.due_at), _utc(assignment.late_until), extension)
    # An extension replaces both dates: without its own late end there is no late period.
    return Dates(opens_at, as_utc(extension.due_at), _utc(extension.late_until), extension)


def effective_dates(*, session: Session, assignment: Assignment, user: User) -> Dates:
    """Return ``user``'s dates on ``assignment``: its own, or those of the extension in force."""
    return dates_from(assignment, current_extension(session=session, assignment=assignment, user=user))


def window(dates: Dates, now: datetime) -> Window:
    """Return where ``now`` falls among ``dates``."""
    now = as_utc(now)
    if dates.opens_at is not None and now < dates.opens_at:
        return Window.not_open
    if dates.due_at is None or now <= dates.due_at:
        return Window.open
    if dates.late_until is not None and now <= dates.late_until:
        return Window.late
    return Window.closed


def credit_pct(assignment: Assignment, dates: Dates, at: datetime) -> float | None:
    """Return the credit of a submission made ``at``: 100 on time, the late credit when late, None if refused."""
    match window(dates, at):
        case Window.open:
            return FULL_CREDIT_PCT
        case Window.late:
            return float(assignment.late_credit_pct)
        case _:
            return None


# --- attempts and rate --------------------------------------------------------------------------------------


def not_platform_failure() -> list[ColumnElement[bool]]:
    """Return the SQL conditions that leave platform failures out (status ``error``, verdict ``internal_error``)."""
    return [
        Submission.status != SubmissionStatus.error,
        or_(Submission.verdict.is_(None), Submission.verdict != Verdict.internal_error),
    ]


def countable() -> list[ColumnElement[bool]]:
    """Return the SQL conditions of a submission that may count: graded, scored, not a platform failure."""
    return [Submission.status == SubmissionStatus.graded, Submission.score.is_not(None), *not_platform_failure()]


def _counted_times(*, session: Session, assignment: Assignment, exercise: Exercise, user: User) -> list[datetime]:
    """Return when each counted submission (platform failures left out) was made, oldest first."""
    stmt = (
        of_exercise(exercise)
        .where(Submission.user_id == user.id, Submission.assignment_id == assignment.id, *not_platform_failure())
        .with_only_columns(Submission.created_at)
        .order_by(Submission.created_at)
    )
    return [as_utc(created) for created in session.scalars(stmt)]


def attempts_used(*, session: Session, assignment: Assignment, exercise: Exercise, user: User) -> int:
    """Return how many attempts ``user`` has used on ``exercise`` under ``assignment``."""
    counted = (
        of_exercise(exercise)
        .where(Submission.user_id == user.id, Submission.assignment_id == assignment.id, *not_platform_failure())
        .subquery()
    )
    return int(session.scalar(select(func.count()).select_from(counted)) or 0)


def _attempts_left(assignment: Assignment, dates: Dates, used: int) -> int | None:
    if assignment.max_attempts is None:
        return None
    extra = dates.extension.extra_attempts if dates.extension is not None else 0
    return max(0, assignment.max_attempts + extra - used)


def replay_bucket(*, burst: int, refill_s: int | None, times: list[datetime], now: datetime) -> Rate:
    """Replay a token bucket over submission times (oldest first) and return its state at ``now``.

    The bucket is kept as the instant it would be full again: each submission pushes that instant one refill
    later, but never further than an empty bucket's, so a submission let in when it was empty costs no more.
    """
    now = as_utc(now)
    if refill_s is None or refill_s <= 0:  # a bucket that never refills is an attempt limit
        return Rate(tokens_left=max(0, burst - len(times)), next_at=None)
    refill = timedelta(seconds=refill_s)
    full_at: datetime | None = None
    for at in times:
        start = at if full_at is None else max(full_at, at)
        full_at = min(start + refill, at + burst * refill)
    if full_at is None or full_at <= now:
        return Rate(tokens_left=burst, next_at=None)
    missing = math.ceil((full_at - now) / refill)  # tokens still to come back
    tokens_left = max(0, burst - missing)
    # The next token is back once the time left to full is one refill less than it is now.
    next_at = full_at - (missing - 1) * refill
    return Rate(tokens_left=tokens_left, next_at=next_at)


def rate(*, session: Session, assignment: Assignment, exercise: Exercise, user: User, now: datetime) -> Rate:
    """Return ``user``'s token bucket on ``exercise`` under ``assignment`` at ``now``."""
    if assignment.rate_burst is None:
        return Rate(tokens_left=None, next_at=None)
    times = _counted_times(session=session, assignment=assignment, exercise=exercise, user=user)
    return replay_bucket(burst=assignment.rate_burst, refill_s=assignment.rate_refill_s, times=times, now=now)


# --- the gate -----------------------------------------------------------------------------------------------


def _in_assignment(assignment: Assignment, exercise: Exercise) -> bool:
    return any(item.exercise_id == exercise.id for item in assignment.items)


def _closed_at(dates: Dates) -> datetime | None:
    return dates.late_until or dates.due_at


def gate(*, session: Session, assignment: Assignment, exercise: Exercise, user: User, now: datetime) -> Gate:
    """Return what ``user`` may do on ``exercise`` of ``assignment`` at ``now``, with the sentence to show."""
    now = as_utc(now)
    dates = effective_dates(session=session, assignment=assignment, user=user)
    where = window(dates, now)
    times = _counted_times(session=session, assignment=assignment, exercise=exercise, user=user)
    used = len(times)
    left = _attempts_left(assignment, dates, used)
    if assignment.rate_burst is None:
        bucket = Rate(tokens_left=None, next_at=None)
    else:
        bucket = replay_bucket(burst=assignment.rate_burst, refill_s=assignment.rate_refill_s, times=times, now=now)

    def made(allowed: bool, reason: str, retry_after_s: int | None = None) -> Gate:
        return Gate(
            window=where,
            credit_pct=credit_pct(assignment, dates, now),
            attempts_used=used,
            attempts_left=left,
            tokens_left=bucket.tokens_left,
            next_at=bucket.next_at,
            allowed=allowed,
            reason=reason,
            retry_after_s=retry_after_s,
        )

    if assignment.course.archived_at is not None:
        return made(False, f"the course {assignment.course.title!r} is archived: nothing can be submitted")
    if not assignment.is_published:
        return made(False, "this assignment is not published")
    if not _in_assignment(assignment, exercise):
        return made(False, f"exercise {exercise.slug!r} is not part of assignment {assignment.title!r}")
    if where is Window.not_open:
        assert dates.opens_at is not None  # only an opening date makes it not open
        return made(False, f"opens on {humane.utc_text(dates.opens_at)}")
    if where is Window.closed:
        closed_at = _closed_at(dates)
        assert closed_at is not None  # only a due date closes it
        return made(False, f"closed on {humane.utc_text(closed_at)}")
    timed = timing.refusal(session=session, assignment=assignment, user=user, now=now)
    if timed is not None:
        return made(False, timed)
    if left == 0:
        return made(False, f"no attempts left ({used} used)")

    parts = []
    if where is Window.late:
        parts.append(f"late: {humane.number(assignment.late_credit_pct)}% credit")
    elif dates.due_at is not None:
        parts.append(f"due on {humane.utc_text(dates.due_at)}")
    if left is not None:
        parts.append(f"{left} attempt{'s' if left != 1 else ''} left")
    if bucket.tokens_left == 0 and bucket.next_at is None:  # a burst that never refills (no rate_refill_s)
        return made(False, "; ".join([*parts, "no submissions left"]))
    if bucket.tokens_left == 0 and bucket.next_at is not None:
        wait_s = (bucket.next_at - now).total_seconds()
        parts.append(f"next in {_wait(wait_s)}")
        return made(False, "; ".join(parts), retry_after_s=max(1, math.ceil(wait_s)))
    return made(True, "; ".join(parts) or "open")


def check_submit(gate: Gate) -> None:
    """Raise what refuses a submission through ``gate``: ``RateLimited`` for the rate, else ``Forbidden``."""
    if gate.allowed:
        return
    if gate.retry_after_s is not None:  # an instruction, not the box's sentence: what to do, and when
        wait = _wait(gate.retry_after_s)
        raise RateLimited(
            f"Wait {wait}, then submit again: you have used the submissions this assignment allows in a row "
            "(nothing was stored, no attempt was used).",
            retry_after_s=gate.retry_after_s,
        )
    raise Forbidden(gate.reason)


# --- what counts --------------------------------------------------------------------------------------------


def fraction(submission: Submission) -> float:
    """Return the submission's score as a fraction of its own maximum, within 0..1."""
    if submission.max_score <= 0:  # an exercise worth no points: passing is all of it
        return 1.0 if submission.verdict is Verdict.passed else 0.0
    return min(1.0, max(0.0, (submission.score or 0.0) / submission.max_score))


def choose(
    *,
    assignment: Assignment,
    item: AssignmentItem,
    dates: Dates,
    submissions: Iterable[Submission],
    override: GradeOverride | None,
) -> Counted:
    """Return ``item``'s counted result from the learner's countable submissions (oldest first) and override."""
    chosen: Submission | None = None
    chosen_credit: float | None = None
    chosen_pct, chosen_late = 0.0, False
    for submission in submissions:
        made_at = as_utc(submission.created_at)
        credit = credit_pct(assignment, dates, made_at)
        pct = fraction(submission) * (credit or 0.0)
        # Oldest first: "last" keeps overwriting; "best" moves only for a strictly better credited score.
        if chosen is None or assignment.counts == "last" or pct > chosen_pct:
            chosen, chosen_credit, chosen_pct = submission, credit, pct
            chosen_late = window(dates, made_at) in (Window.late, Window.closed)
    score_pct = chosen_pct if override is None else min(100.0, max(0.0, override.score_pct))
    return Counted(
        item=item,
        submission=chosen,
        raw_fraction=fraction(chosen) if chosen is not None else None,
        credit_pct=chosen_credit,
        computed_pct=chosen_pct,
        score_pct=score_pct,
        late=chosen_late,
        extended=dates.extended,
        override=override,
    )


def weighs(assignment: Assignment) -> bool:
    """Return whether any item of ``assignment`` carries weight (without, its pct is 0 whatever the scores)."""
    return any(item.weight > 0 for item in assignment.items)


def weighted_pct(pairs: Iterable[tuple[float, float]]) -> float:
    """Return the weighted mean of ``(weight, pct)`` pairs, negative weights as 0: 0..100 (0 without weight)."""
    weighed = [(max(0.0, weight), pct) for weight, pct in pairs]
    total_weight = sum(weight for weight, _ in weighed)
    if total_weight <= 0:
        return 0.0
    return sum(weight * pct for weight, pct in weighed) / total_weight


def current_override(*, session: Session, item: AssignmentItem, user: User) -> GradeOverride | None:
    """Return the newest unreverted override of ``user``'s cell on ``item``, if any."""
    stmt = (
        select(GradeOverride)
        .where(GradeOverride.item_id == item.id, GradeOverride.user_id == user.id, GradeOverride.reverted_at.is_(None))
        .order_by(GradeOverride.created_at.desc(), GradeOverride.id.desc())
        .limit(1)
    )
    return session.scalar(stmt)


def counted(
    *, session: Session, assignment: Assignment, item: AssignmentItem, user: User, dates: Dates | None = None
) -> Counted:
    """Return the counted result of ``item`` for ``user`` (``dates``: their effective dates, if already read)."""
    dates = dates or effective_dates(session=session, assignment=assignment, user=user)
    stmt = (
        of_exercise(item.exercise)
        .where(Submission.user_id == user.id, Submission.assignment_id == assignment.id, *countable())
        .order_by(Submission.created_at, Submission.id)
    )
    submissions = list(session.scalars(stmt))
    override = current_override(session=session, item=item, user=user)
    return choose(assignment=assignment, item=item, dates=dates, submissions=submissions, override=override)


def assignment_pct(*, session: Session, assignment: Assignment, user: User) -> float:
    """Return ``user``'s grade on ``assignment``: the weighted mean of its items' scores, 0..100."""
    if not weighs(assignment):
        return 0.0  # no cell to read: none would count
    dates = effective_dates(session=session, assignment=assignment, user=user)
    return weighted_pct(
        (item.weight, counted(session=session, assignment=assignment, item=item, user=user, dates=dates).score_pct)
        for item in assignment.items
    )


# --- field rules --------------------------------------------------------------------------------------------


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise InvalidInput(f"{name} must be at least 1 (leave it empty for no limit)")


def validate_assignment_fields(
    *,
    opens_at: datetime | None,
    due_at: datetime | None,
    late_until: datetime | None,
    late_credit_pct: float,
    counts: str,
    max_attempts: int | None,
    rate_burst: int | None,
    rate_refill_s: int | None,
    practice: str = "examples_only",
) -> None:
    """Raise ``InvalidInput`` saying what is wrong with these assignment fields, if anything."""
    opens_at, due_at, late_until = _utc(opens_at), _utc(due_at), _utc(late_until)
    if opens_at is not None and due_at is not None and due_at <= opens_at:
        raise InvalidInput("the due date must be after the opening date")
    if late_until is not None and due_at is None:
        raise InvalidInput("a late period needs a due date")
    if late_until is not None and due_at is not None and late_until <= due_at:
        raise InvalidInput("the end of the late period must be after the due date")
    if not math.isfinite(late_credit_pct) or not 0 <= late_credit_pct <= 100:
        raise InvalidInput("the late credit must be a percentage from 0 to 100")
    if counts not in COUNTS:
        raise InvalidInput(f"which attempt counts must be 'best' or 'last', not {counts!r}")
    if practice not in PRACTICE:
        raise InvalidInput(f"practice must be 'examples_only' or 'counted', not {practice!r}")
    _positive("max_attempts", max_attempts)
    _positive("rate_burst", rate_burst)
    _positive("rate_refill_s", rate_refill_s)
    if (rate_burst is None) != (rate_refill_s is None):
        raise InvalidInput("a rate limit needs both a burst and a refill time (or neither)")


def validate_extension_fields(
    *, assignment: Assignment, due_at: datetime | None, late_until: datetime | None, extra_attempts: int
) -> None:
    """Raise ``InvalidInput`` saying what is wrong with an extension of ``assignment``, if anything."""
    if extra_attempts < 0:
        raise InvalidInput("extra attempts cannot be negative")
    if due_at is None:  # the assignment's own dates
        return
    due_at, late_until = as_utc(due_at), _utc(late_until)
    opens_at = _utc(assignment.opens_at)
    if opens_at is not None and due_at <= opens_at:
        raise InvalidInput("the extended due date must be after the assignment opens")
    if late_until is not None and late_until <= due_at:
        raise InvalidInput("the end of the extended late period must be after its due date")
    if extra_attempts < 0:
        raise InvalidInput("extra attempts cannot be negative")


def places_made(*, session: Session, assignment_ids: Iterable[int | None]) -> dict[int | None, dict[str, str]]:
    """Return, per assignment id among ``assignment_ids``, its title, its course and their pages."""
    ids = sorted({i for i in assignment_ids if i is not None})
    found: dict[int | None, dict[str, str]] = {}
    if not ids:
        return found
    for assignment in session.scalars(select(Assignment).where(Assignment.id.in_(ids))):
        found[assignment.id] = {
            "id": str(assignment.id), "title": assignment.title, "course": assignment.course.title,
            "course_url": f"/courses/{quote(assignment.course.slug)}",
            "url": f"/courses/{quote(assignment.course.slug)}/assignments/{assignment.id}",
        }  # fmt: skip
    return found
