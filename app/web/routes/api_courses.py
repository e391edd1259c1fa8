"""``/api/courses`` and ``/api/assignments``: courses, members, invite links, assignments, extensions.

Contract: every route needs a login; what a user may not see answers 404, what they may see but not do 403
(``app.web.deps``: ``CourseDep``, ``CourseStaffDep``, ``AssignmentDep``...). Dates are UTC (ISO 8601 with an
offset; a naive date-time is refused). A learner's view of an assignment shows, per exercise, what the gate of
``app.domain.courses.assignments`` says now (the dates their extension gives them, attempts and submissions left, the
sentence the page shows) and the score that counts. Staff edit assignments (instructors) and grant extensions
(instructors and TAs); every extension stays in the audit list, revoked or not. Routes commit; nothing here
grades.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from sqlalchemy import select

from app.domain.accounts import people
from app.domain.courses import assignments, coursework, gradebook, membership
from app.domain.models import Assignment, AssignmentItem, Course, CourseRole, Extension, User, utcnow
from app.domain.platform.clock import UtcDatetime
from app.domain.results import settle
from app.web.deps import (
    AssignmentDep,
    AssignmentStaffDep,
    CourseDep,
    CourseStaffDep,
    CurrentUser,
    ExtensionDep,
    InstructorDep,
    RowId,
    SessionDep,
)
from app.web.errors import problem_responses
from worker.core.errors import NotFound

router = APIRouter(tags=["courses"])

MAX_CSV_CHARS = 1_000_000


When = Annotated[AwareDatetime, Field(description="an ISO 8601 date-time with its offset, e.g. 2026-12-08T17:00Z")]


class CourseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    slug: str = Field(min_length=1, max_length=64)
    title: str = Field(min_length=1, max_length=200)


class CourseOut(BaseModel):
    slug: str
    title: str
    is_practice: bool
    role: CourseRole

    @classmethod
    def of(cls, course: Course, role: CourseRole) -> CourseOut:
        return cls(slug=course.slug, title=course.title, is_practice=course.is_practice, role=role)


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
    items: list[ItemIn] = Field(default_factory=list, max_length=coursework.MAX_ITEMS)

    def fields(self) -> coursework.AssignmentFields:
        return coursework.AssignmentFields(
            title=self.title, opens_at=self.opens_at, due_at=self.due_at, late_until=self.late_until,
            late_credit_pct=self.late_credit_pct, counts=self.counts, max_attempts=self.max_attempts,
            rate_burst=self.rate_burst, rate_refill_s=self.rate_refill_s, is_published=self.is_published,
            practice=self.practice,
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
    max_attempts: int | None
    extra_attempts: int = Field(default=0, description="learners only: the extra attempts their extension grants")
    rate_burst: int | None
    rate_refill_s: int | None
    extended: bool = Field(description="the dates shown are this learner's extension")
    items: list[ItemOut]


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
    due_at: When
    late_until: When | None = None
    extra_attempts: int = Field(default=0, ge=0, le=1000)
    reason: str = Field(min_length=1, max_length=coursework.MAX_REASON_CHARS)


class ExtensionOut(BaseModel):
    id: int
    email: str
    due_at: UtcDatetime
    late_until: UtcDatetime | None
    extra_attempts: int
    reason: str
    granted_by: str | None
    created_at: UtcDatetime
    revoked_at: UtcDatetime | None
    revoked_by: str | None

    @classmethod
    def of(cls, extension: Extension, emails: dict[int, str]) -> ExtensionOut:
        return cls(
            id=extension.id, email=extension.user.email, due_at=extension.due_at, late_until=extension.late_until,
            extra_attempts=extension.extra_attempts, reason=extension.reason,
            granted_by=emails.get(extension.granted_by_id) if extension.granted_by_id else None,
            created_at=extension.created_at, revoked_at=extension.revoked_at,
            revoked_by=emails.get(extension.revoked_by_id) if extension.revoked_by_id else None,
        )  # fmt: skip


def assignment_out(*, session: SessionDep, assignment: Assignment, user: User, staff: bool) -> AssignmentOut:
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
    return AssignmentOut(
        id=assignment.id, course=assignment.course.slug, title=assignment.title, position=assignment.position,
        is_published=assignment.is_published, opens_at=shown.opens_at, due_at=shown.due_at,
        late_until=shown.late_until, late_credit_pct=assignment.late_credit_pct, counts=assignment.counts,
        practice=assignment.practice, max_attempts=assignment.max_attempts,
        extra_attempts=shown.extension.extra_attempts if shown.extension is not None else 0,
        rate_burst=assignment.rate_burst, rate_refill_s=assignment.rate_refill_s, extended=shown.extended, items=items,
    )  # fmt: skip


# --- courses -------------------------------------------------------------------------------------------------


@router.get("/api/courses")
def my_courses(session: SessionDep, user: CurrentUser) -> list[CourseOut]:
    """List my courses and my role in each (the practice course first)."""
    return [CourseOut.of(course, role) for course, role in membership.courses_of(session=session, user=user)]


@router.post("/api/courses", status_code=201, responses=problem_responses(409, 422))
def create_course(body: CourseIn, session: SessionDep, user: InstructorDep) -> CourseOut:
    """Create a course; I become its instructor."""
    course = membership.create_course(session=session, slug=body.slug, title=body.title, creator=user)
    session.commit()
    return CourseOut.of(course, CourseRole.instructor)


@router.get("/api/courses/{slug}")
def course_detail(access: CourseDep, session: SessionDep) -> CourseDetailOut:
    """Return a course with the assignments I may see, each as it stands for me."""
    shown = membership.visible_assignments(session=session, course=access.course, user=access.user)
    return CourseDetailOut(
        **CourseOut.of(access.course, access.role).model_dump(),
        assignments=[
            assignment_out(session=session, assignment=a, user=access.user, staff=access.is_staff) for a in shown
        ],
    )


@router.get("/api/courses/{slug}/members")
def course_members(access: CourseStaffDep, session: SessionDep) -> list[MemberOut]:
    """List the course's members: instructors, then TAs, then learners (staff only)."""
    return [
        MemberOut(email=m.user.email, name=m.user.name, role=m.role, source=m.source)
        for m in membership.members(session=session, course=access.course)
    ]


