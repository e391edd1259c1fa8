"""Course bodies: courses, members, CSV enrollment, invite links, assignments as a viewer sees them, extensions,
grade overrides.

Contract: dates are UTC (ISO 8601 with an offset; a naive date-time is refused). ``assignment_out`` describes an
assignment for one viewer: for a learner, per exercise, what the gate of ``app.domain.courses.assignments`` says now
(the dates their extension gives them, attempts and submissions left, the sentence the page shows) and the score
that counts; for staff, the assignment's own dates. The API and the course pages both answer with it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from app.domain.courses import assignments, coursework, leaderboard, membership, timing
from app.domain.models import Assignment, Course, CourseRole, Extension, TimedAttempt, User, utcnow
from app.domain.platform.clock import UtcDatetime, as_utc

MAX_CSV_CHARS = 1_000_000


When = Annotated[AwareDatetime, Field(description="an ISO 8601 date-time with its offset, e.g. 2026-12-08T17:00Z")]


class CourseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    slug: str = Field(min_length=1, max_length=64)
    title: str = Field(min_length=1, max_length=200)


class CourseOut(BaseModel):
    slug: str
    title: str
    term: str = Field(description='the term it runs in ("Spring 2027"); empty when not given')
    is_practice: bool
    role: CourseRole
    archived_at: UtcDatetime | None = Field(description="when it was archived (read-only since); null: open")

    @classmethod
    def of(cls, course: Course, role: CourseRole) -> CourseOut:
        archived = as_utc(course.archived_at) if course.archived_at is not None else None
        return cls(
            slug=course.slug, title=course.title, term=course.term, is_practice=course.is_practice, role=role,
            archived_at=archived,
        )  # fmt: skip


class CourseCopyIn(BaseModel):
    """Next term from this course: give either ``shift_days`` or ``first_due``."""

    model_config = ConfigDict(extra="forbid")
    slug: str = Field(min_length=1, max_length=64)
    title: str = Field(min_length=1, max_length=200)
    term: str = Field(default="", max_length=64)
    shift_days: float | None = Field(default=None, ge=-3660, le=3660, description="move every date by this many days")
    first_due: When | None = Field(default=None, description="or: the new earliest due date")
    with_staff: bool = Field(default=False, description="bring the instructors and TAs along")


class ItemIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exercise: str = Field(min_length=1, max_length=64, description="the exercise's slug")
    weight: float = Field(default=1.0, ge=0, le=100)


class AssignmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=200)
    opens_at: When | None = None
    due_at: When | None = None
    late_until: When | None = None
    late_credit_pct: float = Field(default=50.0, ge=0, le=100)
    counts: str = Field(default="best", pattern="^(best|last)$")
    practice: Literal["examples_only", "counted"] = Field(
        default="examples_only",
        description="what learners' practice on its exercises does while it is published: examples_only (only "
        "the visible example tests run) or counted (each practice submission is an attempt under it)",
    )
    max_attempts: int | None = Field(default=None, ge=1, le=10_000)
    rate_burst: int | None = Field(default=None, ge=1, le=10_000)
    rate_refill_s: int | None = Field(default=None, ge=1, le=7 * 24 * 3600)
    is_published: bool = True
    leaderboard: bool = Field(
        default=True,
        description="show the leaderboard of each of its exercises that opts in to one ([leaderboard] in its "
        "exercise.toml); learners see pseudonyms only",
    )
    items: list[ItemIn] = Field(default_factory=list, max_length=coursework.MAX_ITEMS)
    time_limit_min: int | None = Field(
        default=None, ge=1, le=timing.MAX_LIMIT_MIN,
        description="a timed assessment: each learner's minutes from when they start it (never past its close)",
    )  # fmt: skip
    submit_on_expiry: bool = Field(
        default=True, description="timed: at a learner's end their drafts are submitted as final attempts (else kept "
        "for staff to read)",
    )  # fmt: skip
    access_code: str = Field(default="", max_length=coursework.MAX_ACCESS_CODE_CHARS,
                             description="timed: the code a learner types to start (empty: none)")  # fmt: skip
    allowed_networks: str = Field(
        default="", max_length=4000,
        description="timed: CIDR blocks (space-separated) learners must be in to start and work, e.g. a proctored "
        "room's 10.1.2.0/24 (empty: anywhere)",
    )  # fmt: skip
    exam_mode: bool = Field(
        default=False, description="timed: while a learner's time runs, the rest of gpulab is closed to them"
    )
    feedback_after_close: bool = Field(
        default=False, description="tests' outcomes and messages stay held back (the score shows) until the "
        "learner's window closes",
    )  # fmt: skip

    def fields(self) -> coursework.AssignmentFields:
        return coursework.AssignmentFields(
            title=self.title, opens_at=self.opens_at, due_at=self.due_at, late_until=self.late_until,
            late_credit_pct=self.late_credit_pct, counts=self.counts, max_attempts=self.max_attempts,
            rate_burst=self.rate_burst, rate_refill_s=self.rate_refill_s, is_published=self.is_published,
            practice=self.practice, leaderboard=self.leaderboard, time_limit_min=self.time_limit_min,
            submit_on_expiry=self.submit_on_expiry, access_code=self.access_code,
            allowed_networks=self.allowed_networks, exam_mode=self.exam_mode,
            feedback_after_close=self.feedback_after_close,
        )  # fmt: skip

    def chosen(self) -> list[tuple[str, float]]:
        return [(item.exercise, item.weight) for item in self.items]


class GateOut(BaseModel):
    """What the learner may do on one exercise now (see ``app.domain.courses.assignments.gate``)."""

    window: assignments.Window
    allowed: bool
    reason: str
    credit_pct: float | None
    attempts_used: int
    attempts_left: int | None
    tokens_left: int | None
    next_at: UtcDatetime | None


class ItemOut(BaseModel):
    exercise: str
    title: str
    kind: str
    weight: float
    gate: GateOut | None = None  # learners only
    score_pct: float | None = None  # learners only: the score that counts, late credit and overrides applied
    late: bool = False
    overridden: bool = False
    leaderboard: str | None = Field(
        default=None,
        description="the page of the exercise's leaderboard under this assignment (its JSON: "
        "/api/assignments/{id}/exercises/{slug}/leaderboard); null: no board shows",
    )


class AssignmentOut(BaseModel):
    id: int
    course: str
    title: str
    position: int
    is_published: bool
    opens_at: UtcDatetime | None
    due_at: UtcDatetime | None
    late_until: UtcDatetime | None
    late_credit_pct: float
    counts: str
    practice: str = Field(description="examples_only or counted (see AssignmentIn)")
    leaderboard: bool = Field(description="the boards of its exercises that opt in show (see AssignmentIn)")
    max_attempts: int | None
    extra_attempts: int = Field(default=0, description="learners only: the extra attempts their extension grants")
    rate_burst: int | None
    rate_refill_s: int | None
    extended: bool = Field(description="the dates shown are this learner's extension")
    items: list[ItemOut]
    time_limit_min: int | None = Field(default=None, description="timed: the limit in minutes (see AssignmentIn)")
    submit_on_expiry: bool = True
    needs_access_code: bool = Field(default=False, description="timed: starting it asks for an access code")
    allowed_networks: str | None = Field(default=None, description="staff only: the networks learners must be in")
    exam_mode: bool = False
    feedback_after_close: bool = False
    my_time: TimedAttemptOut | None = Field(
        default=None, description="learners of a timed assessment: their clock once started (none before)"
    )


class TimedAttemptOut(BaseModel):
    """A learner's clock on a timed assessment: the server's times; count down from ``remaining_s``."""

    started_at: UtcDatetime
    ends_at: UtcDatetime = Field(description="fixed at the start: the limit (with accommodations), or the close")
    remaining_s: float = Field(description="seconds left when this answer was made (0: over)")
    limit_min: float = Field(description="the minutes this learner had, accommodations included, before any close")
    submitted: dict[str, str] | None = Field(
        default=None, description="after the end, with submit on expiry: the submission made of each item's draft"
    )

    @classmethod
    def of(cls, attempt: TimedAttempt, *, now: datetime) -> TimedAttemptOut:
        limit = (as_utc(attempt.ends_at) - as_utc(attempt.started_at)).total_seconds() / 60
        return cls(
            started_at=attempt.started_at, ends_at=attempt.ends_at, remaining_s=timing.remaining_s(attempt, now),
            limit_min=round(limit, 2), submitted=attempt.submitted,
        )  # fmt: skip


class StartIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    access_code: str = Field(default="", max_length=200, description="the code the person running the exam gives")


class CourseDetailOut(CourseOut):
    assignments: list[AssignmentOut]


class MemberOut(BaseModel):
    email: str
    name: str
    role: CourseRole
    source: str


class EnrollRowOut(BaseModel):
    line: int
    email: str
    outcome: membership.Outcome
    role: str = Field(description="the role the person has in the course after this row")
    reason: str
    password: str = Field(description="a new account's one-time password (hand it over; it is not stored)")


class CsvIn(BaseModel):
    """A CSV as JSON text (state-changing API calls are JSON: the CSRF rule)."""

    model_config = ConfigDict(extra="forbid")
    csv: str = Field(max_length=MAX_CSV_CHARS, description="email[,name[,role]] rows, a header optional")


class InviteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rotate: bool = False


class InviteOut(BaseModel):
    token: str
    path: str


class ExtensionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: str = Field(min_length=3, max_length=320)
    due_at: When | None = Field(default=None, description="new due date (none: the assignment's dates stay)")
    late_until: When | None = None
    extra_attempts: int = Field(default=0, ge=0, le=1000)
    extra_minutes: int = Field(default=0, ge=0, le=timing.MAX_LIMIT_MIN,
                               description="timed assessments: minutes added to the learner's limit")  # fmt: skip
    time_multiplier: float = Field(default=1.0, ge=1.0, le=timing.MAX_MULTIPLIER,
                                   description="timed assessments: the limit times this (1.5: half again)")  # fmt: skip
    reason: str = Field(min_length=1, max_length=coursework.MAX_REASON_CHARS)


class ExtensionOut(BaseModel):
    id: int
    email: str
    due_at: UtcDatetime | None
    late_until: UtcDatetime | None
    extra_attempts: int
    extra_minutes: int = 0
    time_multiplier: float = 1.0
    reason: str
    granted_by: str | None
    created_at: UtcDatetime
    revoked_at: UtcDatetime | None
    revoked_by: str | None

    @classmethod
    def of(cls, extension: Extension, emails: dict[int, str]) -> ExtensionOut:
        return cls(
            id=extension.id, email=extension.user.email, due_at=extension.due_at, late_until=extension.late_until,
            extra_attempts=extension.extra_attempts, reason=extension.reason, extra_minutes=extension.extra_minutes,
            time_multiplier=extension.time_multiplier,
            granted_by=emails.get(extension.granted_by_id) if extension.granted_by_id else None,
            created_at=extension.created_at, revoked_at=extension.revoked_at,
            revoked_by=emails.get(extension.revoked_by_id) if extension.revoked_by_id else None,
        )  # fmt: skip


def board_path(assignment: Assignment, slug: str) -> str:
    """Return the page of ``slug``'s leaderboard under ``assignment``."""
    return f"/courses/{quote(assignment.course.slug)}/assignments/{assignment.id}/exercises/{quote(slug)}/leaderboard"


