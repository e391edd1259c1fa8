"""What a verified launch does in gpulab: the account, the course, the enrollment, the link, where to land.

Contract (``provision(session=..., launch=..., tool=..., course_pages=...)`` does all of it; the caller commits
and signs the user in):
- Account: the user mapped to (platform, ``sub``) in ``LtiUser``; a new one is made at the first launch, a
  learner site-wide (course roles come from the course), named from the ``name`` claim (or given and family
  names), with the ``email`` claim as address when it is valid and no account has it yet, else a placeholder
  ``lti-<platform>-<digest>@lti.invalid`` (never linked to an existing account by e-mail: a platform must not
  be able to take over an account by claiming its address; linking is for a later slice). Its password is
  random and unknown: it signs in through the platform. A disabled account is ``Forbidden``. The name follows
  the platform at each launch.
- Course: the course mapped to (platform, deployment, context id) in ``LtiContext``, made at the first launch
  from the context's title (or label) with a slug from its label and a digest of the mapping. A launch without
  a context (from outside any course) enrolls nowhere. The context keeps the NRPS memberships service URL
  (``context_memberships_url`` of the ``namesroleservice`` claim, an http(s) URL) of the newest launch that
  gave one, for roster sync (``app.domain.lti.roster``); a launch without it leaves the stored one.
- Enrollment (``app.domain.courses.membership.enroll``): the course role ``vocabulary.course_role`` reads from the roles
  claim, source ``lti``. A membership LTI made follows the platform's role at each launch (``update_role``),
  except that the course's last instructor is not demoted (``courses`` refuses it; the launch goes on with the
  role kept); a membership made here by hand only ever gains a role (``courses``' never-lower rule).
- Link: the ``LtiLink`` of (platform, deployment, resource link id), made at the first launch (an exercise when
  its target is ``/exercises/<slug>`` on gpulab), its title and AGS line item URL kept current. A link placed by
  deep linking (``app.domain.lti.deep_linking``) carries a custom parameter (the ``custom`` claim) naming what
  was picked: ``gpulab_exercise`` (a slug) or ``gpulab_assignment`` (an id, honoured only when the assignment
  belongs to the launched course); a link that opens nothing yet takes it at its launch.
- Landing (``destination``): the link's exercise; else the link's assignment's page
  (``/courses/{slug}/assignments/{id}``); else the target link when it is a page on gpulab outside ``/lti/``;
  else the launched course's page; else ``/exercises``.
  Course pages are used only where ``course_pages`` says the app has them (``/courses/{slug}``); without them
  every course landing is ``/exercises``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.accounts.passwords import check_email, hash_password
from app.domain.courses import membership
from app.domain.lti.launch import Launch
from app.domain.lti.toolconfig import ToolUrls, is_on_tool
from app.domain.lti.vocabulary import NRPS_SERVICE, course_role
from app.domain.models import (
    Assignment,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    LtiContext,
    LtiLink,
    LtiUser,
    Role,
    User,
)
from worker.core.errors import Conflict, Forbidden, InvalidInput

MAX_NAME_CHARS = 200
MAX_TITLE_CHARS = 200
MAX_SLUG_CHARS = 64
MAX_URL_CHARS = 1024
PLACEHOLDER_DOMAIN = "lti.invalid"  # RFC 2606: a name that can never be a real mailbox
SOURCE = "lti"
CUSTOM = "https://purl.imsglobal.org/spec/lti/claim/custom"
CUSTOM_EXERCISE = "gpulab_exercise"
CUSTOM_ASSIGNMENT = "gpulab_assignment"
_EXERCISE_PATH = re.compile(r"^/exercises/([a-z0-9][a-z0-9-]{0,63})/?$")


@dataclass(frozen=True)
class Landing:
    """What a launch made or found, and the path to send the browser to."""

    user: User
    course: Course | None
    role: CourseRole | None
    link: LtiLink
    path: str


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()


def _address(*, session: Session, launch: Launch) -> str:
    """Return the e-mail address a new account from ``launch`` gets (the claim's, or a placeholder)."""
    if launch.email:
        try:
            email = check_email(launch.email)
        except InvalidInput:
            email = ""
        if email and session.scalar(select(User.id).where(User.email == email)) is None:
            return email
    return f"lti-{launch.platform.id}-{_digest(launch.sub)[:20]}@{PLACEHOLDER_DOMAIN}"


def account_for(*, session: Session, launch: Launch) -> User:
    """Return the account of the launching user, making it at their first launch."""
    query = select(LtiUser).where(LtiUser.platform_id == launch.platform.id, LtiUser.sub == launch.sub)
    found = session.scalar(query)
    if found is None:
        user = User(
            email=_address(session=session, launch=launch),
            password_hash=hash_password(secrets.token_urlsafe(32)),
            role=Role.learner,
            is_active=True,
            name=launch.name[:MAX_NAME_CHARS],
        )
        try:
            with session.begin_nested():  # the same person's first launch in two tabs: one account
                session.add(user)
                session.flush()
                session.add(LtiUser(platform_id=launch.platform.id, sub=launch.sub, user_id=user.id))
        except IntegrityError as exc:
            found = session.scalar(query)
            if found is None:
                raise Conflict("the account for this launch could not be made; launch again") from exc
        else:
            return user
    user = found.user
    if not user.is_active:
        raise Forbidden("your gpulab account is disabled; ask a gpulab admin")
    if launch.name and user.name != launch.name[:MAX_NAME_CHARS]:
        user.name = launch.name[:MAX_NAME_CHARS]
    return user


def _slug(*, session: Session, launch: Launch, title: str) -> str:
    label = launch.context_label or title
    base = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40].strip("-") or "course"
    slug = f"{base}-{_digest(launch.platform.id, launch.deployment_id, launch.context_id)[:10]}"
    while session.scalar(select(Course.id).where(Course.slug == slug)) is not None:
        slug = f"{base}-{secrets.token_hex(5)}"  # a course made by hand took it
    return slug[:MAX_SLUG_CHARS]