@router.post("/api/courses/{slug}/members", responses=problem_responses(413, 422))
def enroll_members(body: CsvIn, access: CourseStaffDep, session: SessionDep) -> list[EnrollRowOut]:
    """Enroll the rows of a CSV (``email[,name[,role]]``, a header optional); each row says what happened."""
    report = membership.enroll_csv(session=session, course=access.course, text=body.csv, actor=access.user)
    session.commit()
    return [
        EnrollRowOut(line=r.line, email=r.email, outcome=r.outcome, role=r.role, reason=r.reason, password=r.password)
        for r in report.rows
    ]


@router.post("/api/courses/{slug}/invite", responses=problem_responses(403, 409))
def course_invite(access: CourseStaffDep, session: SessionDep, body: InviteIn) -> InviteOut:
    """Return the course's invite link (``rotate``: a new one, which ends the old)."""
    membership.require_course_role(
        session=session, course=access.course, user=access.user, roles=(CourseRole.instructor,)
    )
    token = membership.invite_token_for(session=session, course=access.course, rotate=body.rotate)
    session.commit()
    return InviteOut(token=token, path=f"/join/{token}")


INVITE_ERRORS = problem_responses(404, described={404: "No such invite link (or it was replaced)"})


@router.post("/api/invites/{token}", responses=INVITE_ERRORS)
def join_course(token: str, session: SessionDep, user: CurrentUser) -> CourseOut:
    """Join the course of an invite link as a learner."""
    course = membership.join_by_invite(session=session, token=token, user=user)
    role = membership.course_role(session=session, course=course, user=user) or CourseRole.learner
    session.commit()
    return CourseOut.of(course, role)


# --- assignments ---------------------------------------------------------------------------------------------


@router.post("/api/courses/{slug}/assignments", status_code=201, responses=problem_responses(422))
def create_assignment(body: AssignmentIn, access: CourseStaffDep, session: SessionDep) -> AssignmentOut:
    """Add an assignment at the end of the course (instructors)."""
    assignment = coursework.create_assignment(
        session=session, course=access.course, fields=body.fields(), items=body.chosen(), actor=access.user
    )
    session.commit()
    return assignment_out(session=session, assignment=assignment, user=access.user, staff=True)


@router.get("/api/assignments/{assignment_id}")
def assignment_detail(access: AssignmentDep, session: SessionDep) -> AssignmentOut:
    """Return an assignment as it stands for me (my dates, attempts left, what counts)."""
    return assignment_out(session=session, assignment=access.assignment, user=access.user, staff=access.is_staff)


@router.put("/api/assignments/{assignment_id}", responses=problem_responses(422))
def update_assignment(body: AssignmentIn, access: AssignmentStaffDep, session: SessionDep) -> AssignmentOut:
    """Replace an assignment's fields and exercises (instructors)."""
    assignment = coursework.update_assignment(
        session=session, assignment=access.assignment, fields=body.fields(), items=body.chosen(), actor=access.user
    )
    session.commit()
    return assignment_out(session=session, assignment=assignment, user=access.user, staff=True)


