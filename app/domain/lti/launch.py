"""Checking the id_token a platform posts to gpulab's launch endpoint (LTI 1.3 Core and Security Framework).

Contract: ``verify(session=..., pending=..., id_token=..., keys=..., leeway_s=...)`` returns the ``Launch`` or
raises, in this order:
- ``Forbidden``: the platform the login started with is no longer registered.
- ``Unauthorized``, the token cannot be trusted: not a compact JWS; unsigned (``alg: none``) or signed with
  anything but RS256; a ``kid`` the platform does not publish even after refetching its keys
  (``PlatformKeys``); a signature that does not verify; ``iss`` not the platform's issuer; ``aud`` without
  gpulab's client id, or several audiences without ``azp`` (an ``azp`` must be gpulab's client id); ``exp``
  passed or ``iat`` in the future (beyond ``leeway_s`` either way; both are required); ``nonce`` not the one
  this browser's login made.
- ``DeploymentRefused`` (a ``Forbidden``): the ``deployment_id`` is not one registered for the platform. It
  carries the platform and the deployment id, so the caller can note the refusal for the admins
  (``platforms.note_refused``, after rolling back): only a token that passed every check above gets here, so
  only deployments the platform itself vouched for are noted. With the platform's ``accept_new_deployments``
  on, a new deployment id (usable as one: ``platforms.usable_deployment_id``) is added instead and the launch
  goes on (the caller's commit keeps it).
- ``InvalidInput``: not an ``LtiResourceLinkRequest`` or ``LtiDeepLinkingRequest`` of version 1.3.0, no ``sub``
  (anonymous launch), no resource link id or no target link (resource link launches; a deep linking request
  has neither, ``resource_link_id`` is then empty), malformed roles or context claims. ``Launch.message_type``
  says which; the deep linking settings claim is read by ``app.domain.lti.deep_linking``.
- ``Unauthorized``: the nonce was used before (a replayed token). Only a launch that passed every other check
  spends its nonce: ``LtiNonce`` keeps it until the token expires (plus the leeway, at most a day: a replay also
  needs the state cookie, which lives an hour at most), and expired ones are purged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from joserfc import jws
from joserfc.errors import JoseError
from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.lti import platforms
from app.domain.lti import vocabulary as v
from app.domain.lti.keys import ALGORITHM
from app.domain.lti.oidc import Pending
from app.domain.lti.platform_keys import PlatformKeys
from app.domain.models import LtiNonce, LtiPlatform, utcnow
from worker.core.errors import Forbidden, InvalidInput, Unauthorized

MAX_ID_CHARS = 255
MAX_TOKEN_CHARS = 64 * 1024
MAX_NONCE_KEPT_S = 24 * 3600.0


class DeploymentRefused(Forbidden):
    """A verified launch from a deployment the platform has not registered here."""

    def __init__(self, message: str, *, platform_id: int, deployment_id: str) -> None:
        super().__init__(message)
        self.platform_id = platform_id
        self.deployment_id = deployment_id


@dataclass(frozen=True)
class Launch:
    """A verified resource link launch: who, from which course and link, with which roles."""

    platform: LtiPlatform
    deployment_id: str
    sub: str
    email: str | None
    name: str
    roles: tuple[str, ...]
    context_id: str | None
    context_title: str
    context_label: str
    resource_link_id: str
    resource_link_title: str
    target_link_uri: str
    lineitem_url: str | None
    claims: dict[str, Any]
    message_type: str = v.RESOURCE_LINK_REQUEST


def _text(claims: dict[str, Any], name: str) -> str:
    value = claims.get(name)
    return value.strip() if isinstance(value, str) else ""


def _identifier(value: object, *, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise InvalidInput(f"the launch has no usable {what} (1 to {MAX_ID_CHARS} characters)")
    return value


def _signed_claims(id_token: str, platform: LtiPlatform, keys: PlatformKeys) -> dict[str, Any]:
    """Return the claims of ``id_token`` once its RS256 signature verifies against the platform's keys."""
    if not id_token or len(id_token) > MAX_TOKEN_CHARS:
        raise Unauthorized("the launch carries no id_token, or one too large to be real")
    try:
        token = jws.extract_compact(id_token.encode("utf-8"))
        header = token.headers()
    except (JoseError, ValueError, TypeError, UnicodeError) as exc:
        raise Unauthorized("the launch's id_token is not a signed JWT") from exc
    alg = header.get("alg")
    if alg == "none":
        raise Unauthorized("the launch's id_token is unsigned (alg: none); gpulab only accepts signed tokens")
    if alg != ALGORITHM:
        raise Unauthorized(f"the launch's id_token is signed with {alg!r}; LTI 1.3 requires {ALGORITHM}")
    kid = header.get("kid")
    key = keys.key_for(platform.jwks_url, kid if isinstance(kid, str) and kid else None)
    try:
        valid = jws.validate_compact(token, key, algorithms=[ALGORITHM])
        claims = json.loads(token.payload or b"")
    except (JoseError, ValueError, TypeError) as exc:
        raise Unauthorized("the launch's id_token signature does not verify") from exc
    if not valid:
        raise Unauthorized("the launch's id_token signature does not verify with the platform's key")
    if not isinstance(claims, dict):
        raise Unauthorized("the launch's id_token carries no claims object")
    return claims


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    # Python's json reads NaN and Infinity, which no real NumericDate is (an exp of NaN would never expire), and
    # integers too large for a float.
    try:
        if not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value):
            return float(value)
    except OverflowError:
        pass
    raise Unauthorized(f"the launch's id_token has no valid {name} time")


