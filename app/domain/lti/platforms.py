"""Registered platforms: one row per OAuth client of a platform's issuer, with its deployment ids.

Contract:
- ``register`` stores a platform from the fields an admin copies out of the platform (manual registration) or
  that Dynamic Registration got (``app.domain.lti.registration``): every URL passes ``outbound.check_url``, the
  issuer has no query either, and an (issuer, client id) already registered is a ``Conflict``. An empty name
  is the issuer's host; an empty audience is none (the token URL is the audience).
- ``add_deployment`` adds a deployment id the platform gave (idempotent) and takes it off the refused ones.
  Launches from a deployment that is not listed are refused (``app.domain.lti.launch``), unless the platform's
  ``accept_new_deployments`` is on (``set_accept_new_deployments``; off by default): then a verified launch from
  a new deployment of this registered client adds it.
- Refused deployments: ``note_refused`` records a deployment id a verified launch (a token the platform signed
  for gpulab's client id, with this browser's nonce) named and that was refused, with when it was first and
  last seen and how many launches it refused; ``refused_deployments`` lists them, newest first. At most
  ``MAX_REFUSED_KEPT`` are kept per platform (the longest unseen go first); ids unusable as deployment ids are
  not recorded. ``accept_refused`` lets one in (``add_deployment``, which ends the refusal of any id it adds);
  ``dismiss_refused`` forgets one without letting it in (both ``NotFound`` if it is not listed). Login
  initiations are unauthenticated, so only launches record refusals.
- ``remove_deployment`` takes a deployment id off the list (``NotFound`` if it is not listed); launches from it
  are refused from then on, and the courses and links it made stay (adding it again lets them in again).
- ``find(issuer, client_id)`` is the platform a login names: by both, or by the issuer alone when it has only
  one client here (the login initiation may leave ``client_id`` out). Unknown is ``Forbidden``: gpulab refuses
  launches from platforms nobody registered.
- ``get(platform_id)`` is the platform by id (``NotFound``); ``listing`` is every platform, by issuer and client
  id, each with what it launched here (``Usage``: accounts, courses, links).
- ``delete(platform)`` removes a platform nobody launched from yet (a mistyped registration): one that has
  launched anyone or made a course or a link is a ``Conflict`` and stays, because deleting it would delete its
  people's sign-in, its course mappings, its links and the scores still owed with it (the database cascades).
  Remove its deployments instead to stop its launches.
Every text is checked before anything is written: no control character (PostgreSQL text cannot hold NUL),
URLs as ``outbound.check_url`` says (a URL that does not parse is ``InvalidInput`` too). Nothing here commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.lti.outbound import check_url
from app.domain.models import LtiContext, LtiLink, LtiPlatform, LtiUser, User, utcnow
from worker.core.errors import Conflict, Forbidden, InvalidInput, NotFound

MAX_ID_CHARS = 255
MAX_NAME_CHARS = 200
MAX_REFUSED_KEPT = 20


def record_admin(*, session: Session, actor: User, change: str, platform: LtiPlatform | None, **details: Any) -> None:
    """Add the audit entry of an admin's LTI change (``change``: what they did) to the session."""
    target = f"LTI platform {platform.id} ({platform.name or platform.issuer})" if platform else "LTI"
    trail.record(
        session=session, action=Action.lti_admin, actor=actor, target=target, after={"change": change, **details}
    )


def _check_text(value: str, *, what: str) -> str:
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise InvalidInput(f"the {what} must not contain control characters (tabs, line breaks, NUL...)")
    return value


def _check_id(value: str, *, what: str) -> str:
    value = _check_text(value.strip(), what=what)
    if not value or len(value) > MAX_ID_CHARS:
        raise InvalidInput(f"the {what} must be 1 to {MAX_ID_CHARS} characters")
    return value


def _check_url(url: str, *, what: str, allow_http: bool) -> str:
    _check_text(url, what=what)
    try:
        return check_url(url, what=what, allow_http=allow_http)
    except ValueError as exc:  # urlsplit: an unbalanced [IPv6] host
        raise InvalidInput(f"the {what} is not a URL: {exc}") from exc


def check_issuer(issuer: str, *, allow_http: bool) -> str:
    """Return ``issuer`` if it is a platform issuer (an https URL without query or fragment)."""
    _check_url(issuer, what="issuer", allow_http=allow_http)
    if urlsplit(issuer).query:
        raise InvalidInput(f"the issuer must have no ?query, not {issuer!r}")
    return _check_id(issuer, what="issuer")