def memberships_url(launch: Launch) -> str | None:
    """Return the NRPS memberships service URL the launch gives (an http(s) URL), else None."""
    service = launch.claims.get(NRPS_SERVICE)
    url = service.get("context_memberships_url") if isinstance(service, dict) else None
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        return None
    parts = urlsplit(url)
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def course_for(*, session: Session, launch: Launch) -> Course | None:
    """Return the course of the launch's context, making it at its first launch; None without a context."""
    if launch.context_id is None:
        return None
    query = select(LtiContext).where(
        LtiContext.platform_id == launch.platform.id,
        LtiContext.deployment_id == launch.deployment_id,
        LtiContext.context_id == launch.context_id,
    )
    found = session.scalar(query)
    roster = memberships_url(launch)
    if found is not None:
        if roster is not None and found.memberships_url != roster:
            found.memberships_url = roster
        return found.course
    title = (launch.context_title or f"Course from {launch.platform.name}")[:MAX_TITLE_CHARS]
    course = Course(slug=_slug(session=session, launch=launch, title=title), title=title)
    try:
        with session.begin_nested():  # two first launches of one course at once: one course
            session.add(course)
            session.flush()
            session.add(
                LtiContext(
                    platform_id=launch.platform.id,
                    deployment_id=launch.deployment_id,
                    context_id=launch.context_id,
                    course_id=course.id,
                    memberships_url=roster,
                )
            )
    except IntegrityError as exc:
        found = session.scalar(query)
        if found is None:
            raise Conflict("the course for this launch could not be made; launch again") from exc
        return found.course
    return course


def enroll_member(*, session: Session, course: Course, user: User, role: CourseRole) -> None:
    """Enroll ``user`` with the platform's ``role``: exactly it when LTI made the membership, else never lower."""
    member = session.scalar(
        select(CourseMember).where(CourseMember.course_id == course.id, CourseMember.user_id == user.id)
    )
    follow = member is None or member.source == SOURCE
    try:
        membership.enroll(session=session, course=course, user=user, role=role, source=SOURCE, update_role=follow)
    except Conflict:
        # The platform demoted the course's last instructor: they stay instructor until it has another one,
        # rather than the launch being refused.
        membership.enroll(session=session, course=course, user=user, role=role, source=SOURCE, update_role=False)


