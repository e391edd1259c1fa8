"""Names and Role Provisioning Services (NRPS 2.0): course staff sync a course's roster from the LMS.

Contract: ``sync_roster(session=..., course=..., actor=..., http=...)`` returns a ``RosterReport``; the caller
commits.
- Who: course staff only (``membership.require_course_role`` with ``membership.STAFF``: ``NotFound`` for an outsider,
  ``Forbidden`` for a learner). A course none of whose LTI contexts has a memberships service URL (stored by
  ``provisioning`` from a launch's ``namesroleservice`` claim) is ``InvalidInput``.
- Reading: for each such context (oldest first), an access token for ``MEMBERSHIPS_SCOPE`` from
  ``app.domain.lti.tokens``, then ``GET`` of the memberships URL (its query kept) with ``Authorization: Bearer``
  and ``Accept: application/vnd.ims.lti-nrps.v2.membershipcontainer+json``, following ``Link: <...>;
  rel="next"`` while there is one, at most ``MAX_PAGES`` pages per context. A next page must be on the same
  scheme and host as the memberships URL (the token is never shown to anyone else). Every page must be a
  membership container: a JSON object with a ``members`` list (and, when it names a ``context.id``, the
  context's own id). Any failure (no token, the service unreachable, a non-2xx, something not a container,
  more pages than the cap) raises ``InvalidInput`` naming the context (a failed page also drops the cached
  token, so a refused one is not shown again), before anything is written: every page of every context is
  read first, so a failed sync changes nothing.
- Members: ``user_id`` is the platform's ``sub``; ``roles`` (full or short context roles) give the course role
  as at a launch (``vocabulary.course_role``); ``name`` (or ``given_name`` and ``family_name``) and ``email``
  as the id_token's claims; ``status`` ``Active`` (the default), ``Inactive`` or ``Deleted``. A member without
  a usable ``user_id`` is skipped. One person listed twice (two contexts) counts once, the active listing
  first.
- Writing, per active member: the account of (platform, ``sub``), made as a launch makes it
  (``provisioning.account_for``: a learner site-wide, the e-mail only when no account has it, never linked to
  an existing account by e-mail; the name follows the platform), then ``provisioning.enroll_member`` with the
  mapped role (exactly it for memberships LTI made, never lower for ones made by hand; the course's last
  instructor is not demoted). The entry is ``added`` (no membership before), ``updated`` (its role changed) or
  ``unchanged``, with a note when the role kept differs from the platform's. A disabled gpulab account is
  ``skipped``.
- Inactive (or deleted) members are never removed nor made: an existing membership is left as it is (the
  platform may reactivate them, and removal is staff's call in gpulab), and they are reported under
  ``skipped`` with a note saying whether they are still enrolled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.lti import tokens
from app.domain.lti.launch import Launch
from app.domain.lti.provisioning import MAX_NAME_CHARS, account_for, enroll_member
from app.domain.lti.vocabulary import course_role
from app.domain.models import Course, CourseMember, CourseRole, LtiContext, LtiPlatform, LtiUser, User
from worker.core.errors import Conflict, Forbidden, InvalidInput

MEMBERSHIPS_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
MEMBERSHIP_MEDIA_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
MAX_PAGES = 50
MAX_ID_CHARS = 255
ACTIVE = "Active"
INACTIVE = frozenset({"Inactive", "Deleted"})


@dataclass(frozen=True)
class RosterEntry:
    """One member of the platform's roster and what the sync did with them (``role``: gpulab's, after it)."""

    sub: str
    name: str
    email: str | None
    role: CourseRole | None
    note: str = ""


@dataclass
class RosterReport:
    """What one ``sync_roster`` did: the contexts and pages read, and every member in one of four lists."""

    contexts: int = 0
    pages: int = 0
    added: list[RosterEntry] = field(default_factory=list)
    updated: list[RosterEntry] = field(default_factory=list)
    unchanged: list[RosterEntry] = field(default_factory=list)
    skipped: list[RosterEntry] = field(default_factory=list)


@dataclass(frozen=True)
class _Member:
    platform: LtiPlatform
    context: LtiContext
    sub: str
    name: str
    email: str | None
    roles: tuple[str, ...]
    active: bool


def _text(member: dict[str, Any], name: str) -> str:
    value = member.get(name)
    return value.strip() if isinstance(value, str) else ""


def _member(raw: object, *, platform: LtiPlatform, context: LtiContext) -> _Member | RosterEntry:
    """Return the member a container lists, or the skipped entry of one gpulab cannot use."""
    if not isinstance(raw, dict):
        return RosterEntry(sub="", name="", email=None, role=None, note="not a member object")
    sub = raw.get("user_id")
    name = _text(raw, "name") or " ".join(filter(None, (_text(raw, "given_name"), _text(raw, "family_name"))))
    email = _text(raw, "email") or None
    if not isinstance(sub, str) or not sub or len(sub) > MAX_ID_CHARS:
        return RosterEntry(sub="", name=name, email=email, role=None, note="no usable user_id")
    roles = raw.get("roles", [])
    status = raw.get("status", ACTIVE)
    return _Member(
        platform=platform,
        context=context,
        sub=sub,
        name=name[:MAX_NAME_CHARS],
        email=email,
        roles=tuple(role for role in roles if isinstance(role, str)) if isinstance(roles, list) else (),
        active=status not in INACTIVE,
    )


def _same_origin(url: str, base: str) -> bool:
    a, b = urlsplit(url), urlsplit(base)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def _page(*, url: str, token: str, what: str, http: httpx.Client) -> tuple[dict[str, Any], str | None]:
    """Return one membership container and the raw next link, or raise ``InvalidInput`` saying why not."""
    headers = {"Authorization": f"Bearer {token}", "Accept": MEMBERSHIP_MEDIA_TYPE}
    try:
        response = http.get(url, headers=headers)
    except httpx.HTTPError as exc:
        raise InvalidInput(f"{what}: could not reach the memberships service: {exc.__class__.__name__}") from exc
    if not 200 <= response.status_code < 300:
        raise InvalidInput(f"{what}: the memberships service answered HTTP {response.status_code}")
    try:
        container = response.json()
    except ValueError as exc:
        raise InvalidInput(f"{what}: the memberships service did not answer JSON") from exc
    if not isinstance(container, dict) or not isinstance(container.get("members"), list):
        raise InvalidInput(f"{what}: the memberships service answered no membership container (no members list)")
    link = response.links.get("next", {}).get("url")
    return container, link if isinstance(link, str) and link else None


def _read(
    *, session: Session, platform: LtiPlatform, context: LtiContext, http: httpx.Client, report: RosterReport
) -> list[_Member | RosterEntry]:
    """Return every member the context's memberships service lists, all pages read (see the module contract)."""
    what = f"the LMS course {context.context_id!r} on {platform.name}"
    first = str(context.memberships_url)
    try:
        token = tokens.access_token(session=session, platform=platform, http=http, scope=MEMBERSHIPS_SCOPE)
    except InvalidInput as exc:
        raise InvalidInput(f"{what}: no roster token: {exc.message}") from exc
    found: list[_Member | RosterEntry] = []
    url: str | None = first
    seen: set[str] = set()
    while url is not None:
        if len(seen) >= MAX_PAGES:
            raise InvalidInput(f"{what}: the roster has more than {MAX_PAGES} pages; gpulab reads at most that")
        seen.add(url)
        try:
            container, link = _page(url=url, token=token, what=what, http=http)
        except InvalidInput:
            tokens.forget(platform=platform, scope=MEMBERSHIPS_SCOPE)  # a refused or stale token is asked anew
            raise
        named = container.get("context")
        if isinstance(named, dict) and "id" in named and named["id"] != context.context_id:
            raise InvalidInput(f"{what}: the memberships service answered the roster of another course")
        found.extend(_member(raw, platform=platform, context=context) for raw in container["members"])
        report.pages += 1
        url = urljoin(url, link) if link is not None else None
        if url is not None and not _same_origin(url, first):
            raise InvalidInput(f"{what}: the next roster page is on another host; gpulab does not follow it")
        if url in seen:
            url = None  # a next link back to a page already read: the roster is complete
    return found


