"""Passwords, users, login rate limiting, cookie sessions and the CSRF rule of the JSON API.

Contract:
- Passwords are hashed with argon2id (pwdlib, argon2-cffi's RFC 9106 low-memory profile). Hashes of the older
  ``scrypt$n$r$p$salt$hash`` format still verify (``LegacyScryptHasher``, which refuses absurd cost parameters);
  ``authenticate`` replaces such a hash, or an argon2 one with other cost parameters, by a current one on a
  successful login (the new hash changes the session fingerprint, so that user's other sessions end once).
  Malformed or unknown hashes never match.
- E-mail addresses are stored and looked up as ``normalise_email`` spells them (stripped, lower-cased); a new
  one must also pass ``check_email`` (email-validator's syntax rules, no DNS: special-use domains such as
  ``.local``, ``.test`` or ``localhost`` are refused), which raises ``InvalidInput`` saying why.
- ``change_password`` checks the current password, the new one twice and the length rule (``InvalidInput``
  saying which failed) and clears ``must_change_password``: an account given a one-time password (made
  without one by ``accounts.create_account``, CSV enrollment included, or reset by an admin) carries that mark
  until its owner chooses their own (``app.web.deps.get_current_user`` enforces it).
- ``create_user``/``authenticate``/``change_password`` take the session keyword-only and never commit: the
  caller commits, also the upgraded hash a login leaves on the user.
- ``LoginLimiter`` counts failed logins per e-mail and per client IP in an ``app.domain.ratelimit.Limiter`` (on
  Redis, shared by every API process, when a broker is set): after ``login_max_failures`` failures inside
  ``login_window_s`` either key is refused with ``RateLimited``; a success forgives the e-mail only.
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

import base64
import hashlib
import hmac
import secrets
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from email_validator import EmailNotValidError, validate_email
from pwdlib import PasswordHash
from pwdlib.exceptions import UnknownHashError
from pwdlib.hashers import HasherProtocol
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.models import RevokedSession, Role, User, utcnow
from app.domain.ratelimit import Limiter, Rule
from worker.core.errors import Conflict, Forbidden, InvalidInput, RateLimited

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Scope

SESSION_COOKIE = "gpulab_session"
MAX_SCRYPT_N = 2**20  # refuse stored hashes that would make verification a denial of service
MAX_EMAIL_CHARS = 320
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOGIN_PATH = "/api/auth/login"


# --- passwords -----------------------------------------------------------------------------------------------


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _as_bytes(value: str | bytes) -> bytes:
    # surrogatepass: a lone surrogate (valid JSON) hashes as it always did instead of failing to encode.
    return value.encode("utf-8", errors="surrogatepass") if isinstance(value, str) else value


class LegacyScryptHasher(HasherProtocol):
    """Verify the ``scrypt$n$r$p$salt$hash`` hashes gpulab stored before argon2; never make new ones.

    Kept by hand (pwdlib has no scrypt hasher) only to let existing hashes verify until their owners log in
    and ``authenticate`` replaces them; it can go once no stored hash starts with ``scrypt$``.
    """

    # The argument names (``hash`` too) are pwdlib's protocol's.
    @classmethod
    def identify(cls, hash: str | bytes) -> bool:
        return _as_bytes(hash).startswith(b"scrypt$")

    def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
        raise NotImplementedError("scrypt hashes are only verified; new hashes are argon2")

    def verify(self, password: str | bytes, hash: str | bytes) -> bool:
        try:
            scheme, n_s, r_s, p_s, salt_s, hash_s = _as_bytes(hash).decode("ascii").split("$")
            n, r, p = int(n_s), int(r_s), int(p_s)
            salt, expected = _unb64(salt_s), _unb64(hash_s)
        except ValueError:  # UnicodeDecodeError and binascii.Error are ValueErrors too
            return False
        sane = 2 <= n <= MAX_SCRYPT_N and 1 <= r <= 32 and 1 <= p <= 4 and 16 <= len(expected) <= 64
        if scheme != "scrypt" or not sane:
            return False
        # maxmem must cover 128*n*r bytes plus slack, or OpenSSL refuses larger cost parameters.
        actual = hashlib.scrypt(
            _as_bytes(password), salt=salt, n=n, r=r, p=p, dklen=len(expected), maxmem=256 * n * r + 1024 * 1024
        )
        return hmac.compare_digest(actual, expected)

    def check_needs_rehash(self, hash: str | bytes) -> bool:
        return True


# The first hasher makes every new hash; the others only verify (and so always ask for a rehash).
PASSWORDS = PasswordHash((Argon2Hasher(), LegacyScryptHasher()))


def hash_password(password: str) -> str:
    """Hash ``password`` with a fresh random salt."""
    return PASSWORDS.hash(_as_bytes(password))


def check_password(password: str, encoded: str) -> tuple[bool, str | None]:
    """Say whether ``password`` matches ``encoded``, and return the hash to store instead when it should change."""
    try:
        return PASSWORDS.verify_and_update(_as_bytes(password), encoded)
    except UnknownHashError:
        return False, None


def verify_password(password: str, encoded: str) -> bool:
    """Say whether ``password`` matches ``encoded``; malformed hashes never match."""
    return check_password(password, encoded)[0]


# Verified against when the e-mail is unknown, so both failures cost the same time.
_DUMMY_HASH = hash_password(secrets.token_urlsafe(16))


# --- users ---------------------------------------------------------------------------------------------------


def normalise_email(email: str) -> str:
    """Return ``email`` as it is stored and looked up (the spelling accounts have always had)."""
    return email.strip().lower()


def check_email(email: str) -> str:
    """Return ``email`` normalised, or raise ``InvalidInput`` if it is not an address a new account may have."""
    email = normalise_email(email)
    if len(email) > MAX_EMAIL_CHARS:
        raise InvalidInput(f"the e-mail address is longer than {MAX_EMAIL_CHARS} characters")
    try:
        # No deliverability check: it would query DNS, and an address on an intranet domain is still fine.
        validate_email(email, check_deliverability=False, strict=True)
    except EmailNotValidError as exc:
        raise InvalidInput(f"{email!r} is not a valid e-mail address: {exc}") from exc
    return email


def create_user(*, session: Session, email: str, password: str, role: Role = Role.learner) -> User:
    """Add a user with a hashed password; raise ``InvalidInput`` or ``Conflict`` (duplicate e-mail)."""
    email = check_email(email)
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise InvalidInput(f"the password must be {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters long")
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        raise Conflict(f"a user with e-mail {email} already exists")
    user = User(email=email, password_hash=hash_password(password), role=Role(role), is_active=True)
    try:
        # A savepoint, so losing a race with a concurrent insert leaves the caller's transaction usable.
        with session.begin_nested():
            session.add(user)
    except IntegrityError as exc:
        raise Conflict(f"a user with e-mail {email} already exists") from exc
    return user


def authenticate(*, session: Session, email: str, password: str) -> User | None:
    """Return the active user with these credentials, or None; upgrade an outdated hash (the caller commits)."""
    user = session.scalar(select(User).where(User.email == normalise_email(email)))
    if user is None:
        verify_password(password, _DUMMY_HASH)
        return None
    matches, new_hash = check_password(password, user.password_hash)
    if not matches or not user.is_active:
        return None
    if new_hash is not None:
        user.password_hash = new_hash
    return user


def change_password(*, session: Session, user: User, current: str, new: str, repeated: str) -> None:
    """Replace ``user``'s password by ``new`` after checking ``current``; the one-time mark goes with the old one.

    The new hash changes the session fingerprint, so every other session of ``user`` ends (the caller starts a
    fresh one for this request).
    """
    if not check_password(current, user.password_hash)[0]:
        raise InvalidInput("the current password is wrong")
    if new != repeated:
        raise InvalidInput("the two new passwords differ: type the same one twice")
    if not MIN_PASSWORD_CHARS <= len(new) <= MAX_PASSWORD_CHARS:
        raise InvalidInput(f"the new password must be {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters long")
    if new == current:
        raise InvalidInput("the new password is the current one: choose another")
    user.password_hash = hash_password(new)
    user.must_change_password = False


# --- login rate limiting -------------------------------------------------------------------------------------


class LoginLimiter:
    """Failed logins counted per e-mail and per client IP in a ``Limiter`` (shared by processes on Redis)."""

    def __init__(self, max_failures: int, window_s: float, limiter: Limiter | None = None) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.rule = Rule("login-failures", max_failures, window_s)
        self.limiter = limiter or Limiter()

    @staticmethod
    def _keys(email: str, ip: str) -> tuple[tuple[str, str], tuple[str, str]]:
        return ("email", normalise_email(email)), ("ip", ip)

    def check(self, *, email: str, ip: str) -> None:
        """Raise ``RateLimited`` if the e-mail or the IP has used up its failures."""
        used_up = [key for key in self._keys(email, ip) if not self.limiter.allowed(self.rule, *key)]
        if used_up:
            seconds = max(self.limiter.retry_after_s(self.rule, *key) for key in used_up)
            raise RateLimited(f"too many failed logins; try again in {seconds} s", retry_after_s=seconds)

    def record_failure(self, *, email: str, ip: str) -> None:
        for key in self._keys(email, ip):
            self.limiter.hit(self.rule, *key)

    def record_success(self, *, email: str) -> None:
        # Only the e-mail is forgiven: clearing the IP too would let one attacker reset it with their own account.
        self.limiter.clear(self.rule, *self._keys(email, "")[0])


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
