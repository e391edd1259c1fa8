"""LTI admin bodies: registered platforms (with the deployments they were refused), gpulab's keys, the score
outbox; and the listings the admin API and the admin page both show.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.lti import keys, platforms, scores
from app.domain.models import LtiPlatform, LtiScoreOutbox, LtiToolKey
from app.domain.platform.clock import UtcDatetime

KEYS_LISTED = 50


class RefusedDeploymentOut(BaseModel):
    deployment_id: str
    first_at: UtcDatetime = Field(description="the first launch from it that was refused")
    last_at: UtcDatetime = Field(description="the latest launch from it that was refused")
    launches: int = Field(description="how many launches from it were refused")


class PlatformOut(BaseModel):
    id: int
    issuer: str
    client_id: str
    name: str
    auth_login_url: str
    auth_token_url: str
    jwks_url: str
    audience: str | None
    deployment_ids: list[str]
    accept_new_deployments: bool = Field(
        description="a verified launch from a deployment not listed adds it (else it is refused and listed below)"
    )
    refused_deployments: list[RefusedDeploymentOut] = Field(
        description="deployments whose verified launches were refused, newest first: accept or dismiss each"
    )
    created_at: UtcDatetime
    users: int = Field(description="accounts that sign in through this platform")
    contexts: int = Field(description="platform courses mapped to gpulab courses")
    links: int = Field(description="resource links placed in the platform's courses")
    deletable: bool = Field(description="nothing launched from it yet: DELETE removes it")


def _platform_out(listed: platforms.Listed) -> PlatformOut:
    p, usage = listed.platform, listed.usage
    return PlatformOut(
        id=p.id, issuer=p.issuer, client_id=p.client_id, name=p.name, auth_login_url=p.auth_login_url,
        auth_token_url=p.auth_token_url, jwks_url=p.jwks_url, audience=p.audience,
        deployment_ids=list(p.deployment_ids), accept_new_deployments=p.accept_new_deployments,
        refused_deployments=[
            RefusedDeploymentOut(deployment_id=r.deployment_id, first_at=r.first_at, last_at=r.last_at,
                                 launches=r.launches)
            for r in platforms.refused_deployments(p)
        ],
        created_at=p.created_at, users=usage.users, contexts=usage.contexts, links=usage.links,
        deletable=not usage.used,
    )  # fmt: skip


def platform_out(*, session: Session, platform: LtiPlatform) -> PlatformOut:
    usage = platforms.usage_of(session=session, platform_ids=[platform.id])[platform.id]
    return _platform_out(platforms.Listed(platform, usage))


def platform_listing(*, session: Session) -> list[PlatformOut]:
    return [_platform_out(listed) for listed in platforms.listing(session=session)]


class KeyOut(BaseModel):
    kid: str
    created_at: UtcDatetime
    retired_at: UtcDatetime | None
    current: bool = Field(description="this key signs gpulab's messages now")
    published: bool = Field(description="in /lti/jwks: the current key, or retired within the grace period")


def key_listing(*, session: Session, grace_s: int) -> list[KeyOut]:
    """gpulab's keys, newest first (makes the first key if there is none: the caller commits)."""
    published = {str(key["kid"]) for key in keys.jwks(session=session, grace_s=grace_s)["keys"]}
    signing = keys.current(session=session).kid
    rows = session.scalars(select(LtiToolKey).order_by(LtiToolKey.id.desc()).limit(KEYS_LISTED))
    return [
        KeyOut(kid=row.kid, created_at=row.created_at, retired_at=row.retired_at, current=row.kid == signing,
               published=row.kid in published)
        for row in rows
    ]  # fmt: skip


class OutboxRowOut(BaseModel):
    id: int
    platform_id: int
    link_id: int
    user_id: int
    lineitem_url: str
    payload: dict[str, Any]
    created_at: UtcDatetime
    attempts: int
    next_attempt_at: UtcDatetime = Field(description="when the sweeper tries it next (not while failed)")
    last_error: str | None
    given_up_at: UtcDatetime | None = Field(description="when the platform refused it for good (failed)")
    state: scores.OutboxState = Field(
        description="pending: never tried; retrying: tried, tried again at next_attempt_at; failed: the platform "
        "refused it for good, no more tries until a retry or a newer score"
    )


def outbox_row_out(row: LtiScoreOutbox) -> OutboxRowOut:
    return OutboxRowOut(
        id=row.id, platform_id=row.platform_id, link_id=row.link_id, user_id=row.user_id,
        lineitem_url=row.lineitem_url, payload=dict(row.payload), created_at=row.created_at,
        attempts=row.attempts, next_attempt_at=row.next_attempt_at, last_error=row.last_error,
        given_up_at=row.given_up_at, state=scores.state_of(row),
    )  # fmt: skip


# --- platforms -----------------------------------------------------------------------------------------------


class PlatformIn(BaseModel):
    """The platform's details as it shows them after gpulab was registered in it (docs/lti.md)."""

    model_config = ConfigDict(extra="forbid")
    issuer: str = Field(max_length=1024, description="Moodle: Platform ID; Canvas: https://canvas.instructure.com")
    client_id: str = Field(max_length=255)
    name: str = Field(default="", max_length=200, description="shown to admins; empty: the issuer's host")
    auth_login_url: str = Field(max_length=1024, description="the OIDC authentication request URL")
    auth_token_url: str = Field(max_length=1024, description="the OAuth 2 access token URL")
    jwks_url: str = Field(max_length=1024, description="the platform's public keyset URL")
    deployment_ids: list[str] = Field(default_factory=list, max_length=100)
    audience: str | None = Field(default=None, max_length=255, description="token audience, when not the token URL")
    accept_new_deployments: bool = Field(
        default=False, description="let verified launches from deployments not listed in (and add them)"
    )


class PlatformSettingsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    accept_new_deployments: bool = Field(
        description="let verified launches from new deployments of this registered client in (and add them)"
    )


class DeploymentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deployment_id: str = Field(max_length=255)