def _exercise_id(*, session: Session, target: str, tool: ToolUrls) -> int | None:
    if not is_on_tool(target, tool):
        return None
    match = _EXERCISE_PATH.match(urlsplit(target).path)
    return session.scalar(select(Exercise.id).where(Exercise.slug == match.group(1))) if match else None


def _picked(*, session: Session, launch: Launch, link: LtiLink, course: Course | None) -> None:
    """Point ``link`` at what deep linking picked for it (its custom parameters), when it opens nothing yet."""
    custom = launch.claims.get(CUSTOM)
    if not isinstance(custom, dict) or link.exercise_id is not None or link.assignment_id is not None:
        return
    slug, assignment_id = custom.get(CUSTOM_EXERCISE), custom.get(CUSTOM_ASSIGNMENT)
    if isinstance(slug, str) and slug:
        link.exercise_id = session.scalar(select(Exercise.id).where(Exercise.slug == slug))
    elif isinstance(assignment_id, str) and assignment_id.isdigit() and course is not None:
        assignment = session.get(Assignment, int(assignment_id))
        if assignment is not None and assignment.course_id == course.id:
            link.assignment = assignment


def link_for(*, session: Session, launch: Launch, tool: ToolUrls, course: Course | None = None) -> LtiLink:
    """Return the resource link of the launch, making it at its first launch; keep its title and line item."""
    query = select(LtiLink).where(
        LtiLink.platform_id == launch.platform.id,
        LtiLink.deployment_id == launch.deployment_id,
        LtiLink.resource_link_id == launch.resource_link_id,
    )
    link = session.scalar(query)
    if link is None:
        link = LtiLink(
            platform_id=launch.platform.id,
            deployment_id=launch.deployment_id,
            resource_link_id=launch.resource_link_id,
            exercise_id=_exercise_id(session=session, target=launch.target_link_uri, tool=tool),
        )
        try:
            with session.begin_nested():
                session.add(link)
        except IntegrityError:
            link = session.scalar(query)
            if link is None:
                raise
    _picked(session=session, launch=launch, link=link, course=course)
    if launch.resource_link_title:
        link.title = launch.resource_link_title[:MAX_TITLE_CHARS]
    if launch.lineitem_url:
        link.lineitem_url = launch.lineitem_url[:1024]
    return link


def _page_on_tool(target: str, tool: ToolUrls) -> str | None:
    """Return the path of ``target`` when it is a gpulab page a launch may land on, else None."""
    if not is_on_tool(target, tool):
        return None
    parts = urlsplit(target)
    path = parts.path or "/"
    if path.startswith(("//", "/lti/")) or path == "/lti" or "\\" in path:
        return None
    return path + (f"?{parts.query}" if parts.query else "")


def destination(*, link: LtiLink, course: Course | None, target: str, tool: ToolUrls, course_pages: bool) -> str:
    """Return the path a launch lands on (see the module contract)."""
    if link.exercise is not None:
        return f"/exercises/{link.exercise.slug}"
    if link.assignment is not None:
        course_of = link.assignment.course
        return f"/courses/{course_of.slug}/assignments/{link.assignment.id}" if course_pages else "/exercises"
    page = _page_on_tool(target, tool)
    if page is not None:
        return page
    if course is not None and course_pages:
        return f"/courses/{course.slug}"
    return "/exercises"


def provision(*, session: Session, launch: Launch, tool: ToolUrls, course_pages: bool) -> Landing:
    """Make or find the account, course, enrollment and link of ``launch``; return them and where to land."""
    user = account_for(session=session, launch=launch)
    course = course_for(session=session, launch=launch)
    role = course_role(launch.roles) if course is not None else None
    if course is not None and role is not None:
        enroll_member(session=session, course=course, user=user, role=role)
    link = link_for(session=session, launch=launch, tool=tool, course=course)
    path = destination(link=link, course=course, target=launch.target_link_uri, tool=tool, course_pages=course_pages)
    return Landing(user=user, course=course, role=role, link=link, path=path)
