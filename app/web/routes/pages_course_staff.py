"""Course pages for its staff: members and CSV enrollment, the invite link, the roster sync from the LMS,
assignments and their extensions.

Contract:
- Staff pages are for the course's instructors and TAs (admins count as instructors): ``CourseStaffDep`` and
  ``AssignmentStaffDep`` of ``app.web.deps`` decide (404 for anyone else). Creating and editing assignments and
  the invite link are the instructors' (the domain's ``Forbidden`` for a TA), extensions any staff's.
- Every POST is a form with the session's CSRF token (``FORM_CSRF``). Success flashes and redirects
  (POST-redirect-GET); refused input shows the same form again (422) with the message and the input kept, and
  writes nothing. CSV enrollment answers with its per-row report on the page (one-time passwords are shown
  once, never kept in a cookie or a URL); so does the roster sync (``app.domain.lti.roster``: shown when the
  course has an LMS context offering its roster; a platform that fails is the manage page again, 422, with the
  reason, and nothing enrolled). Routes commit; nothing here grades.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.accounts import people
from app.domain.courses import coursework, lifecycle, membership
from app.domain.exercises.bank import list_published
from app.domain.lti import roster
from app.domain.models import Assignment, Course, CourseRole, User
from app.domain.platform.clock import as_utc
from app.web.deps import (
    AssignmentAccess,
    CourseAccess,
    CourseInstructorDep,
    CourseStaffDep,
    CurrentUser,
    ExtensionDep,
    RosterHttpDep,
    SessionDep,
)
from app.web.pages import FORM_CSRF, flash, redirect, render
from app.web.routes.course_forms import (
    ZONES,
    AssignmentForm,
    ExtensionForm,
    HereStaffDep,
    assignment_url,
    course_url,
    local_value,
    utc_from_local,
)
from app.web.schemas.courses import ExtensionOut, assignment_out
from worker.core.errors import GpulabError, InvalidInput, NotFound

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])

# --- staff: members, CSV enrollment, the invite link ---------------------------------------------------------


@dataclass
class ManageExtras:
    """What the manage page shows besides the course: a CSV report, or a refused CSV with its message."""

    report: list[membership.EnrollRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    csv_text: str = ""
    csv_error: str = ""
    lms_report: roster.RosterReport | None = None
    lms_error: str = ""


@dataclass
class CopyForm:
    """The next-term form as typed (its first due date in ``tz``)."""

    title: str = ""
    slug: str = ""
    term: str = ""
    move: str = "days"  # days or first_due
    shift_days: str = ""
    first_due: str = ""
    tz: str = "UTC"
    with_staff: bool = False


def _manage_page(
    request: Request, access: CourseAccess, session: Session, extras: ManageExtras | None = None,
    status_code: int = 200, copy: CopyForm | None = None, copy_error: str = "",
) -> Response:  # fmt: skip
    course = access.course
    invite = ""
    if course.invite_token and not course.is_practice:
        invite = f"{str(request.base_url).rstrip('/')}/join/{course.invite_token}"
    listed = membership.visible_assignments(session=session, course=course, user=access.user)
    return render(
        request, "courses/manage.html", status_code=status_code, course=course, role=access.role,
        can_edit=membership.can_edit(access.role), members=membership.members(session=session, course=course),
        invite=invite, assignments=listed, extras=extras or ManageExtras(),
        lms_contexts=len(roster.roster_contexts(session=session, course=course)),
        copy=copy or CopyForm(title=course.title, term=""), copy_error=copy_error, zones=ZONES,
    )  # fmt: skip


@router.get("/courses/{slug}/manage")
def manage_page(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    return _manage_page(request, access, session)


@router.post("/courses/{slug}/copy")
def copy_course(
    request: Request,
    access: CourseStaffDep,
    session: SessionDep,
    title: Annotated[str, Form(max_length=1000)] = "",
    new_slug: Annotated[str, Form(max_length=200)] = "",
    term: Annotated[str, Form(max_length=200)] = "",
    move: Annotated[str, Form(max_length=16)] = "days",
    shift_days: Annotated[str, Form(max_length=20)] = "",
    first_due: Annotated[str, Form(max_length=40)] = "",
    tz: Annotated[str, Form(max_length=64)] = "UTC",
    with_staff: Annotated[bool, Form()] = False,
) -> Response:
    """Start next term's course from this one (its instructors); land on the copy's manage page."""
    typed = CopyForm(title=title, slug=new_slug, term=term, move=move, shift_days=shift_days, first_due=first_due,
                     tz=tz, with_staff=with_staff)  # fmt: skip
    try:
        shift, due = None, None
        if move == "first_due":
            due = utc_from_local(first_due, tz, "the new first due date")
            if due is None:
                raise InvalidInput("give the new first due date, or choose a number of days")
        else:
            try:
                shift = timedelta(days=float(shift_days))
            except ValueError:
                raise InvalidInput("give the number of days to move every date by (e.g. 182)") from None
        made = lifecycle.copy_course(
            session=session, source=access.course, slug=new_slug.strip(), title=title, term=term, actor=access.user,
            shift=shift, first_due=due, with_staff=with_staff,
        )  # fmt: skip
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _manage_page(request, access, session, status_code=422, copy=typed, copy_error=exc.message)
    flash(request, f"{made.title!r} is ready with {len(made.assignments)} unpublished assignments: check the dates, "
          "then publish them.")  # fmt: skip
    return redirect(f"{course_url(made)}/manage#assignments")


@router.post("/courses/{slug}/archive")
def archive_course(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    """Archive the course (its instructors, admins)."""
    try:
        lifecycle.archive(session=session, course=access.course, actor=access.user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
        return redirect(f"{course_url(access.course)}/manage#archive")
    flash(request, f"{access.course.title!r} is archived: read-only from now on.")
    return redirect(course_url(access.course))


@router.post("/courses/{slug}/unarchive")
def unarchive_course(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    """Open an archived course again (admins)."""
    try:
        lifecycle.unarchive(session=session, course=access.course, actor=access.user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
        return redirect(f"{course_url(access.course)}/manage#archive")
    flash(request, f"{access.course.title!r} is open again.")
    return redirect(f"{course_url(access.course)}/manage")


@router.get("/courses/{slug}/members")
def members_page(access: CourseStaffDep) -> Response:
    """Send a reload or a bookmark of the enrollment form's address to the manage page (POST-redirect-GET)."""
    return redirect(f"{course_url(access.course)}/manage#members")


