"""The audit trail as pages: ``/courses/{slug}/audit`` for a course's staff, ``/admin/audit`` for admins.

Contract: the same entries, filters (``trail.filters_for``) and rules as ``app.web.routes.api_lifecycle``: a
course's instructors and TAs read their course's (``CourseStaffDep``: a learner gets the 403 page, an outsider
the 404 page), admins everything (``AdminDep``). Filters come as a GET form (action, actor and subject
e-mail, since and until as dates in the viewer's zone); the CSV link repeats them. A filter that cannot be read
shows the page again (422) with the reason and no rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.domain.audit import trail
from app.web.deps import AdminDep, CourseStaffDep, SessionDep
from app.web.pages import FORM_CSRF, render
from app.web.routes.course_forms import ZONES, utc_from_local
from worker.core.errors import GpulabError

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])
Text = Annotated[str, Query(max_length=320)]
ACTIONS = sorted({a.value.split(".")[0] for a in trail.Action} | {a.value for a in trail.Action})


def _page(
    request: Request, session: SessionDep, *, course_id: int | None, site_wide: bool, csv_path: str, heading: str,
    action: str, actor: str, subject: str, since: str, until: str, tz: str, course: str = "",
) -> Response:  # fmt: skip
    typed = {"action": action, "actor": actor, "subject": subject, "since": since, "until": until, "tz": tz,
             "course": course}  # fmt: skip
    rows: list[trail.Row] = []
    error, status_code = "", 200
    try:
        start = utc_from_local(since, tz, "since") if since else None
        end = utc_from_local(until, tz, "until") if until else None
        found = trail.filters_for(session=session, course_id=course_id, site_wide=site_wide, action=action, actor=actor,
                           subject=subject, since=start, until=end)  # fmt: skip
        rows = trail.entries(session=session, filters=found)
        query = {"action": action, "actor": actor, "subject": subject, "course": course,
                 "since": _iso(start), "until": _iso(end)}  # fmt: skip
        csv_url = f"{csv_path}?{urlencode({k: v for k, v in query.items() if v})}"
    except GpulabError as exc:
        error, status_code, csv_url = exc.message, 422, csv_path
    return render(
        request, "audit.html", status_code=status_code, rows=rows, typed=typed, error=error, csv_url=csv_url,
        heading=heading, actions=ACTIONS, zones=ZONES, site_wide=site_wide,
    )  # fmt: skip


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.isoformat()


@router.get("/courses/{slug}/audit")
def course_audit_page(
    request: Request, access: CourseStaffDep, session: SessionDep, action: Text = "", actor: Text = "",
    subject: Text = "", since: Text = "", until: Text = "", tz: Text = "UTC",
) -> Response:  # fmt: skip
    course = access.course
    return _page(
        request, session, course_id=course.id, site_wide=False, csv_path=f"/api/courses/{course.slug}/audit.csv",
        heading=f"Audit trail of {course.title}", action=action, actor=actor, subject=subject, since=since,
        until=until, tz=tz,
    )  # fmt: skip


@router.get("/admin/audit")
def site_audit_page(
    request: Request, _admin: AdminDep, session: SessionDep, course: Text = "", action: Text = "", actor: Text = "",
    subject: Text = "", since: Text = "", until: Text = "", tz: Text = "UTC",
) -> Response:  # fmt: skip
    return _page(
        request, session, course_id=trail.course_id_of(session=session, slug=course.strip()), site_wide=True,
        csv_path="/api/admin/audit.csv", heading="Audit trail", action=action, actor=actor, subject=subject,
        since=since, until=until, tz=tz, course=course,
    )  # fmt: skip