@router.get("/api/assignments/{assignment_id}/extensions")
def list_extensions(access: AssignmentStaffDep, session: SessionDep) -> list[ExtensionOut]:
    """Return the audit list of the assignment's extensions, newest first (staff)."""
    found = coursework.extensions_of(session=session, assignment=access.assignment)
    ids = {i for e in found for i in (e.granted_by_id, e.revoked_by_id) if i is not None}
    emails = people.emails_of(session=session, ids=ids)  # one query for the whole list
    return [ExtensionOut.of(e, emails) for e in found]


@router.post("/api/assignments/{assignment_id}/extensions", status_code=201, responses=problem_responses(403, 404, 422))
def grant_extension(body: ExtensionIn, access: AssignmentStaffDep, session: SessionDep) -> ExtensionOut:
    """Give one learner new dates (and attempts) on this assignment, saying why (staff)."""
    learner = session.scalar(select(User).where(User.email == body.email.strip().lower()))
    if learner is None:
        raise NotFound(f"no user {body.email!r}")
    extension = coursework.grant_extension(
        session=session, assignment=access.assignment, learner=learner, due_at=body.due_at,
        late_until=body.late_until, extra_attempts=body.extra_attempts, reason=body.reason, actor=access.user,
    )  # fmt: skip
    session.commit()
    return ExtensionOut.of(extension, {access.user.id: access.user.email})


@router.post("/api/extensions/{extension_id}/revoke")
def revoke_extension(extension: ExtensionDep, session: SessionDep, user: CurrentUser) -> ExtensionOut:
    """Revoke an extension (it stays in the audit list) (staff)."""
    coursework.revoke_extension(session=session, extension=extension, actor=user)
    session.commit()
    ids = {i for i in (extension.granted_by_id, extension.revoked_by_id) if i is not None}
    return ExtensionOut.of(extension, people.emails_of(session=session, ids=ids))


# --- the gradebook -------------------------------------------------------------------------------------------


class OverrideIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item_id: int = Field(ge=1, le=2**31 - 1, description="the gradebook column (an assignment item)")
    email: str = Field(min_length=3, max_length=320, description="the learner's e-mail")
    score_pct: float = Field(ge=0, le=100)
    comment: str = Field(min_length=1, max_length=2000, description="why (kept in the audit list)")


@router.get("/api/courses/{slug}/gradebook")
def course_gradebook(access: CourseStaffDep, session: SessionDep) -> gradebook.Gradebook:
    """Return learners x assignment items with late credit, extensions and overrides applied (staff)."""
    return gradebook.gradebook(session=session, course=access.course, viewer=access.user)


@router.get(
    "/api/courses/{slug}/gradebook.csv",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}, "description": "the gradebook"}},
)
def course_gradebook_csv(access: CourseStaffDep, session: SessionDep) -> PlainTextResponse:
    """Return the gradebook as CSV, safe to open in a spreadsheet (staff)."""
    book = gradebook.gradebook(session=session, course=access.course, viewer=access.user)
    name = f"{access.course.slug}-gradebook.csv"
    return PlainTextResponse(
        gradebook.gradebook_csv(book), media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )  # fmt: skip


@router.get("/api/courses/{slug}/grades/me")
def my_course_grades(access: CourseDep, session: SessionDep) -> gradebook.LearnerGrades:
    """Return my own row of the course's gradebook (published assignments)."""
    return gradebook.my_grades(session=session, course=access.course, user=access.user)


@router.get("/api/courses/{slug}/overrides")
def course_overrides(access: CourseStaffDep, session: SessionDep) -> list[gradebook.OverrideEntry]:
    """Return the audit list of grade overrides, newest first, reverted ones included (staff)."""
    return gradebook.override_history(session=session, course=access.course, viewer=access.user)


@router.post("/api/courses/{slug}/overrides", status_code=201, responses=problem_responses(404, 422))
def override_grade(body: OverrideIn, access: CourseStaffDep, session: SessionDep) -> list[gradebook.OverrideEntry]:
    """Replace one learner's score on one item, saying why (staff); answer the updated audit list."""
    item = session.get(AssignmentItem, body.item_id)
    learner = session.scalar(select(User).where(User.email == body.email.strip().lower()))
    if item is None or learner is None:
        raise NotFound("no such item or learner in this course")
    settle.override(
        session=session, course=access.course, item=item, learner=learner, score_pct=body.score_pct,
        comment=body.comment, actor=access.user,
    )  # fmt: skip
    session.commit()
    return gradebook.override_history(session=session, course=access.course, viewer=access.user)


@router.post("/api/overrides/{override_id}/revert", responses=problem_responses(404))
def revert_grade_override(override_id: RowId, session: SessionDep, user: CurrentUser) -> dict[str, bool]:
    """Revert a grade override (it stays in the audit list) (staff of its course)."""
    settle.revert_override(session=session, override_id=override_id, actor=user)
    session.commit()
    return {"reverted": True}
