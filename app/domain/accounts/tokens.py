"""Personal access tokens of the API: made, listed, revoked, and turned back into their user.

Contract:
- A token is ``gpl_`` and 43 URL-safe characters (256 random bits). It is returned once, by ``create_token``;
  only its SHA-256 hash and its first ``PREFIX_CHARS`` characters are stored. A plain hash is enough: the
  secret is random and long, so there is nothing to guess that a slow password hash would protect.
- Scopes (``Scope``): ``read`` (GET the API as its owner may), ``submit`` (submit code, notebooks and quiz
  answers, run the examples, ask for a regrade), ``staff`` (every other call of the API, only for a user who
  is staff: a site instructor or admin, or an instructor or TA of a course). Which calls need which scope is
  decided where requests are authenticated (``app.web.deps``).
- At most ``MAX_ACTIVE_TOKENS`` unrevoked tokens per user (``Conflict`` beyond). ``revoke_token`` is for the
  owner only (another's token is ``NotFound``) and is idempotent; a revoked token stays listed with its time.
- ``user_for_token`` returns the active user and token row of an unrevoked token, or None; it records the use
  in ``last_used_at`` at most once per ``LAST_USED_RESOLUTION_S`` (so reading the API does not write on every
  call) and says whether it did, for the caller to commit. Functions take the session keyword-only and never
  commit.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.models import COURSE_STAFF, ApiToken, CourseMember, Role, User, utcnow
from worker.core.errors import Conflict, Forbidden, InvalidInput, NotFound

TOKEN_PREFIX = "gpl_"  # noqa: S105  (what every token starts with, not a secret)
PREFIX_CHARS = 12
MAX_TOKEN_CHARS = 100  # anything longer is no token of ours: refused before it is hashed
MAX_ACTIVE_TOKENS = 20
MAX_NAME_CHARS = 100
LAST_USED_RESOLUTION_S = 60.0


class Scope(enum.StrEnum):
    read = "read"
    submit = "submit"
    staff = "staff"


def hash_token(token: str) -> str:
    """Return the stored form of ``token``: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


def may_hold_staff(*, session: Session, user: User) -> bool:
    """Say whether ``user`` is staff somewhere: a site instructor or admin, or a course's instructor or TA."""
    if user.role in (Role.instructor, Role.admin):
        return True
    member = select(CourseMember.id).where(CourseMember.user_id == user.id, CourseMember.role.in_(COURSE_STAFF))
    return session.scalar(member.limit(1)) is not None


def _checked_name(name: str) -> str:
    name = " ".join(name.split())
    if not name:
        raise InvalidInput("give the token a name, e.g. the machine it is for")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"a token's name has at most {MAX_NAME_CHARS} characters")
    if any(not ch.isprintable() for ch in name):
        raise InvalidInput("a token's name holds only printable characters")
    return name


def create_token(*, session: Session, user: User, name: str, scopes: list[Scope]) -> tuple[ApiToken, str]:
    """Add a token for ``user``; return its row and the token itself (shown once, never stored)."""
    wanted = sorted(set(scopes))
    if not wanted:
        raise InvalidInput("choose at least one scope: read, submit or staff")
    if Scope.staff in wanted and not may_hold_staff(session=session, user=user):
        raise Forbidden("only staff (instructors, TAs, admins) may make a token with the staff scope")
    active = session.scalar(
        select(func.count()).select_from(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
    )
    if (active or 0) >= MAX_ACTIVE_TOKENS:
        raise Conflict(f"you have {MAX_ACTIVE_TOKENS} tokens already; revoke one you no longer use first")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        user_id=user.id,
        name=_checked_name(name),
        prefix=token[:PREFIX_CHARS],
        token_hash=hash_token(token),
        scopes=[scope.value for scope in wanted],
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    trail.record(
        session=session, action=Action.token_create, actor=user, subject_id=user.id, target=f"token {row.id}",
        after={"prefix": row.prefix, "scopes": row.scopes},
    )  # fmt: skip
    return row, token


def list_tokens(*, session: Session, user: User) -> list[ApiToken]:
    """Return ``user``'s tokens, unrevoked first, newest first."""
    stmt = (
        select(ApiToken)
        .where(ApiToken.user_id == user.id)
        .order_by(ApiToken.revoked_at.is_not(None), ApiToken.created_at.desc(), ApiToken.id.desc())
    )
    return list(session.scalars(stmt))


def revoke_token(*, session: Session, user: User, token_id: int) -> ApiToken:
    """Revoke ``user``'s token ``token_id`` (again: nothing changes); raise ``NotFound`` for anyone else's."""
    row = session.get(ApiToken, token_id)
    if row is None or row.user_id != user.id:
        raise NotFound(f"no token {token_id}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        trail.record(
            session=session, action=Action.token_revoke, actor=user, subject_id=user.id, target=f"token {row.id}",
            before={"prefix": row.prefix}, after={"revoked": True},
        )  # fmt: skip
    return row


def user_for_token(*, session: Session, token: str, now: datetime | None = None) -> tuple[User, ApiToken, bool] | None:
    """Return the active owner and row of ``token`` if it is unrevoked, and whether its last use was recorded."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS or "\x00" in token:
        return None
    row = session.execute(
        select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    ).one_or_none()
    if row is None or not row[1].is_active:
        return None
    api_token, user = row[0], row[1]
    now = now or utcnow()
    last = api_token.last_used_at
    if last is not None and last.tzinfo is None:  # SQLite gives naive UTC values back
        last = last.replace(tzinfo=now.tzinfo)
    stale = last is None or now - last >= timedelta(seconds=LAST_USED_RESOLUTION_S)
    if stale:
        api_token.last_used_at = now
    return user, api_token, stale
