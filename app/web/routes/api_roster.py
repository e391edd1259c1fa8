"""``POST /api/courses/{slug}/roster/sync``: course staff sync the course's roster from the LMS (LTI NRPS).

Contract: a login is needed; an outsider gets 404, a learner 403 (``app.domain.lti.roster.sync_roster`` checks
staff). The course's LMS contexts are read over HTTP with ``get_roster_http``'s client (``ROSTER_HTTP_TIMEOUT_S``,
redirects not followed; tests override it), then the roster is enrolled and committed in one transaction; the
answer is the report (added, updated, unchanged, skipped, each member with its gpulab role and a note). A
platform that fails (no token, an error status, not a membership container) or a course with no roster service
answers 422 with the reason, and nothing is written.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from app.domain.lti import roster
from app.domain.models import CourseRole
from app.web.deps import CourseDep, RosterHttpDep, SessionDep
from app.web.errors import problem_responses

router = APIRouter(tags=["courses"])


class RosterEntryOut(BaseModel):
    sub: str
    name: str
    email: str | None
    role: CourseRole | None
    note: str


class RosterReportOut(BaseModel):
    contexts: int
    pages: int
    added: list[RosterEntryOut]
    updated: list[RosterEntryOut]
    unchanged: list[RosterEntryOut]
    skipped: list[RosterEntryOut]


def _entries(entries: list[roster.RosterEntry]) -> list[RosterEntryOut]:
    return [RosterEntryOut(sub=e.sub, name=e.name, email=e.email, role=e.role, note=e.note) for e in entries]


@router.post("/api/courses/{slug}/roster/sync", responses=problem_responses(403, 404, 422))
def sync_roster(access: CourseDep, session: SessionDep, http: RosterHttpDep) -> RosterReportOut:
    """Read the course's roster from its LMS (NRPS) and enroll it; say what happened to every member."""
    report = roster.sync_roster(session=session, course=access.course, actor=access.user, http=http)
    session.commit()
    return RosterReportOut(
        contexts=report.contexts, pages=report.pages, added=_entries(report.added), updated=_entries(report.updated),
        unchanged=_entries(report.unchanged), skipped=_entries(report.skipped),
    )  # fmt: skip