def register(
    *,
    session: Session,
    issuer: str,
    client_id: str,
    name: str,
    auth_login_url: str,
    auth_token_url: str,
    jwks_url: str,
    deployment_ids: Sequence[str] = (),
    audience: str | None = None,
    allow_http: bool = False,
    accept_new_deployments: bool = False,
) -> LtiPlatform:
    """Store a platform; raise ``InvalidInput`` for a malformed field, ``Conflict`` if it is registered already."""
    issuer = check_issuer(issuer, allow_http=allow_http)
    client_id = _check_id(client_id, what="client id")
    for url, what in ((auth_login_url, "authorisation URL"), (auth_token_url, "token URL"), (jwks_url, "JWKS URL")):
        _check_url(url, what=what, allow_http=allow_http)
    name = _check_text(name.strip(), what="name")
    audience = _check_id(audience, what="token audience") if audience and audience.strip() else None
    deployments = list(dict.fromkeys(_check_id(d, what="deployment id") for d in deployment_ids))
    exists = select(LtiPlatform.id).where(LtiPlatform.issuer == issuer, LtiPlatform.client_id == client_id)
    if session.scalar(exists) is not None:
        raise Conflict(f"the platform {issuer} with client id {client_id} is registered already")
    platform = LtiPlatform(
        issuer=issuer,
        client_id=client_id,
        name=(name or urlsplit(issuer).netloc)[:MAX_NAME_CHARS],
        auth_login_url=auth_login_url,
        auth_token_url=auth_token_url,
        jwks_url=jwks_url,
        audience=audience,
        deployment_ids=deployments,
        accept_new_deployments=accept_new_deployments,
        refused_deployments=[],
    )
    try:
        with session.begin_nested():  # a concurrent registration of the same client loses cleanly
            session.add(platform)
    except IntegrityError as exc:
        raise Conflict(f"the platform {issuer} with client id {client_id} is registered already") from exc
    return platform


def add_deployment(*, platform: LtiPlatform, deployment_id: str) -> None:
    """Let launches from ``deployment_id`` of ``platform`` in (no change if it is known); it is no longer refused."""
    deployment_id = _check_id(deployment_id, what="deployment id")
    if deployment_id not in platform.deployment_ids:
        # A new list, not an in-place append: the JSON column only notices assignment.
        platform.deployment_ids = [*platform.deployment_ids, deployment_id]
    if any(entry.get("id") == deployment_id for entry in platform.refused_deployments):
        platform.refused_deployments = [e for e in platform.refused_deployments if e.get("id") != deployment_id]


def set_accept_new_deployments(*, platform: LtiPlatform, accept: bool) -> None:
    """Let verified launches from new deployments of ``platform``'s client in (and add them), or stop doing so."""
    platform.accept_new_deployments = accept


def usable_deployment_id(value: object) -> TypeGuard[str]:
    """Say whether ``value`` can be stored as a deployment id as it is (a launch's claim is compared verbatim)."""
    if not isinstance(value, str):
        return False
    try:
        return _check_id(value, what="deployment id") == value
    except InvalidInput:
        return False


@dataclass(frozen=True)
class Refused:
    """A deployment whose verified launches were refused: when first and last, and how many."""

    deployment_id: str
    first_at: datetime
    last_at: datetime
    launches: int


def note_refused(*, session: Session, platform_id: int, deployment_id: str, at: datetime | None = None) -> None:
    """Record that a verified launch from ``deployment_id`` of the platform was refused (see the contract)."""
    platform = session.get(LtiPlatform, platform_id, with_for_update=True)  # two refusals at once both count
    if platform is None or not usable_deployment_id(deployment_id) or deployment_id in platform.deployment_ids:
        return
    stamp = (at or utcnow()).isoformat()
    entries: list[dict[str, Any]] = [dict(entry) for entry in platform.refused_deployments]
    found = next((entry for entry in entries if entry.get("id") == deployment_id), None)
    if found is None:
        found = {"id": deployment_id, "first_at": stamp, "launches": 0}
    else:
        entries.remove(found)
    found.update(last_at=stamp, launches=int(found.get("launches", 0)) + 1)
    # Newest last; beyond the cap the longest unseen ones go.
    platform.refused_deployments = [*entries, found][-MAX_REFUSED_KEPT:]


def refused_deployments(platform: LtiPlatform) -> list[Refused]:
    """Return the deployments of ``platform`` whose launches were refused (and still are), newest first."""
    found = [
        Refused(
            deployment_id=str(entry["id"]),
            first_at=datetime.fromisoformat(str(entry["first_at"])),
            last_at=datetime.fromisoformat(str(entry["last_at"])),
            launches=int(entry.get("launches", 1)),
        )
        for entry in platform.refused_deployments
        if entry.get("id") not in platform.deployment_ids
    ]
    return sorted(found, key=lambda refused: refused.last_at, reverse=True)


