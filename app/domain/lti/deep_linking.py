"""LTI Deep Linking 2.0: an instructor launching from the platform picks what gpulab links to place there.

Contract:
- ``settings_of(launch)`` reads a verified ``LtiDeepLinkingRequest``'s
  ``https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings`` claim, or raises ``InvalidInput``: no
  such claim, no http(s) ``deep_link_return_url``, ``accept_types`` without ``ltiResourceLink`` (all gpulab
  makes), ``data`` not a string or too long to keep. ``accept_multiple`` is true unless the platform says false.
- ``begin(session=..., launch=...)`` checks the request (``settings_of``, then ``Forbidden`` unless the roles
  claim gives the instructor role in the course, ``vocabulary.course_role``), then provisions the account, the
  course and the membership as a resource link launch does (``provisioning``) and returns a ``Picking``: the
  user and the ``Pending`` settings to keep until the instructor submits. The caller commits, signs the user in
  and keeps ``Pending.as_session()`` in the (signed) session it just started, so the pending settings are bound
  to that user and die with the session, or after ``PENDING_MAX_AGE_S`` (``Pending.from_session``).
- ``relink(session=..., pending=..., user=..., course_slug=...)``: next term's course (a copy,
  ``app.domain.courses.lifecycle``) takes the place of the one the LMS course's first launch made: the context now
  maps to it (``courses_to_link``: the open courses the instructor teaches); the made course goes if it is empty.
- ``choices(session=..., course=...)`` is what the picker offers: the course's assignments (none without a
  course), then the published exercises, each with a ``key`` (``assignment:<id>``, ``exercise:<slug>``).
- ``respond(session=..., pending=..., picked=..., tool=...)`` returns the ``LtiDeepLinkingResponse`` JWT, signed
  with gpulab's current key (``keys.sign``, ``kid`` in the header): ``iss`` gpulab's client id, ``aud`` the
  platform's issuer, ``iat``/``exp`` (``RESPONSE_LIFETIME_S``), a fresh ``nonce``, the message type, version
  1.3.0, the deployment, ``data`` echoed when the request had it, and one ``ltiResourceLink`` content item per
  pick: its title, ``url`` gpulab's launch endpoint, ``custom`` naming the pick (``provisioning.CUSTOM_*``:
  the resource link launch maps the link to it) and a ``lineItem`` (``scoreMaximum`` 100, the title as label,
  the key as ``resourceId``). ``InvalidInput``: nothing picked, several picked when the platform accepts one,
  an unknown pick; ``Forbidden``: the platform or the course the request came from is gone.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.lti import keys, provisioning
from app.domain.lti import vocabulary as v
from app.domain.lti.launch import Launch
from app.domain.lti.toolconfig import ToolUrls
from app.domain.models import Assignment, Course, CourseMember, CourseRole, Exercise, LtiContext, LtiPlatform, User
from worker.core.errors import Forbidden, InvalidInput

SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
CONTENT_ITEMS = "https://purl.imsglobal.org/spec/lti-dl/claim/content_items"
DATA = "https://purl.imsglobal.org/spec/lti-dl/claim/data"
DEEP_LINKING_RESPONSE = "LtiDeepLinkingResponse"
RESOURCE_LINK = "ltiResourceLink"
SCORE_MAXIMUM = 100
RESPONSE_LIFETIME_S = 600
PENDING_MAX_AGE_S = 3600
SESSION_KEY = "lti_deep_link"
MAX_DATA_CHARS = 2048
MAX_URL_CHARS = 1024


@dataclass(frozen=True)
class Pending:
    """A deep linking request waiting for the instructor's picks."""

    platform_id: int
    deployment_id: str
    course_id: int | None
    return_url: str
    data: str | None
    accept_multiple: bool
    title: str
    started_s: int

    def as_session(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_session(cls, value: object, *, now_s: float | None = None) -> Pending:
        """Return the pending request kept in the session, or raise ``Forbidden`` (none, garbled, too old)."""
        try:
            pending = cls(**value) if isinstance(value, dict) else None
        except TypeError:
            pending = None
        if pending is None:
            raise Forbidden("no deep linking request is waiting in this browser; start again from the platform")
        if (now_s if now_s is not None else time.time()) - pending.started_s > PENDING_MAX_AGE_S:
            raise Forbidden("this deep linking request is too old; start again from the platform")
        return pending


@dataclass(frozen=True)
class Picking:
    user: User
    course: Course | None
    pending: Pending


@dataclass(frozen=True)
class Choice:
    key: str
    kind: str  # assignment or exercise
    title: str
    custom: dict[str, str]


def settings_of(launch: Launch) -> dict[str, Any]:
    """Return the request's deep linking settings, or raise ``InvalidInput`` (see the module contract)."""
    found = launch.claims.get(SETTINGS)
    if not isinstance(found, dict):
        raise InvalidInput("the deep linking request has no deep_linking_settings claim")
    url = found.get("deep_link_return_url")
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or urlsplit(url).scheme not in ("http", "https"):
        raise InvalidInput("the deep linking request has no usable deep_link_return_url")
    types = found.get("accept_types")
    if not isinstance(types, list) or RESOURCE_LINK not in types:
        raise InvalidInput(f"the platform does not accept {RESOURCE_LINK} items, the only deep linking gpulab does")
    data = found.get("data")
    if data is not None and (not isinstance(data, str) or len(data) > MAX_DATA_CHARS):
        raise InvalidInput(f"the deep linking request's data is not a string of at most {MAX_DATA_CHARS} characters")
    return {
        "return_url": url,
        "data": data,
        "accept_multiple": found.get("accept_multiple") is not False,
        "title": found.get("title") if isinstance(found.get("title"), str) else "",
    }


def begin(*, session: Session, launch: Launch) -> Picking:
    """Check a deep linking request and provision its instructor (see the module contract)."""
    if launch.message_type != v.DEEP_LINKING_REQUEST:
        raise InvalidInput("this launch is not a deep linking request")
    found = settings_of(launch)
    if v.course_role(launch.roles) is not CourseRole.instructor:
        raise Forbidden("only the course's instructors can add gpulab content to it (deep linking)")
    user = provisioning.account_for(session=session, launch=launch)
    course = provisioning.course_for(session=session, launch=launch)
    if course is not None:
        provisioning.enroll_member(session=session, course=course, user=user, role=CourseRole.instructor)
    pending = Pending(
        platform_id=launch.platform.id,
        deployment_id=launch.deployment_id,
        course_id=course.id if course is not None else None,
        started_s=int(time.time()),
        **found,
    )
    return Picking(user=user, course=course, pending=pending)


def courses_to_link(*, session: Session, pending: Pending, user: User) -> list[Course]:
    """Return the courses ``user`` instructs that this request's LMS course could be linked to instead."""
    if pending.course_id is None:
        return []
    found = session.scalars(
        select(Course)
        .join(CourseMember, CourseMember.course_id == Course.id)
        .where(
            CourseMember.user_id == user.id, CourseMember.role == CourseRole.instructor,
            Course.is_practice.is_(False), Course.archived_at.is_(None), Course.id != pending.course_id,
        )
        .order_by(Course.created_at.desc(), Course.id.desc())
    )  # fmt: skip
    return list(found)


def relink(*, session: Session, pending: Pending, user: User, course_slug: str) -> Pending:
    """Link the request's LMS course to ``user``'s gpulab course ``course_slug`` (next term's copy); return the new
    pending request.

    The course the first launch made for the LMS course is deleted when nothing is in it yet (no assignment, no
    submission, nobody but LMS launches); otherwise it stays, unlinked. Refused: a course ``user`` does not
    instruct, an archived one, a request from outside any course.
    """
    if pending.course_id is None:
        raise InvalidInput("this request comes from outside any LMS course: there is nothing to link")
    target = session.scalar(select(Course).where(Course.slug == course_slug))
    if target is None or target not in courses_to_link(session=session, pending=pending, user=user):
        raise Forbidden("you can link the LMS course only to an open course you instruct")
    context = session.scalar(
        select(LtiContext).where(
            LtiContext.platform_id == pending.platform_id, LtiContext.deployment_id == pending.deployment_id,
            LtiContext.course_id == pending.course_id,
        )
    )  # fmt: skip
    if context is None:
        raise Forbidden("the LMS course this request came from is no longer linked to gpulab; start again")
    old = session.get(Course, pending.course_id)
    context.course_id = target.id
    session.flush()
    if old is not None and not old.assignments and not _has_work(session, old):
        session.delete(old)  # the empty course the first launch made for the LMS course
    trail.record(
        session=session, action=Action.lti_admin, actor=user, course_id=target.id,
        target=f"LMS course {context.context_id} ({pending.title or 'deep linking'})",
        before={"course": old.slug if old is not None else None}, after={"course": target.slug},
    )  # fmt: skip
    session.flush()
    return Pending(**{**pending.as_session(), "course_id": target.id})


def _has_work(session: Session, course: Course) -> bool:
    members = session.scalars(select(CourseMember.source).where(CourseMember.course_id == course.id)).all()
    return any(source != provisioning.SOURCE for source in members)


def choices(*, session: Session, course: Course | None) -> list[Choice]:
    """Return what the picker offers: the course's assignments, then the published exercises."""
    found: list[Choice] = []
    if course is not None:
        assignments = session.scalars(
            select(Assignment).where(Assignment.course_id == course.id).order_by(Assignment.position, Assignment.id)
        )
        found += [
            Choice(f"assignment:{a.id}", "assignment", a.title, {provisioning.CUSTOM_ASSIGNMENT: str(a.id)})
            for a in assignments
        ]
    exercises = session.scalars(select(Exercise).where(Exercise.is_published.is_(True)).order_by(Exercise.slug))
    for exercise in exercises:
        title = exercise.current_version.title if exercise.current_version is not None else exercise.slug
        found.append(
            Choice(f"exercise:{exercise.slug}", "exercise", title, {provisioning.CUSTOM_EXERCISE: exercise.slug})
        )
    return found


def respond(*, session: Session, pending: Pending, picked: list[str], tool: ToolUrls) -> str:
    """Return the signed ``LtiDeepLinkingResponse`` for ``picked`` (see the module contract)."""
    platform = session.get(LtiPlatform, pending.platform_id)
    if platform is None:
        raise Forbidden("the platform this deep linking request came from is no longer registered with gpulab")
    course = session.get(Course, pending.course_id) if pending.course_id is not None else None
    if pending.course_id is not None and course is None:
        raise Forbidden("the course this deep linking request came from no longer exists in gpulab")
    picked = list(dict.fromkeys(picked))
    if not picked:
        raise InvalidInput("pick at least one assignment or exercise")
    if len(picked) > 1 and not pending.accept_multiple:
        raise InvalidInput("the platform accepts a single item here: pick one")
    offered = {choice.key: choice for choice in choices(session=session, course=course)}
    unknown = [key for key in picked if key not in offered]
    if unknown:
        raise InvalidInput(f"gpulab offers no {unknown[0][:80]!r} here")
    items = [
        {
            "type": RESOURCE_LINK,
            "title": offered[key].title,
            "url": tool.launch,
            "custom": offered[key].custom,
            "lineItem": {"scoreMaximum": SCORE_MAXIMUM, "label": offered[key].title, "resourceId": key},
        }
        for key in picked
    ]
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": platform.client_id,
        "aud": platform.issuer,
        "iat": now,
        "exp": now + RESPONSE_LIFETIME_S,
        "nonce": secrets.token_urlsafe(16),
        v.MESSAGE_TYPE: DEEP_LINKING_RESPONSE,
        v.VERSION: v.LTI_VERSION,
        v.DEPLOYMENT_ID: pending.deployment_id,
        CONTENT_ITEMS: items,
    }
    if pending.data is not None:
        claims[DATA] = pending.data
    return keys.sign(session=session, claims=claims)
