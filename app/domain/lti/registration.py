"""IMS LTI Dynamic Registration 1.0, tool side: a platform hands gpulab its configuration and gets a client.

Contract:
- The platform opens gpulab's initiation URL with ``openid_configuration`` (its OpenID configuration URL) and
  optionally ``registration_token``. ``register`` then fetches that configuration (with the token as a bearer
  token, which some platforms require), checks it (``check_configuration``), posts gpulab's client metadata
  (``toolconfig.client_registration``) to the platform's ``registration_endpoint`` with the token, and stores
  the platform with the ``client_id`` and ``deployment_id`` the platform answered. Nothing is stored unless
  every step succeeded; a step that fails raises ``InvalidInput`` saying which and why.
- ``check_configuration``: the configuration names an issuer, ``authorization_endpoint``, ``token_endpoint``,
  ``jwks_uri`` and ``registration_endpoint`` (each passes ``outbound.check_url``) and carries the
  ``lti-platform-configuration`` claim; the issuer is on the same scheme and host as the configuration URL
  (so a configuration cannot speak for another site); RS256 is among its id_token algorithms when it lists them.
- Registering the same client again (the platform answered a client id it already has here) adds the
  deployment to it instead of failing. An answer with a client id only (Canvas gives no ``deployment_id``)
  stores the platform without deployments: its launches are refused and listed for the admins to accept
  (``platforms``: refused deployments, ``accept_new_deployments``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.lti import outbound, platforms
from app.domain.lti.toolconfig import ToolUrls, client_registration
from app.domain.lti.vocabulary import PLATFORM_CONFIGURATION, TOOL_CONFIGURATION
from app.domain.models import LtiPlatform
from worker.core.errors import InvalidInput

REQUIRED_ALGORITHM = "RS256"


class PlatformProduct(BaseModel):
    """The ``lti-platform-configuration`` claim: which product the platform is (other members are kept)."""

    model_config = ConfigDict(extra="allow")

    product_family_code: str = ""
    version: str = ""


class PlatformConfiguration(BaseModel):
    """The members of a platform's OpenID configuration gpulab needs (other members are allowed)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    registration_endpoint: str
    id_token_signing_alg_values_supported: list[str] | None = None
    product: PlatformProduct = Field(alias=PLATFORM_CONFIGURATION)


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower()


def check_configuration(raw: dict[str, Any], *, config_url: str, allow_http: bool) -> PlatformConfiguration:
    """Return the platform configuration ``raw`` if gpulab can register with it, else raise ``InvalidInput``."""
    try:
        config = PlatformConfiguration.model_validate(raw)
    except ValidationError as exc:
        where = (".".join(str(part) for part in e["loc"]) or "configuration" for e in exc.errors())
        problems = "; ".join(f"{place}: {e['msg']}" for place, e in zip(where, exc.errors(), strict=True))
        raise InvalidInput(f"the platform's OpenID configuration is incomplete: {problems}") from exc
    platforms.check_issuer(config.issuer, allow_http=allow_http)
    if _origin(config.issuer) != _origin(config_url):
        raise InvalidInput(
            f"the platform's issuer {config.issuer} is not on the host of its configuration URL {config_url}"
        )
    for url, what in (
        (config.authorization_endpoint, "authorization_endpoint"),
        (config.token_endpoint, "token_endpoint"),
        (config.jwks_uri, "jwks_uri"),
        (config.registration_endpoint, "registration_endpoint"),
    ):
        outbound.check_url(url, what=f"platform's {what}", allow_http=allow_http)
    algorithms = config.id_token_signing_alg_values_supported
    if algorithms is not None and REQUIRED_ALGORITHM not in algorithms:
        raise InvalidInput(f"the platform does not sign id_tokens with {REQUIRED_ALGORITHM} (it lists {algorithms})")
    return config


def _client(answer: dict[str, Any]) -> tuple[str, str | None]:
    """Return the client id and the deployment id (if any) of the platform's registration answer."""
    client_id = answer.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise InvalidInput("the platform's registration answer has no client_id")
    tool_configuration = answer.get(TOOL_CONFIGURATION)
    deployment = tool_configuration.get("deployment_id") if isinstance(tool_configuration, dict) else None
    return client_id, deployment if isinstance(deployment, str) and deployment else None


def register(
    *,
    session: Session,
    openid_configuration: str,
    registration_token: str | None,
    tool: ToolUrls,
    timeout_s: float,
    allow_http: bool,
) -> LtiPlatform:
    """Register gpulab with the platform whose OpenID configuration is at ``openid_configuration``; store it."""
    outbound.check_url(openid_configuration, what="openid_configuration URL", allow_http=allow_http)
    token = registration_token or None
    raw = outbound.get_json(openid_configuration, timeout_s=timeout_s, bearer=token)
    config = check_configuration(raw, config_url=openid_configuration, allow_http=allow_http)
    answer = outbound.post_json(
        config.registration_endpoint, client_registration(tool), timeout_s=timeout_s, bearer=token
    )
    client_id, deployment_id = _client(answer)
    deployments = [deployment_id] if deployment_id else []
    known = session.scalar(
        select(LtiPlatform).where(LtiPlatform.issuer == config.issuer, LtiPlatform.client_id == client_id)
    )
    if known is not None:
        for deployment in deployments:
            platforms.add_deployment(platform=known, deployment_id=deployment)
        return known
    product = config.product.product_family_code
    host = urlsplit(config.issuer).netloc
    return platforms.register(
        session=session,
        issuer=config.issuer,
        client_id=client_id,
        name=f"{product} at {host}" if product else host,
        auth_login_url=config.authorization_endpoint,
        auth_token_url=config.token_endpoint,
        jwks_url=config.jwks_uri,
        deployment_ids=deployments,
        allow_http=allow_http,
    )