def _check_token(
    claims: dict[str, Any], platform: LtiPlatform, pending: Pending, *, now_s: float, leeway_s: int
) -> None:
    """Raise ``Unauthorized`` unless the token is from this platform, for gpulab, current and this browser's."""
    if claims.get("iss") != platform.issuer:
        raise Unauthorized(f"the launch's id_token is from {claims.get('iss')!r}, not from {platform.issuer}")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if platform.client_id not in audiences:
        raise Unauthorized(f"the launch's id_token is meant for another tool (audience {audience!r})")
    azp = claims.get("azp")
    if (len(audiences) > 1 and azp is None) or (azp is not None and azp != platform.client_id):
        raise Unauthorized("the launch's id_token names several audiences but is not authorised for gpulab (azp)")
    if now_s >= _number(claims, "exp") + leeway_s:
        raise Unauthorized("the launch's id_token has expired; launch again from the platform")
    if _number(claims, "iat") > now_s + leeway_s:
        raise Unauthorized("the launch's id_token was issued in the future; check the platform's clock")
    nonce = claims.get("nonce")
    if not isinstance(nonce, str) or nonce != pending.nonce:
        raise Unauthorized("the launch's id_token was not issued for the login this browser started (nonce)")


def _launch(claims: dict[str, Any], platform: LtiPlatform) -> Launch:
    """Return the launch ``claims`` describe, or raise ``Forbidden``/``InvalidInput`` (see the module contract)."""
    deployment_id = claims.get(v.DEPLOYMENT_ID)
    if not platforms.usable_deployment_id(deployment_id):
        raise Forbidden(f"the launch names no usable deployment (1 to {MAX_ID_CHARS} characters, no control ones)")
    if deployment_id not in platform.deployment_ids:
        if not platform.accept_new_deployments:
            raise DeploymentRefused(
                f"the deployment {deployment_id!r} of {platform.name} is not registered with gpulab; a gpulab admin "
                "can accept it on the LTI platforms page, where it is listed now",
                platform_id=platform.id,
                deployment_id=deployment_id,
            )
        platforms.add_deployment(platform=platform, deployment_id=deployment_id)
    message_type = claims.get(v.MESSAGE_TYPE)
    deep_linking = message_type == v.DEEP_LINKING_REQUEST
    if message_type != v.RESOURCE_LINK_REQUEST and not deep_linking:
        raise InvalidInput(f"gpulab handles resource link launches and deep linking only, not {message_type!r}")
    if claims.get(v.VERSION) != v.LTI_VERSION:
        raise InvalidInput(f"gpulab speaks LTI {v.LTI_VERSION}, the launch says {claims.get(v.VERSION)!r}")
    sub = _identifier(claims.get("sub"), what="user (sub): anonymous launches are not supported")
    link = claims.get(v.RESOURCE_LINK)
    target = claims.get(v.TARGET_LINK_URI)
    if deep_linking:  # no resource link yet: the instructor is about to pick what the links will be
        link, link_id, target = None, "", target if isinstance(target, str) else ""
    else:
        link_id = _identifier(link.get("id") if isinstance(link, dict) else None, what="resource link id")
    if not isinstance(target, str) or (not target and not deep_linking):
        raise InvalidInput("the launch has no target link")
    roles = claims.get(v.ROLES, [])
    if not isinstance(roles, list):
        raise InvalidInput("the launch's roles claim is not a list")
    context = claims.get(v.CONTEXT)
    if context is not None and not isinstance(context, dict):
        raise InvalidInput("the launch's context claim is not an object")
    context = context or {}
    context_id = _identifier(context["id"], what="context id") if "id" in context else None
    ags = claims.get(v.AGS_ENDPOINT)
    lineitem = ags.get("lineitem") if isinstance(ags, dict) else None
    name = _text(claims, "name") or " ".join(filter(None, (_text(claims, "given_name"), _text(claims, "family_name"))))
    return Launch(
        platform=platform,
        deployment_id=deployment_id,
        sub=sub,
        email=_text(claims, "email") or None,
        name=name,
        roles=tuple(role for role in roles if isinstance(role, str)),
        context_id=context_id,
        context_title=_text(context, "title") or _text(context, "label"),
        context_label=_text(context, "label"),
        resource_link_id=link_id,
        resource_link_title=_text(link, "title") if isinstance(link, dict) else "",
        target_link_uri=target,
        lineitem_url=lineitem if isinstance(lineitem, str) and lineitem else None,
        claims=claims,
        message_type=v.DEEP_LINKING_REQUEST if deep_linking else v.RESOURCE_LINK_REQUEST,
    )


