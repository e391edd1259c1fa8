"""The OIDC third-party initiated login that starts every launch, and the state that binds it to the browser.

Contract:
- ``login_request(params)`` reads the platform's login initiation (``iss``, ``login_hint``, ``target_link_uri``;
  optional ``lti_message_hint``, ``client_id``, ``lti_deployment_id``), from the query or the form alike;
  a missing one is ``InvalidInput``.
- ``begin(session=..., login=..., tool=...)`` finds the registered platform (``platforms.find``: unknown is
  ``Forbidden``), refuses a target link that is not on gpulab (``InvalidInput``: no open redirect), and returns
  the ``Pending`` launch (fresh random ``state`` and ``nonce``) with the URL of the authentication request to
  send the browser to: the platform's authorisation endpoint with ``scope=openid``, ``response_type=id_token``,
  ``response_mode=form_post``, ``prompt=none``, gpulab's ``client_id`` and ``redirect_uri`` (the launch
  endpoint), the hints, state and nonce. The login's ``lti_deployment_id`` is not checked here: anyone can send
  a login initiation, so the deployment is judged on the signed launch (``app.domain.lti.launch``), which
  refuses an unknown one and lets the admins see it.
- The state is bound to the browser by a cookie (``cookie_name(state)``: one per login, so several tabs can
  launch at once) holding ``seal(pending)``: signed with the app's secret (itsdangerous), stamped, so
  ``unseal`` refuses it (``Forbidden``) when forged, older than the allowed age, or for another state. The
  nonce travels inside it and must come back in the id_token (``app.domain.lti.launch``).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from sqlalchemy.orm import Session

from app.domain.lti import platforms
from app.domain.lti.toolconfig import ToolUrls, is_on_tool
from app.domain.models import LtiPlatform
from worker.core.errors import Forbidden, InvalidInput

COOKIE_PREFIX = "gpulab_lti_"
SALT = "gpulab-lti-state"
MAX_PARAM_CHARS = 2048
REQUIRED = ("iss", "login_hint", "target_link_uri")
OPTIONAL = ("lti_message_hint", "client_id", "lti_deployment_id")


@dataclass(frozen=True)
class LoginRequest:
    """A platform's login initiation."""

    iss: str
    login_hint: str
    target_link_uri: str
    lti_message_hint: str | None = None
    client_id: str | None = None
    lti_deployment_id: str | None = None


@dataclass(frozen=True)
class Pending:
    """A launch between the login and the id_token post: what the state cookie carries."""

    state: str
    nonce: str
    platform_id: int


def login_request(params: Mapping[str, str]) -> LoginRequest:
    """Return the login initiation in ``params``, or raise ``InvalidInput`` naming what is missing."""
    values = {name: params.get(name, "").strip() for name in (*REQUIRED, *OPTIONAL)}
    missing = [name for name in REQUIRED if not values[name]]
    if missing:
        raise InvalidInput(f"the platform's login request lacks {', '.join(missing)}")
    too_long = [name for name, value in values.items() if len(value) > MAX_PARAM_CHARS]
    if too_long:
        raise InvalidInput(f"the platform's login request has {', '.join(too_long)} over {MAX_PARAM_CHARS} characters")
    return LoginRequest(
        iss=values["iss"],
        login_hint=values["login_hint"],
        target_link_uri=values["target_link_uri"],
        **{name: values[name] or None for name in OPTIONAL},
    )


def _authentication_url(platform: LtiPlatform, login: LoginRequest, pending: Pending, tool: ToolUrls) -> str:
    params = {
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "client_id": platform.client_id,
        "redirect_uri": tool.launch,
        "login_hint": login.login_hint,
        "state": pending.state,
        "nonce": pending.nonce,
    }
    if login.lti_message_hint is not None:
        params["lti_message_hint"] = login.lti_message_hint
    separator = "&" if "?" in platform.auth_login_url else "?"
    return platform.auth_login_url + separator + urlencode(params)


def begin(*, session: Session, login: LoginRequest, tool: ToolUrls) -> tuple[Pending, str]:
    """Start a launch: return it pending, and the platform URL to send the browser to."""
    platform = platforms.find(session=session, issuer=login.iss, client_id=login.client_id)
    if not is_on_tool(login.target_link_uri, tool):
        raise InvalidInput(f"the launch's target {login.target_link_uri!r} is not on gpulab ({tool.base})")
    pending = Pending(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32), platform_id=platform.id)
    return pending, _authentication_url(platform, login, pending, tool)


def cookie_name(state: str) -> str:
    """Return the name of the cookie that holds the launch with ``state``."""
    return COOKIE_PREFIX + state


def seal(pending: Pending, *, secret: str) -> str:
    """Return ``pending`` signed and time-stamped, for the state cookie."""
    serializer = URLSafeTimedSerializer(secret, salt=SALT)
    return serializer.dumps([pending.state, pending.nonce, pending.platform_id])


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())  # bytes: compare_digest refuses non-ASCII str


def unseal(value: str | None, *, secret: str, state: str, max_age_s: int) -> Pending:
    """Return the pending launch in a state cookie, or raise ``Forbidden`` (missing, forged, expired, not ours)."""
    if not value:
        raise Forbidden(
            "this launch did not start in this browser, or its start was too long ago (no state cookie); "
            "launch again from the platform"
        )
    serializer = URLSafeTimedSerializer(secret, salt=SALT)
    try:
        found = serializer.loads(value, max_age=max_age_s)
    except SignatureExpired as exc:
        raise Forbidden("this launch took too long (its state expired); launch again from the platform") from exc
    except BadSignature as exc:
        raise Forbidden("the launch's state cookie is not gpulab's; launch again from the platform") from exc
    match found:
        case [str(sealed_state), str(nonce), int(platform_id)] if _same(sealed_state, state):
            return Pending(state=state, nonce=nonce, platform_id=platform_id)
    raise Forbidden("the launch's state does not match the one this browser started; launch again from the platform")
