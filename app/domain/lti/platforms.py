"""Registered platforms: one row per OAuth client of a platform's issuer, with its deployment ids.

Contract:
- ``register`` stores a platform from the fields an admin copies out of the platform (manual registration) or
  that Dynamic Registration got (``app.domain.lti.registration``): every URL passes ``outbound.check_url``, the
  issuer has no query either, and an (issuer, client id) already registered is a ``Conflict``.
- ``add_deployment`` adds a deployment id the platform gave (idempotent). Launches from a deployment that is
  not listed are refused (``app.domain.lti.launch``).
- ``find(issuer, client_id)`` is the platform a login names: by both, or by the issuer alone when it has only
  one client here (the login initiation may leave ``client_id`` out). Unknown is ``Forbidden``: gpulab refuses
  launches from platforms nobody registered.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.lti.outbound import check_url
from app.domain.models import LtiPlatform
from worker.core.errors import Conflict, Forbidden, InvalidInput

MAX_ID_CHARS = 255
MAX_NAME_CHARS = 200


def _check_id(value: str, *, what: str) -> str:
    value = value.strip()
    if not value or len(value) > MAX_ID_CHARS:
        raise InvalidInput(f"the {what} must be 1 to {MAX_ID_CHARS} characters")
    return value


def check_issuer(issuer: str, *, allow_http: bool) -> str:
    """Return ``issuer`` if it is a platform issuer (an https URL without query or fragment)."""
    check_url(issuer, what="issuer", allow_http=allow_http)
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
) -> LtiPlatform:
    """Store a platform; raise ``InvalidInput`` for a malformed field, ``Conflict`` if it is registered already."""
    issuer = check_issuer(issuer, allow_http=allow_http)
    client_id = _check_id(client_id, what="client id")
    for url, what in ((auth_login_url, "authorisation URL"), (auth_token_url, "token URL"), (jwks_url, "JWKS URL")):
        check_url(url, what=what, allow_http=allow_http)
    if audience is not None:
        audience = _check_id(audience, what="token audience")
    deployments = list(dict.fromkeys(_check_id(d, what="deployment id") for d in deployment_ids))
    exists = select(LtiPlatform.id).where(LtiPlatform.issuer == issuer, LtiPlatform.client_id == client_id)
    if session.scalar(exists) is not None:
        raise Conflict(f"the platform {issuer} with client id {client_id} is registered already")
    platform = LtiPlatform(
        issuer=issuer,
        client_id=client_id,
        name=(name.strip() or urlsplit(issuer).netloc)[:MAX_NAME_CHARS],
        auth_login_url=auth_login_url,
        auth_token_url=auth_token_url,
        jwks_url=jwks_url,
        audience=audience,
        deployment_ids=deployments,
    )
    try:
        with session.begin_nested():  # a concurrent registration of the same client loses cleanly
            session.add(platform)
    except IntegrityError as exc:
        raise Conflict(f"the platform {issuer} with client id {client_id} is registered already") from exc
    return platform


def add_deployment(*, platform: LtiPlatform, deployment_id: str) -> None:
    """Let launches from ``deployment_id`` of ``platform`` in (no change if it is known)."""
    deployment_id = _check_id(deployment_id, what="deployment id")
    if deployment_id not in platform.deployment_ids:
        # A new list, not an in-place append: the JSON column only notices assignment.
        platform.deployment_ids = [*platform.deployment_ids, deployment_id]


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
