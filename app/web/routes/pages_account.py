"""My account: the account page (``/account``: my personal access tokens of the API, and how to submit from a
terminal) and my password (``/account/password``, where a one-time password sends its owner first).

Contract: any logged-in user. Making a token answers with the page showing the token once (it is not put in the
session or a redirect, so it never sits in a cookie or a URL); revoking answers with a redirect
(POST-redirect-GET). Refused input comes back as the page with the reason (403, 409 or 422) and writes nothing.
Forms carry the session's CSRF token; an access token never authenticates a page (``app.web.deps``).
``GET /cli/gpulab-submit.py`` serves the learner's command line (``app/clients/gpulab_submit.py``), no login needed.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from app.clients import gpulab_submit
from app.domain.accounts import tokens
from app.domain.accounts.passwords import change_password
from app.domain.models import User
from app.web.deps import CurrentUser, LoggedInUser, RowId, SessionDep, SettingsDep
from app.web.errors import http_status
from app.web.pages import FORM_CSRF, flash, redirect, render, safe_next
from app.web.sessions import start_session
from worker.core.errors import GpulabError, InvalidInput

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])
CLI_SCRIPT = "gpulab_submit.py"


def _page(
    request: Request, user: User, session: Session, server: str, *, made: str = "", error: str = "",
    status_code: int = 200,
) -> Response:  # fmt: skip
    return render(
        request, "account.html", status_code=status_code, user=user,
        rows=tokens.list_tokens(session=session, user=user), scopes=list(tokens.Scope),
        staff=tokens.may_hold_staff(session=session, user=user), made=made, error=error, server=server,
    )  # fmt: skip


def _server(request: Request, public_url: str) -> str:
    return public_url or str(request.base_url).rstrip("/")


@router.get("/account")
def account_page(request: Request, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> Response:
    return _page(request, user, session, _server(request, settings.public_url))


@router.post("/account/tokens")
def make_token(
    request: Request,
    user: CurrentUser,
    session: SessionDep,
    settings: SettingsDep,
    name: Annotated[str, Form(max_length=1000)] = "",
    scopes: Annotated[list[str], Form()] = [],  # noqa: B006  (FastAPI copies form defaults)
) -> Response:
    server = _server(request, settings.public_url)
    try:
        wanted = [tokens.Scope(s) for s in scopes if s in tokens.Scope.__members__]
        _row, token = tokens.create_token(session=session, user=user, name=name, scopes=wanted)
    except GpulabError as exc:
        session.rollback()
        return _page(request, user, session, server, error=exc.message, status_code=http_status(exc))
    session.commit()
    return _page(request, user, session, server, made=token)


@router.post("/account/tokens/{token_id}/revoke")
def revoke_token(token_id: RowId, request: Request, user: CurrentUser, session: SessionDep) -> Response:
    row = tokens.revoke_token(session=session, user=user, token_id=token_id)
    session.commit()
    flash(request, f"Token {row.name!r} ({row.prefix}…) is revoked: it is refused from now on.")
    return redirect("/account")


@router.get("/cli/gpulab-submit.py")
def cli_script(request: Request, settings: SettingsDep) -> Response:
    """Serve the learner's command line (one file, the standard library only), set to this server's address."""
    text = resources.files("app.clients").joinpath(CLI_SCRIPT).read_text(encoding="utf-8")
    # json.dumps writes a string literal Python reads back; the address is a URL (the settings or this request's).
    served = f"DEFAULT_SERVER = {json.dumps(_server(request, settings.public_url))}\n"
    text = text.replace(f"DEFAULT_SERVER = {json.dumps(gpulab_submit.DEFAULT_SERVER)}\n", served, 1)
    return Response(
        text,
        media_type="text/x-python; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="gpulab-submit.py"'},
    )


# --- my password ---------------------------------------------------------------------------------------------


@router.get("/account/password")
def password_page(
    request: Request, user: LoggedInUser, next_path: Annotated[str, Query(alias="next")] = ""
) -> Response:  # fmt: skip
    """Show the change-password form (where a one-time password sends its owner first)."""
    return render(request, "password.html", next=safe_next(next_path), error="", forced=user.must_change_password)


@router.post("/account/password")
def password_form(
    request: Request,
    user: LoggedInUser,
    session: SessionDep,
    current: Annotated[str, Form(max_length=1024)] = "",
    new: Annotated[str, Form(max_length=1024)] = "",
    repeated: Annotated[str, Form(max_length=1024)] = "",
    next_path: Annotated[str, Form(alias="next")] = "",
) -> Response:
    """Change my password; this session goes on (with the new fingerprint), every other one ends."""
    target = safe_next(next_path)
    forced = user.must_change_password
    try:
        change_password(session=session, user=user, current=current, new=new, repeated=repeated)
        session.commit()
    except InvalidInput as exc:
        session.rollback()
        return render(request, "password.html", 422, next=target, error=exc.message, forced=forced)
    start_session(request, user)
    flash(request, "Your password is changed. Your other sessions have ended.")
    return RedirectResponse(target, status_code=303)