def spend_nonce(*, session: Session, platform: LtiPlatform, nonce: str, expires_at: datetime) -> None:
    """Record ``nonce`` as used with ``platform`` until ``expires_at``; raise ``Unauthorized`` if it was used."""
    session.execute(delete(LtiNonce).where(LtiNonce.expires_at < utcnow()))
    replayed = Unauthorized("this launch was used before (its nonce is spent); launch again from the platform")
    if session.get(LtiNonce, (platform.id, nonce)) is not None:
        raise replayed
    try:
        with session.begin_nested():  # the same token posted twice at once: one of them wins
            session.add(LtiNonce(platform_id=platform.id, nonce=nonce, expires_at=expires_at))
    except IntegrityError as exc:
        raise replayed from exc


def verify(
    *,
    session: Session,
    pending: Pending,
    id_token: str,
    keys: PlatformKeys,
    leeway_s: int,
    now: datetime | None = None,
) -> Launch:
    """Return the launch ``id_token`` carries once every check passed (see the module contract)."""
    platform = session.get(LtiPlatform, pending.platform_id)
    if platform is None:
        raise Forbidden("the platform this launch started from is no longer registered with gpulab")
    now = now or utcnow()
    claims = _signed_claims(id_token, platform, keys)
    _check_token(claims, platform, pending, now_s=now.timestamp(), leeway_s=leeway_s)
    launch = _launch(claims, platform)
    # Kept until the token expires, but never more than a day: a replay also needs the state cookie, which lives
    # an hour at most, and an absurd exp must not overflow a datetime.
    keep_s = min(max(_number(claims, "exp") + leeway_s - now.timestamp(), 0.0), MAX_NONCE_KEPT_S)
    spend_nonce(session=session, platform=platform, nonce=pending.nonce, expires_at=now + timedelta(seconds=keep_s))
    return launch
