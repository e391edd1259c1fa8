"""Every HTTP call gpulab makes to a platform: JSON in and out, with a time limit and a size cap.

Contract:
- ``get_json(url, timeout_s=..., bearer=...)`` and ``post_json(url, body, ...)`` return the JSON object
  the platform answered (a 2xx status, at most ``MAX_RESPONSE_BYTES``), or raise ``InvalidInput`` saying what
  went wrong in words an admin can act on (unreachable, status, not JSON, too large). Redirects are not
  followed: a platform's endpoints are the addresses it published, and a redirect could lead anywhere.
- The URLs come from an admin (the registration) or from a platform an admin registered; ``check_url`` is the
  rule every one of them passes before it is stored or called: absolute, https (http only where
  ``allow_http``: dev and demo mode, so a platform on the loopback works), a host, no fragment.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import httpx

from worker.core.errors import InvalidInput

MAX_RESPONSE_BYTES = 1024 * 1024
MAX_URL_CHARS = 1024
USER_AGENT = "gpulab-lti/1.3"


def check_url(url: str, *, what: str, allow_http: bool) -> str:
    """Return ``url`` if it may name a platform endpoint, else raise ``InvalidInput`` naming ``what`` it is."""
    parts = urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    if len(url) > MAX_URL_CHARS:
        raise InvalidInput(f"the {what} is longer than {MAX_URL_CHARS} characters")
    if parts.scheme not in schemes or not parts.hostname or parts.fragment:
        rule = "an http(s)" if allow_http else "an https"
        raise InvalidInput(f"the {what} must be {rule} address with a host and no #fragment, not {url!r}")
    return url


def _read(response: httpx.Response, url: str) -> dict[str, Any]:
    if not 200 <= response.status_code < 300:
        raise InvalidInput(f"{url} answered HTTP {response.status_code}")
    body = bytearray()
    for chunk in response.iter_bytes():
        body.extend(chunk)
        if len(body) > MAX_RESPONSE_BYTES:
            raise InvalidInput(f"{url} answered more than {MAX_RESPONSE_BYTES // 1024} KiB")
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        raise InvalidInput(f"{url} did not answer JSON") from exc
    if not isinstance(parsed, dict):
        raise InvalidInput(f"{url} did not answer a JSON object")
    return parsed


def _call(method: str, url: str, *, timeout_s: float, headers: dict[str, str], body: Any = None) -> dict[str, Any]:
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **headers}
    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=False) as client,
            client.stream(method, url, headers=headers, json=body) as response,
        ):
            return _read(response, url)
    except httpx.HTTPError as exc:
        raise InvalidInput(f"could not reach {url}: {exc.__class__.__name__}: {exc}") from exc


def _authorization(bearer: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {bearer}"} if bearer else {}


def get_json(url: str, *, timeout_s: float, bearer: str | None = None) -> dict[str, Any]:
    """Fetch the JSON object at ``url`` (with ``bearer`` as the Authorization token)."""
    return _call("GET", url, timeout_s=timeout_s, headers=_authorization(bearer))


def post_json(url: str, body: dict[str, Any], *, timeout_s: float, bearer: str | None = None) -> dict[str, Any]:
    """Post ``body`` as JSON to ``url`` (with ``bearer`` as the Authorization token) and return the JSON answer."""
    return _call("POST", url, timeout_s=timeout_s, headers=_authorization(bearer), body=body)
