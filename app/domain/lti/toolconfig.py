"""What gpulab tells a platform about itself: its LTI endpoints and the client registration it asks for.

Contract:
- ``ToolUrls(base)`` names gpulab's endpoints under its public base URL (``Settings.public_url``, else the
  address the request came to): ``login`` (OIDC login initiation, GET or POST), ``launch`` (the redirect URI
  the id_token is posted to, and the messages' target link), ``jwks`` (gpulab's public keys), ``register``
  (Dynamic Registration's initiation URL) and ``domain`` (host and port, as the tool configuration claim says).
- ``client_registration(urls)`` is the OpenID client metadata of Dynamic Registration 1.0: a web application of
  the implicit id_token flow plus client credentials (for AGS/NRPS tokens signed with gpulab's key,
  ``private_key_jwt``), with the ``lti-tool-configuration`` claim offering resource link and deep linking
  launches and asking for the user's name and e-mail.
- ``is_on_tool(url, urls)`` says whether a link points at gpulab (same scheme and host): only such links are
  followed after a launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.domain.lti.vocabulary import DEEP_LINKING_REQUEST, RESOURCE_LINK_REQUEST, SCOPES, TOOL_CONFIGURATION

TOOL_NAME = "gpulab"
TOOL_DESCRIPTION = "Auto-graded programming exercises for multi-GPU training with TensorFlow and PyTorch"
CLAIMS_WANTED = ("iss", "sub", "name", "given_name", "family_name", "email")


@dataclass(frozen=True)
class ToolUrls:
    """gpulab's LTI endpoints under one public base URL (no trailing slash)."""

    base: str

    @property
    def login(self) -> str:
        return self.base + "/lti/login"

    @property
    def launch(self) -> str:
        return self.base + "/lti/launch"

    @property
    def jwks(self) -> str:
        return self.base + "/lti/jwks"

    @property
    def register(self) -> str:
        return self.base + "/lti/register"

    @property
    def domain(self) -> str:
        return urlsplit(self.base).netloc


def tool_urls(base: str) -> ToolUrls:
    """Return gpulab's endpoints under ``base``."""
    return ToolUrls(base.rstrip("/"))


def client_registration(urls: ToolUrls) -> dict[str, Any]:
    """Return the client metadata gpulab posts to a platform's registration endpoint."""
    return {
        "application_type": "web",
        "response_types": ["id_token"],
        "grant_types": ["implicit", "client_credentials"],
        "initiate_login_uri": urls.login,
        "redirect_uris": [urls.launch],
        "client_name": TOOL_NAME,
        "jwks_uri": urls.jwks,
        "token_endpoint_auth_method": "private_key_jwt",
        "scope": " ".join(SCOPES),
        TOOL_CONFIGURATION: {
            "domain": urls.domain,
            "description": TOOL_DESCRIPTION,
            "target_link_uri": urls.launch,
            "claims": list(CLAIMS_WANTED),
            "messages": [
                {"type": RESOURCE_LINK_REQUEST, "target_link_uri": urls.launch, "label": TOOL_NAME},
                {"type": DEEP_LINKING_REQUEST, "target_link_uri": urls.launch, "label": f"Add {TOOL_NAME} exercises"},
            ],
        },
    }


def is_on_tool(url: str, urls: ToolUrls) -> bool:
    """Say whether ``url`` is an address on gpulab (same scheme and host as its base URL)."""
    target, base = urlsplit(url), urlsplit(urls.base)
    return (target.scheme, target.netloc.lower()) == (base.scheme, base.netloc.lower())