class LeaderRowOut(BaseModel):
    """One learner on a leaderboard: their best passing value of the metric."""

    rank: int = Field(description="1 is best; equal values share a rank (1, 1, 3)")
    pseudonym: str = Field(description="the learner's name on the course's boards (stable; not their e-mail)")
    value: float
    unit: str
    submitted_at: UtcDatetime = Field(description="when the ranked submission was made")
    you: bool = Field(description="this row is the caller's")
    submission_id: str | None = Field(description="the ranked submission: the caller's own row, or any row for staff")
    name: str | None = Field(default=None, description="staff of the course only: the learner's name")
    email: str | None = Field(default=None, description="staff of the course only: the learner's e-mail")


class LeaderboardOut(BaseModel):
    """An exercise's leaderboard under an assignment (``app.domain.courses.leaderboard``)."""

    assignment_id: int
    course: str
    exercise: str
    title: str
    metric: str = Field(description="the measurement ranked, as the exercise's hidden tests record it")
    label: str = Field(description="the column's heading")
    order: Literal["lower", "higher"] = Field(description="which values rank first")
    names: bool = Field(description="rows carry names and e-mails (the caller is staff of the course)")
    rows: list[LeaderRowOut]

    @classmethod
    def of(cls, board: leaderboard.Board) -> LeaderboardOut:
        return cls(
            assignment_id=board.assignment.id, course=board.assignment.course.slug, exercise=board.exercise.slug,
            title=board.title, metric=board.spec.metric, label=board.spec.heading, order=board.spec.order,
            names=board.names,
            rows=[
                LeaderRowOut(
                    rank=r.rank, pseudonym=r.pseudonym, value=r.value, unit=r.unit, submitted_at=r.submitted_at,
                    you=r.you, submission_id=r.submission_id, name=r.name, email=r.email,
                )
                for r in board.rows
            ],
        )  # fmt: skip


