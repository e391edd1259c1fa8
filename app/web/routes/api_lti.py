"""``/api/admin/lti``: LTI 1.3 administration for admins: the platforms, gpulab's keys and the score outbox.

Contract: admins only (``AdminDep``: 401 logged out, 403 for everyone else). State changes are JSON bodies (or
none), so the API's CSRF rule covers them; each commits what ``app.domain.lti`` did or, refused, writes nothing.
- Platforms (``app.domain.lti.platforms``): ``GET /platforms`` lists them with their deployments and what they
  launched here (accounts, courses, links); ``POST /platforms`` registers one by hand (201; 409 for an issuer and
  client id registered already, 422 for a malformed field: http URLs only in dev and demo mode);
  ``GET``/``DELETE /platforms/{id}`` (404 unknown; a delete is refused with 409 once the platform launched
  anyone or made a course or a link); ``POST /platforms/{id}/deployments`` adds a deployment id (idempotent),
  ``DELETE /platforms/{id}/deployments/{deployment_id}`` removes one (404 if not listed).
  ``PATCH /platforms/{id}`` with ``accept_new_deployments`` turns on or off letting verified launches from new
  deployments of the registered client in. Each platform lists ``refused_deployments`` (deployment ids whose
  verified launches were refused, newest first); ``POST /platforms/{id}/refused-deployments/accept`` lets one
  in, ``DELETE /platforms/{id}/refused-deployments/{deployment_id}`` forgets one (both 404 if not listed).
- Keys (``app.domain.lti.keys``): ``GET /keys`` lists gpulab's signing keys, newest first, with whether each is
  current (signs) and published (in ``/lti/jwks``: current, or retired within ``lti_key_grace_s``); the first
  call makes the first key, as ``/lti/jwks`` does. ``POST /keys/rotate`` retires the current key (it stays
  published for the grace period) and answers the new one.
- Outbox (``app.domain.lti.scores``): ``GET /outbox`` lists the unsent rows, the ones waiting longest first,
  with their state (``pending``: never tried; ``retrying``: tried, next try at ``next_attempt_at``; ``failed``:
  the platform refused it for good, given up at ``given_up_at``), attempts and the last error; an empty list
  means every platform has every score. ``POST /outbox/{id}/retry`` makes an unsent row due now, a given-up one
  included, so the next sweeper pass posts it; attempts and the back-off are kept. A sent or unknown row is 404.
``PlatformDep``, ``OutboxRowDep`` and the ``*_out`` views are shared with the admin page
(``app.web.routes.pages_lti_admin``).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.domain.lti import keys, platforms, scores
from app.web.deps import AdminDep, OutboxRowDep, PlatformDep, SessionDep, SettingsDep
from app.web.errors import problem_responses
from app.web.schemas.lti import (
    DeploymentIn,
    KeyOut,
    OutboxRowOut,
    PlatformIn,
    PlatformOut,
    PlatformSettingsIn,
    key_listing,
    outbox_row_out,
    platform_listing,
    platform_out,
)

router = APIRouter(prefix="/api/admin/lti", tags=["admin"])


# --- shared with the admin page ------------------------------------------------------------------------------


REGISTER_ERRORS = problem_responses(
    409, 422,
    described={
        409: "A platform with this issuer and client id is registered already",
        422: "The request does not match the schema, or a field is malformed (https URLs only outside dev mode)",
    },
)  # fmt: skip


@router.get("/platforms", responses=problem_responses(401, 403))
def list_platforms(_admin: AdminDep, session: SessionDep) -> list[PlatformOut]:
    """List the registered platforms with their deployments and what they launched here."""
    return platform_listing(session=session)


@router.post("/platforms", status_code=201, responses=REGISTER_ERRORS)
def register_platform(body: PlatformIn, admin: AdminDep, session: SessionDep, settings: SettingsDep) -> PlatformOut:
    """Register a platform by hand (manual registration) from the details it shows."""
    platform = platforms.register(
        session=session, issuer=body.issuer, client_id=body.client_id, name=body.name,
        auth_login_url=body.auth_login_url, auth_token_url=body.auth_token_url, jwks_url=body.jwks_url,
        deployment_ids=body.deployment_ids, audience=body.audience, allow_http=settings.relaxed,
        accept_new_deployments=body.accept_new_deployments,
    )  # fmt: skip
    session.flush()
    platforms.record_admin(session=session, actor=admin, change="register", platform=platform, issuer=platform.issuer)
    session.commit()
    return platform_out(session=session, platform=platform)


@router.get("/platforms/{platform_id}", responses=problem_responses(404))
def show_platform(platform: PlatformDep, session: SessionDep) -> PlatformOut:
    """Return one platform."""
    return platform_out(session=session, platform=platform)


@router.patch("/platforms/{platform_id}", responses=problem_responses(404, 422))
def update_platform(
    body: PlatformSettingsIn, admin: AdminDep, platform: PlatformDep, session: SessionDep
) -> PlatformOut:
    """Turn on or off accepting verified launches from new deployments of this registered client."""
    platforms.set_accept_new_deployments(platform=platform, accept=body.accept_new_deployments)
    platforms.record_admin(
        session=session, actor=admin, change="accept new deployments", platform=platform,
        accept=body.accept_new_deployments,
    )  # fmt: skip
    session.commit()
    return platform_out(session=session, platform=platform)


@router.delete(
    "/platforms/{platform_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(404, 409, described={409: "The platform has launched people, courses or links"}),
)
def delete_platform(admin: AdminDep, platform: PlatformDep, session: SessionDep) -> Response:
    """Delete a platform nothing was launched from yet (else remove its deployments to stop its launches)."""
    platforms.record_admin(session=session, actor=admin, change="delete", platform=platform, issuer=platform.issuer)
    platforms.delete(session=session, platform=platform)
    session.commit()
    return Response(status_code=204)


@router.post("/platforms/{platform_id}/deployments", responses=problem_responses(404, 422))
def add_deployment(body: DeploymentIn, admin: AdminDep, platform: PlatformDep, session: SessionDep) -> PlatformOut:
    """Let launches from another deployment of this platform in (no change if it is listed)."""
    platforms.add_deployment(platform=platform, deployment_id=body.deployment_id)
    platforms.record_admin(
        session=session, actor=admin, change="add deployment", platform=platform, deployment=body.deployment_id
    )
    session.commit()
    return platform_out(session=session, platform=platform)


@router.delete("/platforms/{platform_id}/deployments/{deployment_id:path}", responses=problem_responses(404))
def remove_deployment(deployment_id: str, admin: AdminDep, platform: PlatformDep, session: SessionDep) -> PlatformOut:
    """Refuse launches from this deployment from now on (its courses and links stay)."""
    platforms.remove_deployment(platform=platform, deployment_id=deployment_id)
    platforms.record_admin(
        session=session, actor=admin, change="remove deployment", platform=platform, deployment=deployment_id
    )
    session.commit()
    return platform_out(session=session, platform=platform)


@router.post(
    "/platforms/{platform_id}/refused-deployments/accept",
    responses=problem_responses(404, 422, described={404: "No such platform, or it refused no such deployment"}),
)
def accept_refused_deployment(
    body: DeploymentIn, admin: AdminDep, platform: PlatformDep, session: SessionDep
) -> PlatformOut:
    """Let a deployment whose launches were refused in: it joins the deployments, launches from it pass."""
    platforms.accept_refused(platform=platform, deployment_id=body.deployment_id)
    platforms.record_admin(
        session=session, actor=admin, change="accept refused deployment", platform=platform,
        deployment=body.deployment_id,
    )  # fmt: skip
    session.commit()
    return platform_out(session=session, platform=platform)


@router.delete(
    "/platforms/{platform_id}/refused-deployments/{deployment_id:path}",
    responses=problem_responses(404, described={404: "No such platform, or it refused no such deployment"}),
)
def dismiss_refused_deployment(
    deployment_id: str, admin: AdminDep, platform: PlatformDep, session: SessionDep
) -> PlatformOut:
    """Forget a refused deployment without letting it in (its next launch is refused and listed again)."""
    platforms.dismiss_refused(platform=platform, deployment_id=deployment_id)
    platforms.record_admin(
        session=session, actor=admin, change="dismiss refused deployment", platform=platform, deployment=deployment_id
    )
    session.commit()
    return platform_out(session=session, platform=platform)


# --- gpulab's keys -------------------------------------------------------------------------------------------


@router.get("/keys", responses=problem_responses(401, 403))
def list_keys(_admin: AdminDep, session: SessionDep, settings: SettingsDep) -> list[KeyOut]:
    """List gpulab's signing keys, newest first: which one signs, which are published."""
    listed = key_listing(session=session, grace_s=settings.lti_key_grace_s)
    session.commit()  # the first call made the first key
    return listed


