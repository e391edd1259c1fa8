"""A course across terms and a person's data: copy, archive, the audit trail, data export and erasure (issue 35).

Contract:
- ``POST /api/courses/{slug}/copy``: the course's instructors (and admins) start next term's course from it
  (``app.domain.courses.lifecycle.copy_course``); 201 with the new course. ``POST /api/courses/{slug}/archive``
  (its instructors, admins) makes it read-only; ``DELETE`` on the same path unarchives it (admins only).
- ``GET /api/courses/{slug}/audit`` (the course's instructors and TAs) and ``GET /api/admin/audit`` (admins: every
  course and the site's own entries, ``course`` narrows) list audit entries newest first, filtered by ``action``
  (a full name or its first part: ``grade``), ``actor`` and ``subject`` (e-mail addresses), ``since`` and
  ``until``; ``.csv`` on either path answers the same rows as CSV.
- ``GET /api/me/export``: my data as a zip (``app.domain.privacy.export``). ``POST /api/admin/users/{id}/erase``
  (admins): erase a person (``app.domain.privacy.erasure``), the address repeated as a safeguard.
Routes commit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import AwareDatetime

from app.domain.audit import trail
from app.domain.courses import lifecycle
from app.domain.models import CourseRole
from app.domain.privacy import erasure, export
from app.web.deps import (
    AdminDep,
    CourseDep,
    CourseInstructorDep,
    CourseStaffDep,
    CurrentUser,
    SessionDep,
    SettingsDep,
    UserDep,
)
from app.web.errors import problem_responses
from app.web.schemas.courses import CourseCopyIn, CourseOut
from app.web.schemas.lifecycle import AuditEntryOut, EraseIn
from worker.core.errors import InvalidInput

router = APIRouter(tags=["courses"])
admin_router = APIRouter(prefix="/api/admin", tags=["admin"])
CSV_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}, "description": "the entries as CSV"}
}
ZIP_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
        "description": "a zip of JSON files and code",
    }
}

# --- next term, archive ------------------------------------------------------------------------------------------


@router.post("/api/courses/{slug}/copy", status_code=201, responses=problem_responses(403, 409, 422))
def copy_course(body: CourseCopyIn, access: CourseInstructorDep, session: SessionDep) -> CourseOut:
    """Start next term's course from this one: its assignments as drafts, every date shifted (instructors)."""
    made = lifecycle.copy_course(
        session=session, source=access.course, slug=body.slug, title=body.title, term=body.term, actor=access.user,
        shift=None if body.shift_days is None else timedelta(days=body.shift_days), first_due=body.first_due,
        with_staff=body.with_staff,
    )  # fmt: skip
    session.commit()
    return CourseOut.of(made, CourseRole.instructor)


@router.post("/api/courses/{slug}/archive", responses=problem_responses(403, 422))
def archive_course(access: CourseInstructorDep, session: SessionDep) -> CourseOut:
    """Archive the course: read-only for everyone from now on; its learners still read their grades."""
    lifecycle.archive(session=session, course=access.course, actor=access.user)
    session.commit()
    return CourseOut.of(access.course, access.role)


@router.delete("/api/courses/{slug}/archive", responses=problem_responses(403))
def unarchive_course(access: CourseDep, session: SessionDep) -> CourseOut:
    """Open an archived course again (admins)."""
    lifecycle.unarchive(session=session, course=access.course, actor=access.user)
    session.commit()
    return CourseOut.of(access.course, access.role)


# --- the audit trail ---------------------------------------------------------------------------------------------

Email = Annotated[str, Query(max_length=320, description="a person's e-mail address")]
Since = Annotated[AwareDatetime | None, Query(description="from this time on (ISO 8601 with its offset)")]


