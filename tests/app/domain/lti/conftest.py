"""Fixtures of the LTI tests: a loopback platform, registered or not, and the launch flow driven by hand.

Contract:
- ``platform`` is a started ``LoopbackPlatform`` (tests/app/domain/lti/platform.py), stopped after the test;
  ``registered`` is that platform stored as an admin would register it by hand (committed in the test).
- ``Flow(client, platform)`` drives a launch as a browser would: ``login(spec)`` asks gpulab's ``/lti/login``
  and returns the redirect to the platform (state, nonce, URL); ``authorise(started)`` calls the platform's
  authorisation endpoint over real HTTP and returns the form it would auto-post; ``post(form)`` posts it to
  ``/lti/launch``; ``launch(spec)`` does all three. Redirects are never followed.
- Password hashes are cheap, as in the app tests (``production_passwords``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy.orm import Session

from app.domain.lti import platforms
from app.domain.models import LtiPlatform
from tests.app.conftest import production_passwords  # noqa: F401  (autouse: cheap password hashes here too)
from tests.app.domain.lti.platform import LaunchSpec, LoopbackPlatform

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

_INPUT = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


@pytest.fixture
def platform() -> Iterator[LoopbackPlatform]:
    running = LoopbackPlatform().start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def registered(platform: LoopbackPlatform, db_session: Session) -> LtiPlatform:
    row = platforms.register(
        session=db_session,
        issuer=platform.issuer,
        client_id=platform.client_id,
        name="Loopback",
        auth_login_url=platform.auth_url,
        auth_token_url=platform.token_url,
        jwks_url=platform.jwks_url,
        deployment_ids=[platform.deployment_id],
        allow_http=True,
    )
    db_session.commit()
    return row


@dataclass
class Started:
    """gpulab's answer to a login initiation: the redirect to the platform."""

    response: httpx.Response
    url: str
    params: dict[str, str]

    @property
    def state(self) -> str:
        return self.params["state"]

    @property
    def nonce(self) -> str:
        return self.params["nonce"]


@dataclass
class Flow:
    client: TestClient
    platform: LoopbackPlatform

    def login_params(self, spec: LaunchSpec, **extra: str) -> dict[str, str]:
        params = {
            "iss": self.platform.issuer,
            "login_hint": self.platform.prepare(spec),
            "target_link_uri": spec.target_link_uri,
            "client_id": self.platform.client_id,
            "lti_deployment_id": spec.deployment_id or self.platform.deployment_id,
            "lti_message_hint": "message-hint",
        }
        params.update(extra)
        return {name: value for name, value in params.items() if value}

    def login(self, spec: LaunchSpec, *, method: str = "GET", **extra: str) -> Started:
        params = self.login_params(spec, **extra)
        if method == "POST":
            response = self.client.post("/lti/login", data=params, follow_redirects=False)
        else:
            response = self.client.get("/lti/login", params=params, follow_redirects=False)
        assert response.status_code == 302, response.text
        url = response.headers["location"]
        query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
        return Started(response, url, query)

    def authorise(self, started: Started) -> dict[str, str]:
        answer = httpx.get(started.url, timeout=10)
        assert answer.status_code == 200, answer.text
        return {name: html.unescape(value) for name, value in _INPUT.findall(answer.text)}

    def post(self, form: dict[str, Any]) -> httpx.Response:
        return self.client.post("/lti/launch", data=form, follow_redirects=False)

    def launch(self, spec: LaunchSpec) -> httpx.Response:
        return self.post(self.authorise(self.login(spec)))


@pytest.fixture
def flow(client: TestClient, platform: LoopbackPlatform) -> Flow:
    return Flow(client, platform)