def assignment_out(*, session: Session, assignment: Assignment, user: User, staff: bool) -> AssignmentOut:
    """Describe ``assignment`` for ``user``: their own dates, gates and scores when they are a learner."""
    now = utcnow()
    dates = assignments.effective_dates(session=session, assignment=assignment, user=user)
    items = []
    for item in assignment.items:
        exercise = item.exercise
        version = exercise.current_version
        out = ItemOut(
            exercise=exercise.slug, title=version.title if version else exercise.slug,
            kind=version.kind if version else "code", weight=item.weight,
            leaderboard=board_path(assignment, exercise.slug)
            if leaderboard.board_for(assignment, exercise) is not None else None,
        )  # fmt: skip
        if not staff:
            gate = assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=now)
            counted = assignments.counted(session=session, assignment=assignment, item=item, user=user, dates=dates)
            out.gate = GateOut(
                window=gate.window, allowed=gate.allowed, reason=gate.reason, credit_pct=gate.credit_pct,
                attempts_used=gate.attempts_used, attempts_left=gate.attempts_left, tokens_left=gate.tokens_left,
                next_at=gate.next_at,
            )  # fmt: skip
            out.score_pct, out.late, out.overridden = counted.score_pct, counted.late, counted.overridden
        items.append(out)
    own = assignments.Dates(assignment.opens_at, assignment.due_at, assignment.late_until, None)
    shown = own if staff else dates
    attempt = None if staff else timing.attempt_of(session=session, assignment=assignment, user=user)
    return AssignmentOut(
        id=assignment.id, course=assignment.course.slug, title=assignment.title, position=assignment.position,
        is_published=assignment.is_published, opens_at=shown.opens_at, due_at=shown.due_at,
        late_until=shown.late_until, late_credit_pct=assignment.late_credit_pct, counts=assignment.counts,
        practice=assignment.practice, leaderboard=assignment.leaderboard, max_attempts=assignment.max_attempts,
        extra_attempts=shown.extension.extra_attempts if shown.extension is not None else 0,
        rate_burst=assignment.rate_burst, rate_refill_s=assignment.rate_refill_s, extended=shown.extended, items=items,
        time_limit_min=assignment.time_limit_min, submit_on_expiry=assignment.submit_on_expiry,
        needs_access_code=bool(assignment.access_code), allowed_networks=assignment.allowed_networks if staff else None,
        exam_mode=assignment.exam_mode, feedback_after_close=assignment.feedback_after_close,
        my_time=TimedAttemptOut.of(attempt, now=now) if attempt is not None else None,
    )  # fmt: skip


class OverrideIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item_id: int = Field(ge=1, le=2**31 - 1, description="the gradebook column (an assignment item)")
    email: str = Field(min_length=3, max_length=320, description="the learner's e-mail")
    score_pct: float = Field(ge=0, le=100)
    comment: str = Field(min_length=1, max_length=2000, description="why (kept in the audit list)")