def _as_launch(member: _Member) -> Launch:
    """The member as the launch ``provisioning.account_for`` makes or finds an account from."""
    return Launch(
        platform=member.platform,
        deployment_id=member.context.deployment_id,
        sub=member.sub,
        email=member.email,
        name=member.name,
        roles=member.roles,
        context_id=member.context.context_id,
        context_title="",
        context_label="",
        resource_link_id="",
        resource_link_title="",
        target_link_uri="",
        lineitem_url=None,
        claims={},
    )


def _role_of(session: Session, course: Course, user_id: int) -> CourseRole | None:
    return session.scalar(
        select(CourseMember.role).where(CourseMember.course_id == course.id, CourseMember.user_id == user_id)
    )


def _inactive(*, session: Session, course: Course, member: _Member) -> RosterEntry:
    user_id = session.scalar(
        select(LtiUser.user_id).where(LtiUser.platform_id == member.platform.id, LtiUser.sub == member.sub)
    )
    role = _role_of(session, course, user_id) if user_id is not None else None
    note = "inactive in the LMS: left enrolled" if role is not None else "inactive in the LMS: not enrolled"
    return RosterEntry(sub=member.sub, name=member.name, email=member.email, role=role, note=note)


def _apply(*, session: Session, course: Course, member: _Member, report: RosterReport) -> None:
    """Make or find the member's account and enroll it; file the entry in ``report``."""
    if not member.active:
        report.skipped.append(_inactive(session=session, course=course, member=member))
        return
    wanted = course_role(member.roles)
    try:
        user: User = account_for(session=session, launch=_as_launch(member))
    except (Forbidden, Conflict) as exc:
        note = "the gpulab account is disabled" if isinstance(exc, Forbidden) else exc.message
        report.skipped.append(RosterEntry(sub=member.sub, name=member.name, email=member.email, role=None, note=note))
        return
    before = _role_of(session, course, user.id)
    enroll_member(session=session, course=course, user=user, role=wanted)
    after = _role_of(session, course, user.id)
    note = "" if after is wanted else f"the LMS says {wanted.value}; kept as {after.value if after else 'none'}"
    entry = RosterEntry(sub=member.sub, name=user.name, email=member.email, role=after, note=note)
    if before is None:
        report.added.append(entry)
    elif before is not after:
        report.updated.append(entry)
    else:
        report.unchanged.append(entry)


