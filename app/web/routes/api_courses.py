"""``/api/courses`` and ``/api/assignments``: courses, members, invite links, assignments, extensions.

Contract: every route needs a login; what a user may not see answers 404, what they may see but not do 403
(``app.web.deps``: ``CourseDep``, ``CourseStaffDep``, ``AssignmentDep``...). Dates are UTC (ISO 8601 with an
offset; a naive date-time is refused). A learner's view of an assignment shows, per exercise, what the gate of
``app.domain.courses.assignments`` says now (the dates their extension gives them, attempts and submissions left, the
sentence the page shows) and the score that counts. Staff edit assignments (instructors) and grant extensions
(instructors and TAs); every extension stays in the audit list, revoked or not. An exercise's leaderboard under an
assignment (``app.domain.courses.leaderboard``) is for the course's members: pseudonyms, names for its staff. Routes
commit; nothing here grades.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import select

from app.domain.accounts import people
from app.domain.courses import coursework, drafts, gradebook, leaderboard, membership
from app.domain.models import AssignmentItem, CourseRole, User, utcnow
from app.domain.results import settle
from app.web.deps import (
    AssignmentDep,
    AssignmentStaffDep,
    CourseDep,
    CourseInstructorDep,
    CourseStaffDep,
    CurrentUser,
    ExerciseDep,
    ExtensionDep,
    InstructorDep,
    RowId,
    SessionDep,
)
from app.web.errors import problem_responses
from app.web.schemas.courses import (
    AssignmentIn,
    AssignmentOut,
    CourseDetailOut,
    CourseIn,
    CourseOut,
    CsvIn,
    EnrollRowOut,
    ExtensionIn,
    ExtensionOut,
    InviteIn,
    InviteOut,
    LeaderboardOut,
    MemberOut,
    OverrideIn,
    StartIn,
    TimedAttemptOut,
    assignment_out,
)
from app.web.schemas.drafts import StaffDraftOut
from app.web.sessions import client_ip
from worker.core.errors import NotFound

router = APIRouter(tags=["courses"])
ARCHIVED = {409: "The course is archived: nothing in it changes"}

# --- courses -------------------------------------------------------------------------------------------------


@router.get("/api/courses")
def my_courses(
    session: SessionDep,
    user: CurrentUser,
    archived: Annotated[bool, Query(description="the archived courses instead of the others")] = False,
) -> list[CourseOut]:
    """List my courses and my role in each (the practice course first); archived ones on request."""
    found = membership.courses_of(session=session, user=user, archived=archived)
    return [CourseOut.of(course, role) for course, role in found]


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


@router.post("/api/courses/{slug}/members", responses=problem_responses(409, 413, 422, described=ARCHIVED))
def enroll_members(body: CsvIn, access: CourseStaffDep, session: SessionDep) -> list[EnrollRowOut]:
    """Enroll the rows of a CSV (``email[,name[,role]]``, a header optional); each row says what happened."""
    report = membership.enroll_csv(session=session, course=access.course, text=body.csv, actor=access.user)
    session.commit()
    return [
        EnrollRowOut(line=r.line, email=r.email, outcome=r.outcome, role=r.role, reason=r.reason, password=r.password)
        for r in report.rows
    ]


@router.post("/api/courses/{slug}/invite", responses=problem_responses(403, 409, described=ARCHIVED))
def course_invite(access: CourseInstructorDep, session: SessionDep, body: InviteIn) -> InviteOut:
    """Return the course's invite link (``rotate``: a new one, which ends the old)."""
    token = membership.invite_token_for(session=session, course=access.course, rotate=body.rotate)
    session.commit()
    return InviteOut(token=token, path=f"/join/{token}")


INVITE_ERRORS = problem_responses(404, 409, described={404: "No such invite link (or it was replaced)", **ARCHIVED})


@router.post("/api/invites/{token}", responses=INVITE_ERRORS)
def join_course(token: str, session: SessionDep, user: CurrentUser) -> CourseOut:
    """Join the course of an invite link as a learner."""
    course = membership.join_by_invite(session=session, token=token, user=user)
    role = membership.course_role(session=session, course=course, user=user) or CourseRole.learner
    session.commit()
    return CourseOut.of(course, role)


# --- assignments ---------------------------------------------------------------------------------------------


@router.post(
    "/api/courses/{slug}/assignments", status_code=201, responses=problem_responses(409, 422, described=ARCHIVED)
)
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