def _refused_entry(platform: LtiPlatform, deployment_id: str) -> str:
    deployment_id = deployment_id.strip()
    if not any(entry.get("id") == deployment_id for entry in platform.refused_deployments):
        raise NotFound(f"{platform.name or platform.issuer} has refused no deployment {deployment_id!r}")
    return deployment_id


def accept_refused(*, platform: LtiPlatform, deployment_id: str) -> None:
    """Let a refused deployment in (``add_deployment``); ``NotFound`` if it is not listed as refused."""
    add_deployment(platform=platform, deployment_id=_refused_entry(platform, deployment_id))


def dismiss_refused(*, platform: LtiPlatform, deployment_id: str) -> None:
    """Forget a refused deployment without letting it in; ``NotFound`` if it is not listed as refused."""
    deployment_id = _refused_entry(platform, deployment_id)
    platform.refused_deployments = [e for e in platform.refused_deployments if e.get("id") != deployment_id]


def find(*, session: Session, issuer: str, client_id: str | None) -> LtiPlatform:
    """Return the platform a login names, or raise ``Forbidden`` (unknown) or ``InvalidInput`` (ambiguous)."""
    query = select(LtiPlatform).where(LtiPlatform.issuer == issuer)
    if client_id:
        query = query.where(LtiPlatform.client_id == client_id)
    found = list(session.scalars(query.limit(2)))
    if not found:
        named = f"{issuer} (client id {client_id})" if client_id else issuer
        raise Forbidden(f"the platform {named} is not registered with gpulab; ask a gpulab admin to register it")
    if len(found) > 1:
        raise InvalidInput(f"{issuer} has several clients here: the login must say which one (client_id)")
    return found[0]


def remove_deployment(*, platform: LtiPlatform, deployment_id: str) -> None:
    """Refuse launches from ``deployment_id`` of ``platform`` from now on; ``NotFound`` if it is not listed."""
    deployment_id = deployment_id.strip()
    if deployment_id not in platform.deployment_ids:
        raise NotFound(f"{platform.name or platform.issuer} has no deployment {deployment_id!r}")
    platform.deployment_ids = [known for known in platform.deployment_ids if known != deployment_id]


def get(*, session: Session, platform_id: int) -> LtiPlatform:
    """Return the platform with this id, or raise ``NotFound``."""
    platform = session.get(LtiPlatform, platform_id)
    if platform is None:
        raise NotFound(f"no LTI platform {platform_id}")
    return platform


@dataclass(frozen=True)
class Usage:
    """What a platform launched here: accounts that sign in through it, courses and links it made."""

    users: int = 0
    contexts: int = 0
    links: int = 0

    @property
    def used(self) -> bool:
        return bool(self.users or self.contexts or self.links)


@dataclass(frozen=True)
class Listed:
    platform: LtiPlatform
    usage: Usage


def _counts(session: Session, model: type[LtiUser | LtiContext | LtiLink], ids: Sequence[int]) -> dict[int, int]:
    rows = session.execute(
        select(model.platform_id, func.count()).where(model.platform_id.in_(ids)).group_by(model.platform_id)
    )
    return {platform_id: count for platform_id, count in rows}


def usage_of(*, session: Session, platform_ids: Sequence[int]) -> dict[int, Usage]:
    """Return the ``Usage`` of each platform id (all zero for one that launched nothing)."""
    users, contexts, links = (_counts(session, model, platform_ids) for model in (LtiUser, LtiContext, LtiLink))
    return {
        pid: Usage(users=users.get(pid, 0), contexts=contexts.get(pid, 0), links=links.get(pid, 0))
        for pid in platform_ids
    }


def listing(*, session: Session) -> list[Listed]:
    """Return every registered platform (by issuer, client id) with its ``Usage``."""
    found = list(session.scalars(select(LtiPlatform).order_by(LtiPlatform.issuer, LtiPlatform.client_id)))
    usage = usage_of(session=session, platform_ids=[platform.id for platform in found])
    return [Listed(platform, usage[platform.id]) for platform in found]


def delete(*, session: Session, platform: LtiPlatform) -> None:
    """Delete ``platform`` if it never launched anyone, made no course and no link; else raise ``Conflict``."""
    usage = usage_of(session=session, platform_ids=[platform.id])[platform.id]
    if usage.used:
        raise Conflict(
            f"{platform.name or platform.issuer} has {usage.users} account(s), {usage.contexts} course(s) and "
            f"{usage.links} link(s) here: deleting it would delete them; remove its deployments to stop launches"
        )
    session.delete(platform)
    session.flush()
