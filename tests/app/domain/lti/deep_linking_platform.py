"""The platform side of LTI Deep Linking 2.0, for the tests, beside the loopback platform (``platform.py``).

Contract:
- ``deep_linking_spec(...)`` is a ``LaunchSpec`` for an ``LtiDeepLinkingRequest``: the deep linking settings
  claim (``return_url``, ``accept_types`` with ``ltiResourceLink``, ``accept_multiple``, ``data``), no resource
  link claim; ``roles`` default to the Instructor role.
- ``read_response(jwks, token)`` verifies a deep linking response as the platform would: RS256, the header's
  ``kid`` found in ``jwks`` (gpulab's JWK Set as fetched from ``/lti/jwks``); it returns the claims.
- ``return_form(page)`` reads the form a response page posts back: its action and its fields.
Claim names are spelled out here, independently of ``app.domain.lti``.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from joserfc import jws
from joserfc.jwk import RSAKey

from tests.app.domain.lti.platform import INSTRUCTOR, LTI, LaunchSpec

DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"
SETTINGS = DL + "deep_linking_settings"
CONTENT_ITEMS = DL + "content_items"
DATA = DL + "data"
CUSTOM = LTI + "custom"
RETURN_URL = "http://127.0.0.1:9/deep-link-return"

_FORM = re.compile(r'<form method="post" action="([^"]+)" id="lti-return-form">')
_INPUT = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def deep_linking_spec(
    *,
    roles: list[str] | None = None,
    accept_types: list[str] | None = None,
    accept_multiple: bool = True,
    data: str | None = "opaque-platform-data",
    **spec: Any,
) -> LaunchSpec:
    settings: dict[str, Any] = {
        "deep_link_return_url": RETURN_URL,
        "accept_types": accept_types or ["link", "ltiResourceLink"],
        "accept_presentation_document_targets": ["iframe", "window"],
        "accept_multiple": accept_multiple,
        "auto_create": True,
        "title": "Add content",
    }
    if data is not None:
        settings["data"] = data
    claims = {SETTINGS: settings, LTI + "resource_link": None, **spec.pop("claims", {})}
    return LaunchSpec(roles=roles or [INSTRUCTOR], message_type="LtiDeepLinkingRequest", claims=claims, **spec)


def read_response(jwks: dict[str, Any], token: str) -> dict[str, Any]:
    compact = jws.extract_compact(token.encode())
    header = compact.headers()
    assert header["alg"] == "RS256"
    (found,) = [key for key in jwks["keys"] if key["kid"] == header["kid"]]
    key = RSAKey.import_key(found)
    assert jws.validate_compact(compact, key, algorithms=["RS256"])
    claims = json.loads(compact.payload)
    assert isinstance(claims, dict)
    return claims


def return_form(page: str) -> tuple[str, dict[str, str]]:
    action = _FORM.search(page)
    assert action is not None, page
    form = page[action.end() : page.index("</form>", action.end())]
    return html.unescape(action.group(1)), {name: html.unescape(value) for name, value in _INPUT.findall(form)}
