"""Record changes as audit entries and read them back, filtered, as rows or CSV.

Contract: ``record`` adds one ``AuditEntry`` (no flush, no commit: it lands with the change it describes).
``before`` and ``after`` are small JSON objects of the changed fields, never a person's name, e-mail or code:
people are ids (``actor_id``, ``subject_id``), resolved to names only when read, so an erasure leaves entries
that say "erased user". ``course_id`` None marks a site-level entry (tokens, LMS platforms, erasures), which
only admins read.
"""

from __future__ import annotations

import csv
import enum
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.domain.models import AuditEntry, Course, User
from app.domain.platform.clock import as_utc
from app.domain.platform.csvsafe import csv_cell
from worker.core.errors import InvalidInput

ERASED = "erased user"
MAX_ROWS = 5000  # one page or CSV: a course's whole term fits; filters narrow the rest
MAX_VALUE_CHARS = 500  # a value longer than this (a long reason) is cut in the entry, not lost from its own row


class Action(enum.StrEnum):
    """What an entry records; the value is what pages, filters and the CSV show."""

    override_set = "grade.override"
    override_revert = "grade.revert"
    manual_grade_save = "grade.manual"
    manual_grade_release = "grade.release"
    regrade_decision = "regrade_request.decision"
    extension_grant = "extension.grant"
    extension_revoke = "extension.revoke"
    enrol = "member.enrol"
    unenrol = "member.remove"
    role_change = "member.role"
    publish = "assignment.publish"
    unpublish = "assignment.unpublish"
    course_archive = "course.archive"
    course_unarchive = "course.unarchive"
    course_copy = "course.copy"
    person_erase = "person.erase"
    token_create = "token.create"  # noqa: S105 (an action's name, not a secret)
    token_revoke = "token.revoke"  # noqa: S105
    lti_admin = "lti.admin"


def _small(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, datetime):
            value = as_utc(value).isoformat()
        elif isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            value = value[:MAX_VALUE_CHARS] + "…"
        out[key] = value
    return out


def record(
    *,
    session: Session,
    action: Action,
    actor: User | None,
    target: str,
    course_id: int | None = None,
    subject_id: int | None = None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Add an entry saying ``actor`` did ``action`` to ``target`` (``subject_id``: the person it concerns)."""
    entry = AuditEntry(
        actor_id=actor.id if actor is not None else None, course_id=course_id, action=action.value,
        subject_id=subject_id, target=target[:300], before=_small(before), after=_small(after),
    )  # fmt: skip
    session.add(entry)
    return entry


@dataclass(frozen=True)
class Filters:
    """Which entries to show: every field narrows; None (or empty) does not."""

    course_id: int | None = None  # None with ``site_wide``: every course and the site's own entries
    site_wide: bool = False  # an admin reading everything; else ``course_id`` must be set
    action: str = ""  # an Action value, or its first part ("grade" matches every grade.* action)
    actor_id: int | None = None
    subject_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None


def _person_id(session: Session, email: str) -> int | None:
    if not email.strip():
        return None
    found = session.scalar(select(User.id).where(func.lower(User.email) == email.strip().lower()))
    return found if found is not None else -1  # nobody has it: an id no row has, so nothing matches


def filters_for(
    *, session: Session, course_id: int | None, site_wide: bool, action: str, actor: str, subject: str,
    since: datetime | None, until: datetime | None,
) -> Filters:  # fmt: skip
    """Return the filters a reader typed (people by e-mail address), or raise ``InvalidInput``."""
    if since is not None and until is not None and until <= since:
        raise InvalidInput("'until' must come after 'since'")
    return Filters(
        course_id=course_id, site_wide=site_wide, action=action.strip(), actor_id=_person_id(session, actor),
        subject_id=_person_id(session, subject), since=since, until=until,
    )  # fmt: skip


def course_id_of(*, session: Session, slug: str) -> int | None:
    """Return the id of the course ``slug`` names (None for no slug, an id no row has for an unknown one)."""
    if not slug:
        return None
    found = session.scalar(select(Course.id).where(Course.slug == slug))
    return found if found is not None else -1


@dataclass(frozen=True)
class Row:
    """One entry as people read it."""

    id: int
    at: datetime
    actor: str
    course: str
    action: str
    subject: str
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def _query(filters: Filters) -> Select[AuditEntry]:
    stmt = select(AuditEntry)
    if not filters.site_wide or filters.course_id is not None:
        stmt = stmt.where(AuditEntry.course_id == filters.course_id)
    if filters.action:
        if "." in filters.action:
            stmt = stmt.where(AuditEntry.action == filters.action)
        else:
            stmt = stmt.where(AuditEntry.action.startswith(filters.action + ".", autoescape=True))
    if filters.actor_id is not None:
        stmt = stmt.where(AuditEntry.actor_id == filters.actor_id)
    if filters.subject_id is not None:
        stmt = stmt.where(AuditEntry.subject_id == filters.subject_id)
    if filters.since is not None:
        stmt = stmt.where(AuditEntry.at >= filters.since)
    if filters.until is not None:
        stmt = stmt.where(AuditEntry.at < filters.until)
    return stmt.order_by(AuditEntry.at.desc(), AuditEntry.id.desc())


def _person(names: Mapping[int, str], user_id: int | None) -> str:
    if user_id is None:
        return "gpulab"  # the platform itself: an LMS launch, the sweeper, a CLI run without an account
    return names.get(user_id, ERASED)


def entries(*, session: Session, filters: Filters, limit: int = MAX_ROWS) -> list[Row]:
    """Return the entries ``filters`` selects, newest first, with people and courses named."""
    if not filters.site_wide and filters.course_id is None:
        raise ValueError("a course's entries need its id; all of them need site_wide")
    found = list(session.scalars(_query(filters).limit(max(1, min(limit, MAX_ROWS)))))
    people = {e.actor_id for e in found} | {e.subject_id for e in found}
    people.discard(None)
    names = {u.id: u.name or u.email for u in session.scalars(select(User).where(User.id.in_(people)))}
    course_ids = {e.course_id for e in found if e.course_id is not None}
    courses = {c.id: c.slug for c in session.scalars(select(Course).where(Course.id.in_(course_ids)))}
    rows = []
    for e in found:
        subject = "" if e.subject_id is None else _person(names, e.subject_id)
        course = "" if e.course_id is None else courses.get(e.course_id, f"course {e.course_id} (deleted)")
        rows.append(
            Row(
                id=e.id,
                at=as_utc(e.at),
                actor=_person(names, e.actor_id),
                course=course,
                action=e.action,
                subject=subject,
                target=e.target,
                before=e.before,
                after=e.after,
            )
        )
    return rows


def _json(value: dict[str, Any] | None) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def entries_csv(rows: Sequence[Row]) -> str:
    """Return ``rows`` as CSV (UTC ISO times; before and after as JSON), formula-safe."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "at_utc", "actor", "course", "action", "subject", "target", "before", "after"])
    for r in rows:
        writer.writerow(
            [r.id, r.at.isoformat()]
            + [csv_cell(v) for v in (r.actor, r.course, r.action, r.subject, r.target, _json(r.before), _json(r.after))]
        )
    return out.getvalue()
