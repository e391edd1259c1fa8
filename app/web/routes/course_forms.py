"""What the course pages share: dates in a form's time zone, the typed forms, the assignment loaded "here".

Contract:
- Date inputs: a form's dates are ``datetime-local`` values (a wall-clock time without an offset) read in the
  form's ``tz`` (an IANA zone; "UTC" always works, other zones need the system's time-zone data) and stored in
  UTC (``utc_from_local``). A wall-clock time that a daylight-saving change repeats is its first occurrence
  (fold 0); one that the change skips is read with the offset before it (02:30 on a spring-forward night is
  stored as 03:30 of the new offset). A fresh form comes with UTC values and zone; ``courses.js`` then selects
  the browser's zone (when offered) and rewrites the values into it, so what is shown is what is sent. A form
  shown again after a refusal keeps the zone and the values as typed.
- ``AssignmentForm``/``ExtensionForm`` turn posted fields into the API's bodies, so a form and the API refuse the
  same input with the same message.
- ``HereDep``/``HereStaffDep``: the assignment of the path, refused as "not found" when named under another
  course's slug (``AssignmentDep``/``AssignmentStaffDep`` of ``app.web.deps`` decide who may see it).
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends
from pydantic import ValidationError

from app.domain.models import Assignment, AssignmentItem, Course, Exercise
from app.domain.platform.clock import as_utc
from app.web.deps import (
    AssignmentAccess,
    AssignmentDep,
    AssignmentStaffDep,
)
from app.web.schemas.courses import AssignmentIn, ExtensionIn
from worker.core.errors import InvalidInput, NotFound

_ZONE_DATA = {z for z in zoneinfo.available_timezones() if not z.startswith(("posix/", "right/"))}
ZONES = ("UTC", *sorted(z for z in _ZONE_DATA if "/" in z and not z.startswith("Etc/")))  # what the select offers
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"  # a datetime-local input's value
LABELS = {
    "title": "the title", "opens_at": "the opening date", "due_at": "the due date", "late_until": "the late end",
    "late_credit_pct": "the late credit", "counts": "which attempt counts", "max_attempts": "the attempt limit",
    "rate_burst": "the submissions in a burst", "rate_refill_s": "the refill time", "email": "the learner",
    "extra_attempts": "the extra attempts", "reason": "the reason", "practice": "practice",
    "leaderboard": "the leaderboard", "time_limit_min": "the time limit", "access_code": "the access code",
    "allowed_networks": "the networks", "extra_minutes": "the extra minutes", "time_multiplier": "the time multiplier",
}  # fmt: skip


# --- dates in a time zone ------------------------------------------------------------------------------------


def _zone(name: str) -> tzinfo:
    if name == "UTC":
        return UTC  # without the system's zone data too
    if name not in _ZONE_DATA:
        raise InvalidInput(f"unknown time zone {name[:60]!r}")
    return zoneinfo.ZoneInfo(name)


def utc_from_local(value: str, zone: str, what: str) -> datetime | None:
    """Read a ``datetime-local`` value as a wall-clock time in ``zone``; return it in UTC (None: left empty)."""
    text = value.strip()
    if not text:
        return None
    try:
        local = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(f"{what} must be a date and time like 2026-12-08T17:00, not {text[:40]!r}") from exc
    try:
        return (local if local.tzinfo else local.replace(tzinfo=_zone(zone))).astimezone(UTC)
    except (OverflowError, ValueError) as exc:  # year 1 or 9999 pushed past the calendar by the offset
        raise InvalidInput(f"{what} is out of range") from exc


def local_value(value: datetime | None) -> str:
    """Return ``value`` as a ``datetime-local`` value in UTC ("" for none): what a fresh form starts with."""
    return as_utc(value).strftime(LOCAL_FORMAT) if value else ""


def _refused(exc: ValidationError) -> InvalidInput:
    """Say in a sentence what the first field error of ``exc`` is."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    if loc[:1] == ["items"] and len(loc) > 1 and loc[1].isdigit():
        where = f"exercise {int(loc[1]) + 1}"
    else:
        where = LABELS.get(loc[0], loc[0]) if loc else "the form"
    return InvalidInput(f"{where}: {error['msg'][:200]}")


def _optional(text: str) -> str | None:
    return text.strip() or None


# --- forms as typed ------------------------------------------------------------------------------------------


