"""Dynamic Registration against the loopback platform, end to end; manual registration's rules."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.lti import platforms
from app.domain.models import LtiPlatform, Role, User
from tests.app.domain.lti.conftest import Flow
from tests.app.domain.lti.platform import LaunchSpec, LoopbackPlatform
from worker.core.errors import Conflict, InvalidInput

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

TOOL_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-tool-configuration"


REGISTRATION_TOKEN = "reg-token"


def _register(client: TestClient, platform: LoopbackPlatform, token: str | None = REGISTRATION_TOKEN):
    params = {"openid_configuration": platform.openid_configuration_url}
    if token:
        params["registration_token"] = token
    return client.get("/lti/register", params=params, follow_redirects=False)


def _platforms(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(LtiPlatform)) or 0


def test_dynamic_registration_end_to_end_then_a_launch(
    admin_client: TestClient, platform: LoopbackPlatform, db_session: Session
) -> None:
    platform.registration_token = "reg-token"
    response = _register(admin_client, platform)

    assert response.status_code == 200, response.text
    assert '<script src="/lti/close.js" defer></script>' in response.text
    assert platform.client_id in response.text and platform.deployment_id in response.text
    assert platform.config_requests == [{"authorization": "Bearer reg-token"}]
    [call] = platform.registrations
    assert call["authorization"] == "Bearer reg-token"
    body = call["body"]
    assert body["redirect_uris"] == ["http://testserver/lti/launch"]
    assert body["initiate_login_uri"] == "http://testserver/lti/login"
    assert body["jwks_uri"] == "http://testserver/lti/jwks"
    assert body["response_types"] == ["id_token"]
    assert body["token_endpoint_auth_method"] == "private_key_jwt"
    assert set(body["scope"].split()) == {
        "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
        "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
        "https://purl.imsglobal.org/spec/lti-ags/scope/score",
        "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
    }
    tool = body[TOOL_CONFIGURATION]
    assert tool["domain"] == "testserver"
    assert tool["target_link_uri"] == "http://testserver/lti/launch"
    assert {m["type"] for m in tool["messages"]} == {"LtiResourceLinkRequest", "LtiDeepLinkingRequest"}
    assert {"email", "name"} <= set(tool["claims"])

    stored = db_session.scalar(select(LtiPlatform).where(LtiPlatform.issuer == platform.issuer))
    assert stored is not None
    assert (stored.client_id, stored.deployment_ids) == (platform.client_id, [platform.deployment_id])
    assert (stored.auth_login_url, stored.auth_token_url, stored.jwks_url) == (
        platform.auth_url, platform.token_url, platform.jwks_url,
    )  # fmt: skip
    assert stored.name == "loopback at " + urlsplit(platform.issuer).netloc

    admin_client.cookies.clear()  # a learner's browser now
    assert Flow(admin_client, platform).launch(LaunchSpec()).status_code == 303


def test_registering_the_same_client_again_adds_the_deployment(
    admin_client: TestClient, platform: LoopbackPlatform, db_session: Session
) -> None:
    assert _register(admin_client, platform).status_code == 200
    first = platform.deployment_id
    platform.deployment_id = "second-deployment"
    assert _register(admin_client, platform).status_code == 200
    stored = db_session.scalar(select(LtiPlatform).where(LtiPlatform.issuer == platform.issuer))
    assert stored is not None and stored.deployment_ids == [first, "second-deployment"]
    assert _platforms(db_session) == 1


def test_a_registration_answered_with_a_client_id_only_shows_the_first_launch_for_a_one_click_accept(
    admin_client: TestClient, platform: LoopbackPlatform, db_session: Session, admin: User,
    login: Callable[..., None],
) -> None:  # fmt: skip
    from tests.app.web.test_api_instructor import token

    platform.registration_gives_deployment = False  # as Canvas answers
    registered = _register(admin_client, platform)
    assert registered.status_code == 200, registered.text
    assert 'id="lti-no-deployment"' in registered.text and "one click accepts it" in registered.text
    stored = db_session.scalar(select(LtiPlatform).where(LtiPlatform.issuer == platform.issuer))
    assert stored is not None and stored.deployment_ids == [] and not stored.accept_new_deployments

    admin_client.cookies.clear()  # a learner's browser, launched from the course the app was installed in
    flow = Flow(admin_client, platform)
    refused = flow.launch(LaunchSpec())
    assert refused.status_code == 403 and platform.deployment_id in html.unescape(refused.text)
    assert "listed the refused deployment" in refused.text

    login(admin_client, admin)
    page = admin_client.get("/admin/lti").text
    listed = page[page.index(f'id="refused-{stored.id}"') :]
    assert platform.deployment_id in listed[: listed.index("</div>")]
    assert "1 launch refused" in listed and 'data-format="long"' in listed
    accepted = admin_client.post(
        f"/admin/lti/platforms/{stored.id}/refused/accept",
        data={"csrf_token": token(admin_client, "/admin/lti"), "deployment_id": platform.deployment_id},
        follow_redirects=False,
    )
    assert accepted.status_code == 303 and accepted.headers["location"] == "/admin/lti"
    db_session.expire_all()
    assert stored.deployment_ids == [platform.deployment_id] and platforms.refused_deployments(stored) == []
    assert f'id="refused-{stored.id}"' not in admin_client.get("/admin/lti").text

    admin_client.cookies.clear()
    assert flow.launch(LaunchSpec()).status_code == 303  # let in from now on


def test_the_close_script_posts_the_close_message(client: TestClient) -> None:
    response = client.get("/lti/close.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert 'postMessage({subject: "org.imsglobal.lti.close"}' in response.text
    assert "window.opener || window.parent" in response.text


def test_registration_when_not_logged_in_comes_back_with_its_query(
    client: TestClient, platform: LoopbackPlatform, admin: User, db_session: Session
) -> None:
    response = _register(client, platform)
    assert response.status_code == 303
    location = urlsplit(response.headers["location"])
    assert location.path == "/login"
    back = parse_qs(location.query)["next"][0]
    assert urlsplit(back).path == "/lti/register"
    assert parse_qs(urlsplit(back).query) == {
        "openid_configuration": [platform.openid_configuration_url], "registration_token": ["reg-token"],
    }  # fmt: skip
    page = client.get(response.headers["location"])
    assert f'name="next" value="{html.escape(back)}"' in page.text  # the log-in form carries it on
    # In the platform's frame a log-in from another tab does not count (partitioned cookies): the page says so and
    # links to the same registration in a tab of its own.
    assert "does not count here" in page.text
    assert f'<a href="{html.escape(back)}" target="_blank" rel="noopener">' in page.text
    assert "does not count here" not in client.get("/login?next=/exercises").text
    assert platform.registrations == [] and _platforms(db_session) == 0


def test_registration_needs_the_admin_role(
    client: TestClient, platform: LoopbackPlatform, make_user: Callable[..., User], login, db_session: Session
) -> None:
    login(client, make_user(Role.instructor))
    response = _register(client, platform)
    assert response.status_code == 403
    assert "needs the admin role" in response.text
    assert platform.config_requests == [] and _platforms(db_session) == 0


def test_an_issuer_on_another_host_is_refused(
    admin_client: TestClient, platform: LoopbackPlatform, db_session: Session
) -> None:
    platform.config_overrides = {"issuer": f"http://localhost:{platform.port}"}
    response = _register(admin_client, platform)
    assert response.status_code == 400
    assert "is not on the host of its configuration URL" in html.unescape(response.text)
    assert platform.registrations == [] and _platforms(db_session) == 0


def test_a_configuration_without_registration_endpoint_is_refused(
    admin_client: TestClient, platform: LoopbackPlatform, db_session: Session
) -> None:
    platform.config_overrides = {"registration_endpoint": None}
    response = _register(admin_client, platform)
    assert response.status_code == 400
    assert "registration_endpoint" in response.text and "incomplete" in response.text
    assert _platforms(db_session) == 0


def test_a_configuration_without_rs256_is_refused(admin_client: TestClient, platform: LoopbackPlatform) -> None:
    platform.config_overrides = {"id_token_signing_alg_values_supported": ["HS256"]}
    response = _register(admin_client, platform)
    assert response.status_code == 400 and "RS256" in response.text


def test_a_refused_registration_token_stores_nothing(
    admin_client: TestClient, platform: LoopbackPlatform, db_session: Session
) -> None:
    platform.registration_token = "the-right-one"
    response = _register(admin_client, platform, token="a-wrong-one")
    assert response.status_code == 400 and "HTTP 401" in response.text
    assert _platforms(db_session) == 0


def test_an_unreachable_platform(admin_client: TestClient, platform: LoopbackPlatform) -> None:
    platform.stop()
    response = _register(admin_client, platform)
    assert response.status_code == 400 and "could not reach" in response.text


def test_registration_without_configuration(admin_client: TestClient) -> None:
    response = admin_client.get("/lti/register")
    assert response.status_code == 400 and "openid_configuration" in response.text


def test_manual_registration_rules(db_session: Session) -> None:
    fields: dict[str, Any] = {
        "issuer": "https://moodle.example.edu", "client_id": "abc", "name": "",
        "auth_login_url": "https://moodle.example.edu/mod/lti/auth.php",
        "auth_token_url": "https://moodle.example.edu/mod/lti/token.php",
        "jwks_url": "https://moodle.example.edu/mod/lti/certs.php",
    }  # fmt: skip
    stored = platforms.register(session=db_session, deployment_ids=["1", "1", "2"], **fields)
    assert (stored.name, stored.deployment_ids) == ("moodle.example.edu", ["1", "2"])
    with pytest.raises(Conflict):
        platforms.register(session=db_session, **fields)
    with pytest.raises(InvalidInput, match="https"):
        platforms.register(session=db_session, **{**fields, "client_id": "x", "jwks_url": "http://moodle.example.edu/"})
    with pytest.raises(InvalidInput, match="query"):
        platforms.register(
            session=db_session, **{**fields, "client_id": "y", "issuer": "https://moodle.example.edu/?a=1"}
        )
    platforms.add_deployment(platform=stored, deployment_id="3")
    platforms.add_deployment(platform=stored, deployment_id="3")
    assert stored.deployment_ids == ["1", "2", "3"]
    assert platforms.find(session=db_session, issuer=fields["issuer"], client_id=None) is stored