@router.post("/keys/rotate", responses=problem_responses(401, 403))
def rotate_key(admin: AdminDep, session: SessionDep) -> KeyOut:
    """Make a new signing key; the old one stays published for the grace period (``lti_key_grace_s``)."""
    new = keys.rotate(session=session)
    platforms.record_admin(session=session, actor=admin, change="rotate signing key", platform=None, kid=new.kid)
    session.commit()
    return KeyOut(kid=new.kid, created_at=new.created_at, retired_at=None, current=True, published=True)


# --- the score outbox ----------------------------------------------------------------------------------------


@router.get("/outbox", responses=problem_responses(401, 403))
def outbox(_admin: AdminDep, session: SessionDep) -> list[OutboxRowOut]:
    """List the scores not yet taken by their platform, with attempts, last error and next attempt."""
    return [outbox_row_out(row) for row in scores.outbox(session=session)]


@router.post("/outbox/{row_id}/retry", responses=problem_responses(404))
def retry_score(admin: AdminDep, row: OutboxRowDep, session: SessionDep) -> OutboxRowOut:
    """Make an unsent score due now: the sweeper's next pass posts it."""
    scores.retry_now(row)
    platforms.record_admin(session=session, actor=admin, change="retry score", platform=None, row=row.id)
    session.commit()
    return outbox_row_out(row)
