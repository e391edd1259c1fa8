"""Cookie sessions and the CSRF rules: who a browser's request belongs to, and whether it may change anything.

Contract:
- A login stores ``uid``, a random per-login ``nonce`` and a fingerprint of the password hash in the signed
  session cookie ``gpulab_session``; changing the password or logging out ends that session. Logging out
  stores the nonce in ``RevokedSession`` (the database, so every process refuses it) until the cookie would
  have expired; ``user_from_session`` checks it in the same query that loads the user.
- ``CSRFMiddleware``: a state-changing ``/api`` request that carries the session cookie (and every login) must
  be ``Content-Type: application/json`` and, when the browser sends ``Origin``, come from this host.
- HTML forms (outside ``/api``) carry a per-session token: ``csrf_token(request)`` makes it (stored in the
  signed session, so a new login gets a new one), ``verify_csrf(request, token)`` raises ``Forbidden``.
- ``BodySizeLimitMiddleware`` takes an optional per-path-prefix limit (uploads need more than code does).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.types import Scope

from app.domain.models import RevokedSession, User, utcnow
from worker.core.errors import Forbidden

SESSION_COOKIE = "gpulab_session"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOGIN_PATH = "/api/auth/login"


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


# --- sessions ------------------------------------------------------------------------------------------------


def password_fingerprint(user: User) -> str:
    """Return a short digest of the stored hash, so a password change invalidates older sessions."""
    return hashlib.sha256(user.password_hash.encode()).hexdigest()[:16]


def start_session(request: Request, user: User) -> None:
    """Replace whatever session the request had with a fresh one for ``user``."""
    request.session.clear()
    request.session.update(
        {"uid": user.id, "nonce": secrets.token_urlsafe(16), "pwd": password_fingerprint(user), "iat": int(time.time())}
    )


def end_session(request: Request, *, session: Session, max_age_s: int) -> None:
    """Clear the request's session and revoke its nonce for every process until its cookie would expire."""
    nonce = request.session.get("nonce")
    request.session.clear()
    if isinstance(nonce, str):
        revoke_nonce(session=session, nonce=nonce, max_age_s=max_age_s)


def revoke_nonce(*, session: Session, nonce: str, max_age_s: int) -> None:
    """Store ``nonce`` as revoked until ``max_age_s`` from now, and purge rows that have expired."""
    now = utcnow()
    # Logouts are rare, so purging on each one keeps the table at about the logouts of one cookie lifetime.
    session.execute(delete(RevokedSession).where(RevokedSession.expires_at < now))
    if session.get(RevokedSession, nonce) is not None:
        return
    try:
        with session.begin_nested():  # a copy of the cookie logged out at the same moment elsewhere
            session.add(RevokedSession(nonce=nonce, expires_at=now + timedelta(seconds=max_age_s)))
    except IntegrityError:
        pass


def user_from_session(request: Request, *, session: Session) -> User | None:
    """Return the active user this request's session belongs to, or None (and drop a stale session)."""
    uid, nonce, fingerprint = (request.session.get(k) for k in ("uid", "nonce", "pwd"))
    if not isinstance(uid, int) or not isinstance(nonce, str) or not isinstance(fingerprint, str):
        if request.session:
            request.session.clear()
        return None
    # One round trip: the user by primary key, and whether the nonce is revoked (a primary-key probe too).
    # An expired row needs no check: the signed cookie of its session has expired with it.
    revoked = select(RevokedSession.nonce).where(RevokedSession.nonce == nonce).exists()
    row = session.execute(select(User, revoked).where(User.id == uid)).one_or_none()
    user, is_revoked = (row[0], row[1]) if row is not None else (None, False)
    if (
        user is None
        or not user.is_active
        or is_revoked
        or not hmac.compare_digest(fingerprint, password_fingerprint(user))
    ):
        request.session.clear()
        return None
    return user


# --- CSRF and security headers ------------------------------------------------------------------------------


def header(scope: Scope, name: bytes) -> str | None:
    """Return the first value of the request header ``name`` (lower-case bytes), or None."""
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def csrf_problem(scope: Scope) -> str | None:
    """Return why this request must be refused as a possible cross-site request forgery, or None."""
    path = scope.get("path", "")
    if scope.get("method") not in UNSAFE_METHODS or not path.startswith("/api/"):
        return None
    cookies = header(scope, b"cookie") or ""
    has_session = any(part.strip().startswith(SESSION_COOKIE + "=") for part in cookies.split(";"))
    if not has_session and path != LOGIN_PATH:
        return None  # no ambient credentials to abuse; login is checked too, against login CSRF
    media_type = (header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        return "refused as possible cross-site request forgery: send the request as Content-Type: application/json"
    origin = header(scope, b"origin")
    if origin is not None:
        host = (header(scope, b"host") or "").lower()
        origin_host = origin.split("://", 1)[-1].rstrip("/").lower() if "://" in origin else None
        if origin_host != host:
            return f"refused as possible cross-site request forgery: Origin {origin!r} does not match this site"
    if header(scope, b"sec-fetch-site") == "cross-site":
        return "refused as possible cross-site request forgery: the browser marked it cross-site"
    return None


CSRF_SESSION_KEY = "csrf"


def csrf_token(request: Request) -> str:
    """Return this session's form token, creating it on first use."""
    token = request.session.get(CSRF_SESSION_KEY)
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        request.session[CSRF_SESSION_KEY] = token
    return token


def verify_csrf(request: Request, token: str | None) -> None:
    """Raise ``Forbidden`` unless ``token`` is this session's form token."""
    expected = request.session.get(CSRF_SESSION_KEY)
    if not isinstance(expected, str) or not token or not hmac.compare_digest(expected, token):
        raise Forbidden("the form expired or did not come from this site; reload the page and try again")
