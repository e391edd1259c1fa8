"""Access tokens for the LTI Advantage services (AGS scores, NRPS rosters): what gpulab shows a platform's APIs.

Contract:
- ``access_token(session=..., platform=..., http=..., scope=...)`` returns a bearer token for ``scope`` on
  ``platform``, got by the OAuth 2 client-credentials grant with a JWT client assertion (RFC 7523, the 1EdTech
  Security Framework) signed by gpulab's current key (``keys.sign``: ``iss`` = ``sub`` = the client id, ``aud``
  = the platform's token audience or token URL, ``iat``, ``exp`` five minutes on, a fresh ``jti``), posted as a
  form to the platform's token URL with ``Accept: application/json``. The token is cached per process and per
  (platform, client id, token URL, scope) until ``TOKEN_MARGIN_S`` before its ``expires_in`` (an hour when the
  answer has none). Anything short of a token (an unreachable endpoint, a non-2xx, no JSON, no
  ``access_token``) raises ``InvalidInput`` saying why; nothing is cached then.
- ``forget(platform=..., scope=...)`` drops one cached token (a service answered 401 with it);
  ``forget_tokens()`` drops them all. ``http`` is the caller's ``httpx.Client`` (its timeout).
"""

from __future__ import annotations

import secrets
import time

import httpx
from sqlalchemy.orm import Session

from app.domain.lti import keys
from app.domain.models import LtiPlatform
from worker.core.errors import InvalidInput

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_LIFETIME_S = 300
TOKEN_MARGIN_S = 30  # a cached token is renewed this long before it expires
DEFAULT_TOKEN_LIFETIME_S = 3600  # when the token answer has no expires_in

_tokens: dict[tuple[int, str, str, str], tuple[str, float]] = {}  # (platform, client, URL, scope) -> (token, expiry)


def _key(platform: LtiPlatform, scope: str) -> tuple[int, str, str, str]:
    return (platform.id, platform.client_id, platform.auth_token_url, scope)


def access_token(*, session: Session, platform: LtiPlatform, http: httpx.Client, scope: str) -> str:
    """Return an access token for ``scope`` on ``platform`` (cached), or raise ``InvalidInput`` saying why not."""
    cached = _tokens.get(_key(platform, scope))
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    issued = int(time.time())
    assertion = keys.sign(
        session=session,
        claims={
            "iss": platform.client_id,
            "sub": platform.client_id,
            "aud": platform.audience or platform.auth_token_url,
            "iat": issued,
            "exp": issued + ASSERTION_LIFETIME_S,
            "jti": secrets.token_urlsafe(16),
        },
    )
    form = {
        "grant_type": "client_credentials",
        "client_assertion_type": ASSERTION_TYPE,
        "client_assertion": assertion,
        "scope": scope,
    }
    try:
        response = http.post(platform.auth_token_url, data=form, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise InvalidInput(f"could not reach the token endpoint: {exc.__class__.__name__}: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise InvalidInput(f"the token endpoint answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        answer = response.json()
    except ValueError as exc:
        raise InvalidInput("the token endpoint did not answer JSON") from exc
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise InvalidInput("the token endpoint answered no access_token")
    lifetime = answer.get("expires_in", DEFAULT_TOKEN_LIFETIME_S)
    lifetime_s = float(lifetime) if isinstance(lifetime, int | float) else float(DEFAULT_TOKEN_LIFETIME_S)
    _tokens[_key(platform, scope)] = (token, time.monotonic() + max(0.0, lifetime_s - TOKEN_MARGIN_S))
    return token


def forget(*, platform: LtiPlatform, scope: str) -> None:
    """Drop the cached token of ``scope`` on ``platform`` (the next call asks again)."""
    _tokens.pop(_key(platform, scope), None)


def forget_tokens() -> None:
    """Drop every cached access token."""
    _tokens.clear()