@router.post("/courses/{slug}/members")
def enroll_form(
    request: Request,
    access: CourseStaffDep,
    session: SessionDep,
    csv: Annotated[str, Form()] = "",
    file: Annotated[UploadFile | None, File()] = None,
) -> Response:
    """Enroll the rows of a pasted or uploaded CSV; the page shows what happened to each row."""
    try:
        data: str | bytes = csv
        if file is not None and file.filename:
            data = file.file.read(people.MAX_IMPORT_BYTES + 1)  # decode_csv refuses anything larger
        if not (data.strip() if isinstance(data, str) else data):
            raise InvalidInput("paste the CSV or choose a file")
        report = membership.enroll_csv(session=session, course=access.course, text=data, actor=access.user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _manage_page(request, access, session, ManageExtras(csv_text=csv, csv_error=exc.message), 422)
    counts = {outcome.value: report.count(outcome) for outcome in membership.Outcome if report.count(outcome)}
    return _manage_page(request, access, session, ManageExtras(report=report.rows, counts=counts))


@router.post("/courses/{slug}/roster/sync")
def roster_sync_form(request: Request, access: CourseStaffDep, session: SessionDep, http: RosterHttpDep) -> Response:
    """Read the roster from the course's LMS (NRPS) and enroll it; the page shows what happened to each member."""
    try:
        report = roster.sync_roster(session=session, course=access.course, actor=access.user, http=http)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _manage_page(request, access, session, ManageExtras(lms_error=exc.message), 422)
    return _manage_page(request, access, session, ManageExtras(lms_report=report))


@router.post("/courses/{slug}/invite")
def invite_form(
    request: Request, access: CourseInstructorDep, session: SessionDep, rotate: Annotated[str, Form()] = ""
) -> Response:
    """Make the course's invite link, or replace it (``rotate``), which ends the old one (instructors)."""
    membership.invite_token_for(session=session, course=access.course, rotate=bool(rotate))
    session.commit()
    flash(request, "A new invite link: the old one no longer works." if rotate else "The invite link is ready.")
    return redirect(f"{course_url(access.course)}/manage#invite")


# --- staff: assignments --------------------------------------------------------------------------------------


def _assignment_form_page(
    request: Request, session: Session, course: Course, form: AssignmentForm, *, assignment: Assignment | None = None,
    fresh: bool = True, error: str = "", status_code: int = 200,
) -> Response:  # fmt: skip
    return render(
        request, "courses/assignment_form.html", status_code=status_code, course=course, form=form,
        assignment=assignment, fresh=fresh, error=error, zones=ZONES,
        exercises=[(e.slug, e.current_version.title if e.current_version else e.slug)
                   for e in list_published(session=session)],
    )  # fmt: skip


def _require_editor(session: Session, access: CourseAccess | AssignmentAccess) -> None:
    membership.require_course_role(
        session=session, course=access.course, user=access.user, roles=(CourseRole.instructor,)
    )


TextField = Annotated[str, Form(max_length=10_000)]


def posted_assignment(
    title: TextField = "", opens_at: TextField = "", due_at: TextField = "", late_until: TextField = "",
    tz: TextField = "UTC", late_credit_pct: TextField = "", counts: TextField = "best", max_attempts: TextField = "",
    rate_burst: TextField = "", rate_refill_s: TextField = "", is_published: TextField = "",
    practice: TextField = "examples_only", leaderboard: TextField = "",
    items: Annotated[str, Form(max_length=100_000)] = "",
    time_limit_min: TextField = "", submit_on_expiry: TextField = "", access_code: TextField = "",
    allowed_networks: TextField = "", exam_mode: TextField = "", feedback_after_close: TextField = "",
) -> AssignmentForm:  # fmt: skip
    """Return the posted assignment form as typed (an unticked box, "published" or "leaderboard", is not posted)."""
    return AssignmentForm(
        title=title, opens_at=opens_at, due_at=due_at, late_until=late_until, tz=tz, late_credit_pct=late_credit_pct,
        counts=counts, max_attempts=max_attempts, rate_burst=rate_burst, rate_refill_s=rate_refill_s,
        is_published=bool(is_published), practice=practice, leaderboard=bool(leaderboard), items=items,
        time_limit_min=time_limit_min, submit_on_expiry=bool(submit_on_expiry), access_code=access_code,
        allowed_networks=allowed_networks, exam_mode=bool(exam_mode), feedback_after_close=bool(feedback_after_close),
    )  # fmt: skip


PostedAssignment = Annotated[AssignmentForm, Depends(posted_assignment)]


@router.get("/courses/{slug}/assignments/new")
def new_assignment_page(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    _require_editor(session, access)
    return _assignment_form_page(request, session, access.course, AssignmentForm())


@router.post("/courses/{slug}/assignments")
def create_assignment(
    request: Request, access: CourseStaffDep, session: SessionDep, form: PostedAssignment
) -> Response:
    try:
        body = form.checked()
        assignment = coursework.create_assignment(
            session=session, course=access.course, fields=body.fields(), items=body.chosen(), actor=access.user
        )
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _assignment_form_page(request, session, access.course, form, fresh=False, error=exc.message,
                                     status_code=422)  # fmt: skip
    flash(request, f"Assignment {assignment.title!r} created.")
    return redirect(f"{course_url(access.course)}/manage#assignments")


@router.get("/courses/{course_slug}/assignments/{assignment_id}/edit")
def edit_assignment_page(request: Request, here: HereStaffDep, session: SessionDep) -> Response:
    _require_editor(session, here)
    form = AssignmentForm.of(here.assignment)
    return _assignment_form_page(request, session, here.course, form, assignment=here.assignment)


@router.post("/courses/{course_slug}/assignments/{assignment_id}/edit")
def update_assignment(request: Request, here: HereStaffDep, session: SessionDep, form: PostedAssignment) -> Response:
    try:
        body = form.checked()
        coursework.update_assignment(
            session=session, assignment=here.assignment, fields=body.fields(), items=body.chosen(), actor=here.user
        )
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _assignment_form_page(request, session, here.course, form, assignment=here.assignment, fresh=False,
                                     error=exc.message, status_code=422)  # fmt: skip
    flash(request, f"Assignment {here.assignment.title!r} saved.")
    return redirect(f"{course_url(here.course)}/manage#assignments")


# --- staff: extensions ---------------------------------------------------------------------------------------


def _extensions_page(
    request: Request, session: Session, here: AssignmentAccess, form: ExtensionForm, *, fresh: bool = True,
    error: str = "", status_code: int = 200,
) -> Response:  # fmt: skip
    found = coursework.extensions_of(session=session, assignment=here.assignment)
    emails = people.emails_of(
        session=session, ids={i for e in found for i in (e.granted_by_id, e.revoked_by_id) if i is not None}
    )
    learners = membership.members(session=session, course=here.course, role=CourseRole.learner)
    return render(
        request, "courses/extensions.html", status_code=status_code, course=here.course,
        assignment=assignment_out(session=session, assignment=here.assignment, user=here.user, staff=True),
        audit=[ExtensionOut.of(e, emails) for e in found], learners=learners, form=form, fresh=fresh, error=error,
        zones=ZONES, base_url=assignment_url(here.assignment), late_span=_late_span(here.assignment),
    )  # fmt: skip


def _late_span(assignment: Assignment) -> timedelta | None:
    """Return how long the assignment's late period lasts (None: it has none)."""
    if assignment.due_at is None or assignment.late_until is None:
        return None
    return as_utc(assignment.late_until) - as_utc(assignment.due_at)


@router.get("/courses/{course_slug}/assignments/{assignment_id}/extensions")
def extensions_page(request: Request, here: HereStaffDep, session: SessionDep) -> Response:
    form = ExtensionForm(due_at=local_value(here.assignment.due_at))  # the late end follows the due date (checked)
    return _extensions_page(request, session, here, form)


@router.post("/courses/{course_slug}/assignments/{assignment_id}/extensions")
def grant_form(
    request: Request,
    here: HereStaffDep,
    session: SessionDep,
    email: TextField = "",
    due_at: TextField = "",
    late_until: TextField = "",
    tz: TextField = "UTC",
    extra_attempts: TextField = "0",
    reason: TextField = "",
    no_late: TextField = "",
    extra_minutes: TextField = "0",
    time_multiplier: TextField = "1",
    keep_dates: TextField = "",
) -> Response:
    form = ExtensionForm(
        email=email, due_at=due_at, late_until=late_until, tz=tz, extra_attempts=extra_attempts, reason=reason,
        no_late=bool(no_late), extra_minutes=extra_minutes, time_multiplier=time_multiplier,
        keep_dates=bool(keep_dates),
    )  # fmt: skip
    try:
        body = form.checked(_late_span(here.assignment))
        learner = session.scalar(select(User).where(User.email == body.email.strip().lower()))
        if learner is None:
            raise InvalidInput(f"no user {body.email!r}")
        coursework.grant_extension(
            session=session, assignment=here.assignment, learner=learner, due_at=body.due_at,
            late_until=body.late_until, extra_attempts=body.extra_attempts, reason=body.reason, actor=here.user,
            extra_minutes=body.extra_minutes, time_multiplier=body.time_multiplier,
        )  # fmt: skip
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _extensions_page(request, session, here, form, fresh=False, error=exc.message, status_code=422)
    flash(request, f"Extension granted to {learner.email}.")
    return redirect(f"{assignment_url(here.assignment)}/extensions")


@router.post("/courses/{course_slug}/assignments/{assignment_id}/extensions/{extension_id}/revoke")
def revoke_form(
    request: Request, here: HereStaffDep, extension: ExtensionDep, user: CurrentUser, session: SessionDep
) -> Response:
    if extension.assignment_id != here.assignment.id:
        raise NotFound(f"no extension {extension.id} on this assignment")
    was_revoked = extension.revoked_at is not None
    coursework.revoke_extension(session=session, extension=extension, actor=user)
    session.commit()
    flash(request, "It was already revoked." if was_revoked else f"Extension of {extension.user.email} revoked.")
    return redirect(f"{assignment_url(here.assignment)}/extensions")
