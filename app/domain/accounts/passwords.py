"""Passwords, users and login rate limiting (the cookie sessions and the CSRF rule are ``app.web.sessions``).

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
- ``LoginLimiter`` counts failed logins per e-mail and per client IP in an ``app.domain.platform.ratelimit.Limiter`` (on
  Redis, shared by every API process, when a broker is set): after ``login_max_failures`` failures inside
  ``login_window_s`` either key is refused with ``RateLimited``; a success forgives the e-mail only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from email_validator import EmailNotValidError, validate_email
from pwdlib import PasswordHash
from pwdlib.exceptions import UnknownHashError
from pwdlib.hashers import HasherProtocol
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.models import Role, User
from app.domain.platform.ratelimit import Limiter, Rule
from worker.core.errors import Conflict, InvalidInput, RateLimited

MAX_SCRYPT_N = 2**20  # refuse stored hashes that would make verification a denial of service
MAX_EMAIL_CHARS = 320
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024


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