@router.get(
    "/api/assignments/{assignment_id}/exercises/{slug}/leaderboard",
    responses=problem_responses(
        404, described={404: "no such assignment or exercise for the caller, or no leaderboard for them there"}
    ),
)
def assignment_leaderboard(access: AssignmentDep, exercise: ExerciseDep, session: SessionDep) -> LeaderboardOut:
    """Return the exercise's leaderboard under the assignment: pseudonyms, with names for the course's staff."""
    board = leaderboard.leaderboard(
        session=session, assignment=access.assignment, exercise=exercise, viewer=access.user
    )
    return LeaderboardOut.of(board)


@router.put("/api/assignments/{assignment_id}", responses=problem_responses(409, 422, described=ARCHIVED))
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


@router.post(
    "/api/assignments/{assignment_id}/extensions",
    status_code=201,
    responses=problem_responses(403, 404, 409, 422, described=ARCHIVED),
)
def grant_extension(body: ExtensionIn, access: AssignmentStaffDep, session: SessionDep) -> ExtensionOut:
    """Give one learner new dates (and attempts) on this assignment, saying why (staff)."""
    learner = session.scalar(select(User).where(User.email == body.email.strip().lower()))
    if learner is None:
        raise NotFound(f"no user {body.email!r}")
    extension = coursework.grant_extension(
        session=session, assignment=access.assignment, learner=learner, due_at=body.due_at,
        late_until=body.late_until, extra_attempts=body.extra_attempts, reason=body.reason, actor=access.user,
        extra_minutes=body.extra_minutes, time_multiplier=body.time_multiplier,
    )  # fmt: skip
    session.commit()
    return ExtensionOut.of(extension, {access.user.id: access.user.email})


START_ERRORS = problem_responses(
    403, 404, 409, 422,
    described={
        **ARCHIVED,
        403: "Not a learner of the course, outside the window, a wrong access code, a network outside the list, or "
        "another exam running for this learner",
        404: "No such assignment for this user",
        422: "The assignment has no time limit",
    },
)  # fmt: skip


@router.post("/api/assignments/{assignment_id}/start", responses=START_ERRORS)
def start_timed(body: StartIn, access: AssignmentDep, session: SessionDep, request: Request) -> TimedAttemptOut:
    """Start my clock on this timed assessment (once: again returns the running clock)."""
    now = utcnow()
    attempt = coursework.start_timed(
        session=session, assignment=access.assignment, user=access.user, access_code=body.access_code,
        client_ip=client_ip(request), now=now,
    )  # fmt: skip
    session.commit()
    return TimedAttemptOut.of(attempt, now=now)


@router.get("/api/assignments/{assignment_id}/drafts", responses=problem_responses(403, 404))
def ended_drafts(access: AssignmentStaffDep, session: SessionDep) -> list[StaffDraftOut]:
    """Return the learners' drafts of this timed assessment once each one's time has ended (staff)."""
    found = drafts.ended_drafts(session=session, assignment=access.assignment, now=utcnow())
    emails = people.emails_of(session=session, ids={d.user_id for d, _ in found})
    slugs = {item.exercise_id: item.exercise.slug for item in access.assignment.items}
    return [
        StaffDraftOut(
            email=emails.get(d.user_id, ""),
            exercise=slugs.get(d.exercise_id, ""),
            code=d.code,
            answers=d.answers,
            updated_at=d.updated_at,
            ended_at=a.ends_at,
            submitted=(a.submitted or {}).get(slugs.get(d.exercise_id, "")),
        )
        for d, a in found
    ]


@router.post("/api/extensions/{extension_id}/revoke", responses=problem_responses(409, described=ARCHIVED))
def revoke_extension(extension: ExtensionDep, session: SessionDep, user: CurrentUser) -> ExtensionOut:
    """Revoke an extension (it stays in the audit list) (staff)."""
    coursework.revoke_extension(session=session, extension=extension, actor=user)
    session.commit()
    ids = {i for i in (extension.granted_by_id, extension.revoked_by_id) if i is not None}
    return ExtensionOut.of(extension, people.emails_of(session=session, ids=ids))


# --- the gradebook -------------------------------------------------------------------------------------------


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


@router.post(
    "/api/courses/{slug}/overrides", status_code=201, responses=problem_responses(404, 409, 422, described=ARCHIVED)
)
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


@router.post("/api/overrides/{override_id}/revert", responses=problem_responses(404, 409, described=ARCHIVED))
def revert_grade_override(override_id: RowId, session: SessionDep, user: CurrentUser) -> dict[str, bool]:
    """Revert a grade override (it stays in the audit list) (staff of its course)."""
    settle.revert_override(session=session, override_id=override_id, actor=user)
    session.commit()
    return {"reverted": True}