def roster_contexts(*, session: Session, course: Course) -> list[LtiContext]:
    """Return the LMS contexts of ``course`` that offer their roster (an NRPS memberships URL)."""
    query = (
        select(LtiContext)
        .where(LtiContext.course_id == course.id, LtiContext.memberships_url.is_not(None))
        .order_by(LtiContext.id)
    )
    return list(session.scalars(query))


def sync_roster(*, session: Session, course: Course, actor: User, http: httpx.Client) -> RosterReport:
    """Read the course's roster from its LMS contexts and enroll it (see the module contract); the caller commits."""
    membership.require_course_role(session=session, course=course, user=actor, roles=membership.STAFF)
    contexts = roster_contexts(session=session, course=course)
    if not contexts:
        raise InvalidInput(
            f"{course.title!r} has no LMS course offering its roster (NRPS): launch gpulab from the LMS course first"
        )
    report = RosterReport(contexts=len(contexts))
    listed: list[_Member | RosterEntry] = []
    for context in contexts:
        platform = session.get(LtiPlatform, context.platform_id)
        if platform is None:  # pragma: no cover - the context cascades away with its platform
            continue
        listed.extend(_read(session=session, platform=platform, context=context, http=http, report=report))
    members: dict[tuple[int, str], _Member] = {}
    for item in listed:
        if isinstance(item, RosterEntry):
            report.skipped.append(item)
            continue
        key = (item.platform.id, item.sub)
        if key not in members or (item.active and not members[key].active):
            members[key] = item
    for member in members.values():
        _apply(session=session, course=course, member=member, report=report)
    session.flush()
    return report
