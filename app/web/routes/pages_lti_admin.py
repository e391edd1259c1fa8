"""``/admin/lti``: the LTI 1.3 admin page: what to paste into the platform, the platforms, gpulab's keys, the outbox.

Contract: admins only (``AdminDep``); every POST is an HTML form carrying the session's CSRF token and answers
with a redirect back to ``/admin/lti`` and a flash (POST-redirect-GET), except a refused registration, which
shows the page again with status 422, the reason and the fields as typed. The page shows gpulab's endpoints under
``Settings.public_url`` (else the address of this request), the registered platforms with their deployments
(add and remove forms; delete for a platform nothing launched from), the deployments whose verified launches
were refused (an Accept and a Dismiss button each) and the "accept new deployments" switch, the manual
registration form (the fields of docs/lti.md; several deployment ids separated by spaces or commas), gpulab's
keys with the rotate button, and the scores still owed (``scores.outbox``: pending, retrying with the attempt
and the next try, or failed) with a "Retry now" button each. The rules are those of the JSON API
(``app.web.routes.api_lti``), whose dependencies and views this module shares.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from app.domain.accounts import people
from app.domain.lti import keys, platforms, scores
from app.domain.lti.toolconfig import tool_urls
from app.domain.models import LtiPlatform, User
from app.settings import Settings
from app.web.deps import AdminDep, OutboxRowDep, PlatformDep, SessionDep, SettingsDep
from app.web.pages import FORM_CSRF, flash, redirect, render
from app.web.schemas.lti import key_listing, outbox_row_out, platform_listing
from worker.core.errors import GpulabError

router = APIRouter(prefix="/admin/lti", include_in_schema=False, dependencies=[FORM_CSRF])
PAGE = "/admin/lti"
REGISTER_FIELDS = ("issuer", "client_id", "name", "auth_login_url", "auth_token_url", "jwks_url", "deployment_ids",
                   "audience")  # fmt: skip
_SEPARATORS = re.compile(r"[\s,]+")


def _page(
    request: Request,
    user: User,
    session: SessionDep,
    settings: Settings,
    status_code: int = 200,
    form: dict[str, str] | None = None,
    error: str = "",
) -> Response:
    outbox = [outbox_row_out(row) for row in scores.outbox(session=session)]
    emails = people.emails_of(session=session, ids={row.user_id for row in outbox})
    listed = platform_listing(session=session)
    context = {
        "tool": tool_urls(settings.public_url or str(request.base_url)),
        "platforms": listed,
        "platform_names": {p.id: p.name or p.issuer for p in listed},
        "keys": key_listing(session=session, grace_s=settings.lti_key_grace_s),
        "grace_days": round(settings.lti_key_grace_s / 86400, 1),
        "outbox": outbox,
        "emails": emails,
        "form": form or dict.fromkeys(REGISTER_FIELDS, ""),
        "error": error,
        "allow_http": settings.relaxed,
    }
    session.commit()  # the key listing made gpulab's first key if there was none
    return render(request, "admin/lti.html", status_code=status_code, user=user, **context)


@router.get("")
def lti_page(request: Request, user: AdminDep, session: SessionDep, settings: SettingsDep) -> Response:
    return _page(request, user, session, settings)


@router.post("/platforms")
def register_platform(
    request: Request,
    user: AdminDep,
    session: SessionDep,
    settings: SettingsDep,
    issuer: Annotated[str, Form()] = "",
    client_id: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
    auth_login_url: Annotated[str, Form()] = "",
    auth_token_url: Annotated[str, Form()] = "",
    jwks_url: Annotated[str, Form()] = "",
    deployment_ids: Annotated[str, Form()] = "",
    audience: Annotated[str, Form()] = "",
) -> Response:
    form = {"issuer": issuer, "client_id": client_id, "name": name, "auth_login_url": auth_login_url,
            "auth_token_url": auth_token_url, "jwks_url": jwks_url, "deployment_ids": deployment_ids,
            "audience": audience}  # fmt: skip
    try:
        platform = platforms.register(
            session=session, issuer=issuer.strip(), client_id=client_id, name=name,
            auth_login_url=auth_login_url.strip(), auth_token_url=auth_token_url.strip(), jwks_url=jwks_url.strip(),
            deployment_ids=[d for d in _SEPARATORS.split(deployment_ids) if d], audience=audience or None,
            allow_http=settings.relaxed,
        )  # fmt: skip
        session.flush()
        platforms.record_admin(
            session=session, actor=user, change="register", platform=platform, issuer=platform.issuer
        )
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _page(request, user, session, settings, status_code=422, form=form, error=exc.message)
    flash(request, f"{platform.name} ({platform.issuer}) is registered: its launches are let in.")
    return redirect(PAGE)


def _apply(
    request: Request,
    session: SessionDep,
    change: Callable[[], object],
    done: str,
    *,
    actor: User,
    platform: LtiPlatform | None,
    what: str,
    **details: object,
) -> Response:
    """Run ``change`` and audit it; commit and flash ``done``, or roll back and flash why it was refused."""
    try:
        platforms.record_admin(session=session, actor=actor, change=what, platform=platform, **details)
        change()
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
    else:
        session.commit()
        flash(request, done)
    return redirect(PAGE)


@router.post("/platforms/{platform_id}/deployments")
def add_deployment(
    request: Request, user: AdminDep, platform: PlatformDep, session: SessionDep,
    deployment_id: Annotated[str, Form()] = "",
) -> Response:  # fmt: skip
    return _apply(
        request, session, lambda: platforms.add_deployment(platform=platform, deployment_id=deployment_id),
        f"{platform.name}: deployment {deployment_id.strip()} is let in.",
        actor=user, platform=platform, what="add deployment", deployment=deployment_id.strip(),
    )  # fmt: skip


@router.post("/platforms/{platform_id}/deployments/remove")
def remove_deployment(
    request: Request, user: AdminDep, platform: PlatformDep, session: SessionDep,
    deployment_id: Annotated[str, Form()] = "",
) -> Response:  # fmt: skip
    return _apply(
        request, session, lambda: platforms.remove_deployment(platform=platform, deployment_id=deployment_id),
        f"{platform.name}: launches from deployment {deployment_id.strip()} are refused.",
        actor=user, platform=platform, what="remove deployment", deployment=deployment_id.strip(),
    )  # fmt: skip


@router.post("/platforms/{platform_id}/refused/accept")
def accept_refused(
    request: Request, user: AdminDep, platform: PlatformDep, session: SessionDep,
    deployment_id: Annotated[str, Form()] = "",
) -> Response:  # fmt: skip
    return _apply(
        request, session, lambda: platforms.accept_refused(platform=platform, deployment_id=deployment_id),
        f"{platform.name}: deployment {deployment_id.strip()} is accepted: its launches are let in.",
        actor=user, platform=platform, what="accept refused deployment", deployment=deployment_id.strip(),
    )  # fmt: skip


@router.post("/platforms/{platform_id}/refused/dismiss")
def dismiss_refused(
    request: Request, user: AdminDep, platform: PlatformDep, session: SessionDep,
    deployment_id: Annotated[str, Form()] = "",
) -> Response:  # fmt: skip
    return _apply(
        request, session, lambda: platforms.dismiss_refused(platform=platform, deployment_id=deployment_id),
        f"{platform.name}: deployment {deployment_id.strip()} is dismissed; its launches stay refused.",
        actor=user, platform=platform, what="dismiss refused deployment", deployment=deployment_id.strip(),
    )  # fmt: skip


@router.post("/platforms/{platform_id}/accept-new-deployments")
def accept_new_deployments(
    request: Request, user: AdminDep, platform: PlatformDep, session: SessionDep,
    accept: Annotated[bool, Form()] = False,
) -> Response:  # fmt: skip
    done = (
        f"{platform.name}: launches from new deployments of client {platform.client_id} are let in and added."
        if accept
        else f"{platform.name}: launches from deployments not listed are refused and listed for you to accept."
    )
    change = lambda: platforms.set_accept_new_deployments(platform=platform, accept=accept)  # noqa: E731
    return _apply(
        request, session, change, done, actor=user, platform=platform, what="accept new deployments", accept=accept
    )


@router.post("/platforms/{platform_id}/delete")
def delete_platform(request: Request, user: AdminDep, platform: PlatformDep, session: SessionDep) -> Response:
    done = f"{platform.name} ({platform.issuer}) is deleted."
    change = lambda: platforms.delete(session=session, platform=platform)  # noqa: E731
    return _apply(request, session, change, done, actor=user, platform=platform, what="delete", issuer=platform.issuer)


@router.post("/keys/rotate")
def rotate_key(request: Request, user: AdminDep, session: SessionDep) -> Response:
    new = keys.rotate(session=session)
    platforms.record_admin(session=session, actor=user, change="rotate signing key", platform=None, kid=new.kid)
    session.commit()
    flash(request, f"New signing key {new.kid}; the old one stays published for the grace period.")
    return redirect(PAGE)


@router.post("/outbox/{row_id}/retry")
def retry_score(request: Request, user: AdminDep, row: OutboxRowDep, session: SessionDep) -> Response:
    done = f"Score {row.id} is due now: the next sweeper pass posts it."
    return _apply(
        request, session, lambda: scores.retry_now(row), done, actor=user, platform=None, what="retry score", row=row.id
    )