@dataclass
class AssignmentForm:
    """An assignment form as typed (strings, dates in ``tz``), kept to show it again after a refusal."""

    title: str = ""
    opens_at: str = ""
    due_at: str = ""
    late_until: str = ""
    tz: str = "UTC"
    late_credit_pct: str = "50"
    counts: str = "best"
    max_attempts: str = ""
    rate_burst: str = ""
    rate_refill_s: str = ""
    is_published: bool = True
    practice: str = "examples_only"
    leaderboard: bool = True
    items: str = ""  # one exercise a line: "slug [weight]"
    time_limit_min: str = ""  # empty: not timed
    submit_on_expiry: bool = True
    access_code: str = ""
    allowed_networks: str = ""
    exam_mode: bool = False
    feedback_after_close: bool = False

    @classmethod
    def of(cls, assignment: Assignment) -> AssignmentForm:
        def text(value: float | None) -> str:
            return "" if value is None else f"{value:g}"

        return cls(
            title=assignment.title, opens_at=local_value(assignment.opens_at), due_at=local_value(assignment.due_at),
            late_until=local_value(assignment.late_until), tz="UTC", late_credit_pct=text(assignment.late_credit_pct),
            counts=assignment.counts, max_attempts=text(assignment.max_attempts),
            rate_burst=text(assignment.rate_burst), rate_refill_s=text(assignment.rate_refill_s),
            is_published=assignment.is_published, practice=assignment.practice, leaderboard=assignment.leaderboard,
            items="\n".join(f"{item.exercise.slug} {item.weight:g}" for item in assignment.items),
            time_limit_min=text(assignment.time_limit_min), submit_on_expiry=assignment.submit_on_expiry,
            access_code=assignment.access_code, allowed_networks=assignment.allowed_networks,
            exam_mode=assignment.exam_mode, feedback_after_close=assignment.feedback_after_close,
        )  # fmt: skip

    def chosen(self) -> list[dict[str, str]]:
        """Return the exercise lines as ``{"exercise", "weight"}`` (the weight 1 when left out)."""
        found = []
        for number, line in enumerate(self.items.splitlines(), start=1):
            parts = [p for p in re.split(r"[\s,;]+", line.strip()) if p]
            if not parts:
                continue
            if len(parts) > 2:
                raise InvalidInput(f"exercise line {number}: write the exercise's slug, then its weight if not 1")
            found.append({"exercise": parts[0], "weight": parts[1] if len(parts) == 2 else "1"})
        return found

    def checked(self) -> AssignmentIn:
        """Return the form as the API's ``AssignmentIn`` (dates in UTC), or raise ``InvalidInput``."""
        when = {
            name: utc_from_local(getattr(self, name), self.tz, LABELS[name])
            for name in ("opens_at", "due_at", "late_until")
        }
        try:
            return AssignmentIn.model_validate(
                {
                    "title": self.title,
                    **when,
                    "counts": self.counts,
                    "max_attempts": _optional(self.max_attempts),
                    "rate_burst": _optional(self.rate_burst),
                    "rate_refill_s": _optional(self.rate_refill_s),
                    "is_published": self.is_published,
                    "practice": self.practice,
                    "leaderboard": self.leaderboard,
                    "items": self.chosen(),
                    "time_limit_min": _optional(self.time_limit_min),
                    "submit_on_expiry": self.submit_on_expiry,
                    "access_code": self.access_code,
                    "allowed_networks": self.allowed_networks,
                    "exam_mode": self.exam_mode,
                    "feedback_after_close": self.feedback_after_close,
                    **({"late_credit_pct": self.late_credit_pct.strip()} if self.late_credit_pct.strip() else {}),
                }
            )
        except ValidationError as exc:
            raise _refused(exc) from exc


@dataclass
class ExtensionForm:
    """An extension form as typed (dates in ``tz``)."""

    email: str = ""
    due_at: str = ""
    late_until: str = ""
    tz: str = "UTC"
    extra_attempts: str = "0"
    reason: str = ""
    no_late: bool = False
    extra_minutes: str = "0"  # timed assessments: accommodations
    time_multiplier: str = "1"
    keep_dates: bool = False  # only attempts or time: the assignment's dates stay

    def checked(self, late_span: timedelta | None = None) -> ExtensionIn:
        """Return the form as the API's ``ExtensionIn`` (dates in UTC), or raise ``InvalidInput``.

        ``late_span``: the assignment's late period; a late end left empty (and "no late period" unticked) ends
        that long after the new due date, so moving only the due date keeps the learner's late period.
        """
        due_at = None if self.keep_dates else utc_from_local(self.due_at, self.tz, LABELS["due_at"])
        if due_at is None and not self.keep_dates:
            raise InvalidInput("an extension needs its new due date (or tick: keep the assignment's dates)")
        late_until = None if due_at is None else utc_from_local(self.late_until, self.tz, LABELS["late_until"])
        if due_at is not None and late_until is None and late_span is not None and not self.no_late:
            late_until = due_at + late_span
        try:
            return ExtensionIn.model_validate(
                {
                    "email": self.email,
                    "due_at": due_at,
                    "late_until": late_until,
                    "extra_attempts": self.extra_attempts.strip() or "0",
                    "extra_minutes": self.extra_minutes.strip() or "0",
                    "time_multiplier": self.time_multiplier.strip() or "1",
                    "reason": self.reason,
                }
            )
        except ValidationError as exc:
            raise _refused(exc) from exc


# --- loading -------------------------------------------------------------------------------------------------


def _here(course_slug: str, access: AssignmentAccess) -> AssignmentAccess:
    if access.course.slug != course_slug:  # an assignment of another course: not here
        raise NotFound(f"no assignment {access.assignment.id} in {course_slug[:80]!r}")
    return access


def get_here(course_slug: str, access: AssignmentDep) -> AssignmentAccess:
    return _here(course_slug, access)


def get_staff_here(course_slug: str, access: AssignmentStaffDep) -> AssignmentAccess:
    return _here(course_slug, access)


HereDep = Annotated[AssignmentAccess, Depends(get_here)]
HereStaffDep = Annotated[AssignmentAccess, Depends(get_staff_here)]


def item_of(assignment: Assignment, exercise: Exercise) -> AssignmentItem:
    for item in assignment.items:
        if item.exercise_id == exercise.id:
            return item
    raise NotFound(f"exercise {exercise.slug!r} is not part of {assignment.title!r}")


def course_url(course: Course) -> str:
    return f"/courses/{quote(course.slug)}"


def assignment_url(assignment: Assignment) -> str:
    return f"/courses/{quote(assignment.course.slug)}/assignments/{assignment.id}"