def _csv(rows: list[trail.Row], name: str) -> PlainTextResponse:
    return PlainTextResponse(
        trail.entries_csv(rows),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


Action = Annotated[str, Query(max_length=64, description="an action (grade.override) or its first part (grade)")]


@router.get("/api/courses/{slug}/audit", responses=problem_responses(403, 422))
def course_audit(
    access: CourseStaffDep, session: SessionDep, action: Action = "", actor: Email = "", subject: Email = "",
    since: Since = None, until: Since = None,
) -> list[AuditEntryOut]:  # fmt: skip
    """List the course's audit entries, newest first (its instructors and TAs)."""
    found = trail.filters_for(session=session, course_id=access.course.id, site_wide=False, action=action, actor=actor,
                     subject=subject, since=since, until=until)  # fmt: skip
    return [AuditEntryOut.of(r) for r in trail.entries(session=session, filters=found)]


@router.get("/api/courses/{slug}/audit.csv", response_class=PlainTextResponse, responses=CSV_RESPONSE)
def course_audit_csv(
    access: CourseStaffDep, session: SessionDep, action: Action = "", actor: Email = "", subject: Email = "",
    since: Since = None, until: Since = None,
) -> PlainTextResponse:  # fmt: skip
    """Return the course's audit entries as CSV (its instructors and TAs)."""
    found = trail.filters_for(session=session, course_id=access.course.id, site_wide=False, action=action, actor=actor,
                     subject=subject, since=since, until=until)  # fmt: skip
    return _csv(trail.entries(session=session, filters=found), f"{access.course.slug}-audit.csv")


CourseSlug = Annotated[str, Query(max_length=64, description="one course's entries (its slug)")]


@admin_router.get("/audit", responses=problem_responses(401, 403, 422))
def site_audit(
    _admin: AdminDep, session: SessionDep, course: CourseSlug = "", action: Action = "", actor: Email = "",
    subject: Email = "", since: Since = None, until: Since = None,
) -> list[AuditEntryOut]:  # fmt: skip
    """List every audit entry, newest first (admins)."""
    course_id = trail.course_id_of(session=session, slug=course)
    found = trail.filters_for(session=session, course_id=course_id, site_wide=True, action=action, actor=actor,
                     subject=subject, since=since, until=until)  # fmt: skip
    return [AuditEntryOut.of(r) for r in trail.entries(session=session, filters=found)]


@admin_router.get("/audit.csv", response_class=PlainTextResponse, responses=CSV_RESPONSE | problem_responses(401, 403))
def site_audit_csv(
    _admin: AdminDep, session: SessionDep, course: CourseSlug = "", action: Action = "", actor: Email = "",
    subject: Email = "", since: Since = None, until: Since = None,
) -> PlainTextResponse:  # fmt: skip
    """Return every audit entry as CSV (admins)."""
    course_id = trail.course_id_of(session=session, slug=course)
    found = trail.filters_for(session=session, course_id=course_id, site_wide=True, action=action, actor=actor,
                     subject=subject, since=since, until=until)  # fmt: skip
    return _csv(trail.entries(session=session, filters=found), "gpulab-audit.csv")


# --- data requests -----------------------------------------------------------------------------------------------


@router.get("/api/me/export", response_class=Response, responses=ZIP_RESPONSE, tags=["auth"])
def my_data(session: SessionDep, user: CurrentUser) -> Response:
    """Download everything gpulab holds about me: a zip of JSON files and my code."""
    data = export.export_zip(session=session, user=user)
    name = f"gpulab-my-data-{user.id}.zip"
    return Response(
        data, media_type="application/zip", headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )


@admin_router.post("/users/{user_id}/erase", status_code=204, response_class=Response,
                   responses=problem_responses(401, 403, 404, 409, 422))  # fmt: skip
def erase_user(body: EraseIn, target: UserDep, admin: AdminDep, session: SessionDep, settings: SettingsDep) -> Response:
    """Erase a person's personal data; their grades stay as numbers, shown as "erased user" (admins)."""
    if body.confirm_email.strip().lower() != target.email.lower():
        raise InvalidInput("type the person's e-mail address to confirm: it does not match")
    erasure.erase(session=session, person=target, actor=admin, code_policy=body.code or settings.erasure_code)
    session.commit()
    return Response(status_code=204)
