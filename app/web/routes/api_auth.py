"""``/api/auth``: log in (rate-limited), log out, and who am I.

Contract: a failed login answers 401 "wrong email or password" whether or not the e-mail exists, and counts
against the e-mail and the client IP; a refused one answers 429 with Retry-After, before the password is
checked. A successful login starts a fresh session (a new cookie), so a planted session id never carries over.
``POST /password`` changes my password (422 saying what is wrong); an account with a one-time password (CSV
enrollment, an admin's reset) answers every other authenticated operation but ``GET /me`` with the 403 problem
``password-change-required`` until it has.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.domain.accounts.passwords import MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS, authenticate, change_password
from app.web.deps import LoggedInUser, LoginLimiterDep, NoTokenDep, SessionDep, SettingsDep
from app.web.errors import problem_responses
from app.web.schemas.auth import LoginIn, MeOut
from app.web.sessions import client_ip, end_session, start_session
from worker.core.errors import Unauthorized

router = APIRouter(prefix="/api/auth", tags=["auth"])


TOKEN_REFUSED = {403: "An access token was sent: tokens never log in or out (use the password and the cookie)"}
LOGIN_ERRORS = problem_responses(
    401,
    403,
    429,
    described={
        401: "Wrong e-mail or password",
        429: "Too many failed logins for this e-mail or client",
        **TOKEN_REFUSED,
    },
)


@router.post("/login", responses=LOGIN_ERRORS, dependencies=[NoTokenDep])
def login(body: LoginIn, request: Request, session: SessionDep, limiter: LoginLimiterDep) -> MeOut:
    """Log in with e-mail and password; sets the session cookie."""
    ip = client_ip(request)
    limiter.check(email=body.email, ip=ip)
    # No account has a NUL in its e-mail (PostgreSQL text cannot hold one), and looking it up would fail.
    user = None if "\x00" in body.email else authenticate(session=session, email=body.email, password=body.password)
    if user is None:
        limiter.record_failure(email=body.email, ip=ip)
        raise Unauthorized("wrong email or password")
    limiter.record_success(email=body.email)
    session.commit()  # keeps a password hash that authenticate upgraded (the session cookie is bound to it)
    start_session(request, user)
    return MeOut.of(user)


@router.post(
    "/logout", status_code=204, responses=problem_responses(403, described=TOKEN_REFUSED), dependencies=[NoTokenDep]
)
def logout(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """End this session (also for anyone holding a copy of its cookie, on every server process)."""
    end_session(request, session=session, max_age_s=settings.session_max_age_s)
    session.commit()
    return Response(status_code=204)


class PasswordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    current: str = Field(max_length=1024)
    new: str = Field(max_length=1024, description=f"{MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters")
    repeated: str = Field(max_length=1024, description="the new password again")


@router.post(
    "/password",
    status_code=204,
    responses=problem_responses(
        422, described={422: "The current password is wrong, the two new ones differ, or the new one breaks a rule"}
    ),
)
def change_my_password(body: PasswordIn, request: Request, user: LoggedInUser, session: SessionDep) -> Response:
    """Change my password (also a one-time one, which must be changed first); my other sessions end."""
    change_password(session=session, user=user, current=body.current, new=body.new, repeated=body.repeated)
    session.commit()
    start_session(request, user)  # this session goes on with the new fingerprint
    return Response(status_code=204)


@router.get("/me")
async def me(user: LoggedInUser) -> MeOut:
    """Return the logged-in user."""
    return MeOut.of(user)
