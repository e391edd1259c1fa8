"""Every launch gpulab must refuse is a clear page with 400/401/403, stores nothing and signs nobody in."""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from itsdangerous.timed import TimestampSigner
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.lti import platforms
from app.domain.models import Course, CourseMember, LtiLink, LtiNonce, LtiPlatform, LtiUser, User
from tests.app.domain.lti.conftest import Flow, Started
from tests.app.domain.lti.platform import LaunchSpec, LoopbackPlatform, b64, new_key

TABLES = (User, LtiUser, Course, CourseMember, LtiLink, LtiNonce)


def _counts(session: Session) -> dict[str, int]:
    return {t.__tablename__: session.scalar(select(func.count()).select_from(t)) or 0 for t in TABLES}


@dataclass
class Checked:
    """A refusal test's view: the flow, and what the database held before the refused request."""

    flow: Flow
    session: Session
    before: dict[str, int]

    def refused(self, response: httpx.Response, status: int, *words: str, noted: bool = False) -> None:
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("text/html")
        text = html.unescape(response.text)
        said = "gpulab listed the refused deployment for its admins; nothing else was changed"
        assert (said if noted else "Nothing was changed in gpulab") in text
        for word in words:
            assert word in text, text
        assert _counts(self.session) == self.before
        assert self.flow.client.get("/api/auth/me").status_code == 401  # nobody signed in


@pytest.fixture
def checked(flow: Flow, registered, db_session: Session) -> Iterator[Checked]:
    yield Checked(flow, db_session, _counts(db_session))


def _post(checked: Checked, started: Started, token: str) -> httpx.Response:
    return checked.flow.post({"id_token": token, "state": started.state})


def _forged(checked: Checked, spec: LaunchSpec, **overrides: object) -> httpx.Response:
    started = checked.flow.login(spec)
    token = checked.flow.platform.id_token(nonce=started.nonce, spec=spec, **overrides)  # type: ignore[arg-type]
    return _post(checked, started, token)


# --- the login initiation ---------------------------------------------------------------------------------


def test_unknown_platform_at_login(checked: Checked) -> None:
    params = checked.flow.login_params(LaunchSpec(), iss="https://unknown.example.edu")
    response = checked.flow.client.get("/lti/login", params=params, follow_redirects=False)
    checked.refused(response, 403, "is not registered with gpulab")


def _refused_deployments(session: Session, platform: LtiPlatform) -> list[tuple[str, int]]:
    session.expire_all()
    stored = session.get(LtiPlatform, platform.id)
    assert stored is not None
    return [(r.deployment_id, r.launches) for r in platforms.refused_deployments(stored)]


def test_an_unknown_deployment_is_judged_on_the_signed_launch_and_listed_for_the_admins(
    checked: Checked, registered: LtiPlatform
) -> None:
    spec = LaunchSpec(deployment_id="somewhere-else")
    started = checked.flow.login(spec)  # anyone can send a login initiation: it decides nothing
    assert started.params["client_id"] == registered.client_id
    assert _refused_deployments(checked.session, registered) == []
    checked.refused(checked.flow.post(checked.flow.authorise(started)), 403, "somewhere-else", "listed", noted=True)
    assert _refused_deployments(checked.session, registered) == [("somewhere-else", 1)]
    checked.refused(checked.flow.launch(spec), 403, "somewhere-else", noted=True)
    assert _refused_deployments(checked.session, registered) == [("somewhere-else", 2)]
    assert checked.session.get(LtiPlatform, registered.id).deployment_ids == [checked.flow.platform.deployment_id]  # type: ignore[union-attr]


def test_an_unverified_token_from_an_unknown_deployment_is_not_listed(
    checked: Checked, registered: LtiPlatform
) -> None:
    claims = {"https://purl.imsglobal.org/spec/lti/claim/deployment_id": "made-up", "aud": "another-tool"}
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 401, "another tool")
    checked.refused(_forged(checked, LaunchSpec(deployment_id="made-up"), key=new_key()), 401, "does not publish")
    assert _refused_deployments(checked.session, registered) == []


def test_target_off_gpulab_at_login(checked: Checked) -> None:
    params = checked.flow.login_params(LaunchSpec(target_link_uri="https://evil.example.com/phish"))
    response = checked.flow.client.get("/lti/login", params=params, follow_redirects=False)
    checked.refused(response, 400, "is not on gpulab")


def test_login_without_parameters(checked: Checked) -> None:
    response = checked.flow.client.get("/lti/login", params={"iss": checked.flow.platform.issuer})
    checked.refused(response, 400, "lacks login_hint, target_link_uri")


# --- the state --------------------------------------------------------------------------------------------


def test_a_state_this_browser_never_started(checked: Checked) -> None:
    spec = LaunchSpec()
    started = checked.flow.login(spec)
    form = checked.flow.authorise(started)
    checked.flow.client.cookies.clear()  # another browser posts the token
    checked.refused(checked.flow.post(form), 403, "did not start in this browser")


def test_a_forged_state_cookie(checked: Checked) -> None:
    started = checked.flow.login(LaunchSpec())
    form = checked.flow.authorise(started)
    client = checked.flow.client
    client.cookies.clear()
    client.cookies.set(f"gpulab_lti_{started.state}", "forged.value.here", path="/lti/launch")
    checked.refused(checked.flow.post(form), 403, "not gpulab's")


def test_a_state_that_is_not_a_state(checked: Checked) -> None:
    checked.refused(checked.flow.post({"id_token": "x", "state": "bad state; Path=/"}), 403, "state")


def test_a_state_cookie_of_another_login(checked: Checked) -> None:
    first = checked.flow.login(LaunchSpec())
    second = checked.flow.login(LaunchSpec())
    cookie = checked.flow.client.cookies.get(f"gpulab_lti_{first.state}")
    checked.flow.client.cookies.set(f"gpulab_lti_{second.state}", cookie or "", path="/lti/launch")
    token = checked.flow.platform.id_token(nonce=second.nonce, spec=LaunchSpec())
    checked.refused(_post(checked, second, token), 403, "does not match")


def test_an_expired_state(checked: Checked, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = LaunchSpec()
    started = checked.flow.login(spec)
    form = checked.flow.authorise(started)
    real = TimestampSigner.get_timestamp
    monkeypatch.setattr(TimestampSigner, "get_timestamp", lambda self: real(self) + 3600)  # gpulab's clock only
    checked.refused(checked.flow.post(form), 403, "took too long")


# --- the token --------------------------------------------------------------------------------------------


def test_an_unsigned_token(checked: Checked) -> None:
    spec = LaunchSpec()
    started = checked.flow.login(spec)
    token = checked.flow.platform.unsigned_token(nonce=started.nonce, spec=spec)
    checked.refused(_post(checked, started, token), 401, "unsigned (alg: none)")


def test_a_token_signed_with_the_public_key_as_hmac_secret(checked: Checked) -> None:
    # The classic confusion: HMAC keyed with the public key's PEM, which a careless verifier would accept.
    platform = checked.flow.platform
    spec = LaunchSpec()
    started = checked.flow.login(spec)
    header = b64({"alg": "HS256", "typ": "JWT", "kid": platform.keys[0].kid})
    signing_input = f"{header}.{b64(platform.claims(nonce=started.nonce, spec=spec))}"
    mac = hmac.new(platform.keys[0].as_pem(private=False), signing_input.encode(), hashlib.sha256).digest()
    token = f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    checked.refused(_post(checked, started, token), 401, "'HS256'", "RS256")


def test_a_token_that_is_not_a_jwt(checked: Checked) -> None:
    started = checked.flow.login(LaunchSpec())
    checked.refused(_post(checked, started, "not-a-token"), 401, "not a signed JWT")


def test_no_token_at_all(checked: Checked) -> None:
    started = checked.flow.login(LaunchSpec())
    checked.refused(_post(checked, started, ""), 401, "no id_token")


def test_a_signature_by_another_key_under_a_published_kid(checked: Checked) -> None:
    impostor = new_key()
    header = {"kid": checked.flow.platform.keys[0].kid}
    checked.refused(_forged(checked, LaunchSpec(), key=impostor, header=header), 401, "does not verify")


def test_an_unknown_kid_after_one_refetch(checked: Checked, platform: LoopbackPlatform) -> None:
    assert checked.flow.launch(LaunchSpec()).status_code == 303  # the keys are cached now
    checked.flow.client.cookies.clear()
    checked.before = _counts(checked.session)
    assert platform.jwks_fetches == 1
    response = _forged(checked, LaunchSpec(), key=new_key())
    checked.refused(response, 401, "does not publish")
    assert platform.jwks_fetches == 2  # refetched once for the unknown kid, then refused


def test_a_token_for_another_tool(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(), claims={"aud": "someone-else"}), 401, "meant for another tool")


def test_several_audiences_without_azp(checked: Checked) -> None:
    audiences = [checked.flow.platform.client_id, "someone-else"]
    checked.refused(_forged(checked, LaunchSpec(), claims={"aud": audiences}), 401, "azp")


def test_an_azp_naming_another_tool(checked: Checked) -> None:
    claims = {"aud": [checked.flow.platform.client_id, "other"], "azp": "other"}
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 401, "azp")


def test_several_audiences_with_our_azp_are_fine(checked: Checked) -> None:
    claims = {"aud": [checked.flow.platform.client_id, "other"], "azp": checked.flow.platform.client_id}
    assert _forged(checked, LaunchSpec(), claims=claims).status_code == 303


def test_a_token_from_another_issuer(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(), claims={"iss": "https://other.example.edu"}), 401, "is from")


def test_an_expired_token(checked: Checked) -> None:
    now = int(time.time())
    claims = {"exp": now - 120, "iat": now - 420}  # beyond the 60 s leeway
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 401, "has expired")


def test_a_token_just_past_exp_within_the_leeway_is_fine(checked: Checked) -> None:
    now = int(time.time())
    assert _forged(checked, LaunchSpec(), claims={"exp": now - 10, "iat": now - 300}).status_code == 303


def test_a_token_issued_in_the_future(checked: Checked) -> None:
    claims = {"iat": int(time.time()) + 600, "exp": int(time.time()) + 900}
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 401, "issued in the future")


def test_a_token_without_exp_or_with_a_nan_exp(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(), claims={"exp": None}), 401, "no valid exp")
    checked.refused(_forged(checked, LaunchSpec(), claims={"exp": float("nan")}), 401, "no valid exp")
    checked.refused(_forged(checked, LaunchSpec(), claims={"exp": 10**400}), 401, "no valid exp")


def test_a_nonce_of_another_login(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(), claims={"nonce": "another-nonce"}), 401, "nonce")


def test_a_replayed_token(checked: Checked) -> None:
    spec = LaunchSpec()
    started = checked.flow.login(spec)
    form = checked.flow.authorise(started)
    cookie_name = f"gpulab_lti_{started.state}"
    cookie = checked.flow.client.cookies.get(cookie_name)
    assert checked.flow.post(form).status_code == 303
    checked.flow.client.get("/api/auth/me")
    checked.flow.client.cookies.clear()  # the replayer: the same token, state and state cookie, later
    checked.flow.client.cookies.set(cookie_name, cookie or "", path="/lti/launch")
    checked.before = _counts(checked.session)
    checked.refused(checked.flow.post(form), 401, "used before")


def test_a_deployment_the_platform_did_not_register(checked: Checked, registered: LtiPlatform) -> None:
    claims = {"https://purl.imsglobal.org/spec/lti/claim/deployment_id": "rogue-deployment"}
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 403, "rogue-deployment", noted=True)
    assert _refused_deployments(checked.session, registered) == [("rogue-deployment", 1)]


@pytest.mark.parametrize("deployment", [None, 42, ["1"], "", " padded ", "x" * 256, "tab\there"])
def test_a_launch_without_a_usable_deployment_is_refused_and_not_listed(
    checked: Checked, registered: LtiPlatform, deployment: object
) -> None:
    claims = {"https://purl.imsglobal.org/spec/lti/claim/deployment_id": deployment}  # None: no such claim
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 403, "no usable deployment")
    assert _refused_deployments(checked.session, registered) == []


def test_a_deep_linking_request_without_its_settings_claim(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(message_type="LtiDeepLinkingRequest")), 400, "deep linking")


def test_another_message_type(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(message_type="LtiSubmissionReviewRequest")), 400, "resource link")


def test_another_lti_version(checked: Checked) -> None:
    claims = {"https://purl.imsglobal.org/spec/lti/claim/version": "1.1"}
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 400, "1.3.0")


def test_an_anonymous_launch(checked: Checked) -> None:
    checked.refused(_forged(checked, LaunchSpec(), claims={"sub": None}), 400, "anonymous")


def test_a_launch_without_resource_link(checked: Checked) -> None:
    claims = {"https://purl.imsglobal.org/spec/lti/claim/resource_link": {"title": "no id"}}
    checked.refused(_forged(checked, LaunchSpec(), claims=claims), 400, "resource link id")


def test_the_platform_answered_an_error(checked: Checked) -> None:
    started = checked.flow.login(LaunchSpec())
    form = {"state": started.state, "error": "login_required", "error_description": "log in to the platform"}
    checked.refused(checked.flow.post(form), 400, "login_required")


def test_the_platform_keys_unreachable(checked: Checked, platform: LoopbackPlatform) -> None:
    started = checked.flow.login(LaunchSpec())
    token = platform.id_token(nonce=started.nonce, spec=LaunchSpec())
    platform.stop()
    checked.refused(_post(checked, started, token), 401, "could not fetch the platform's keys")


def test_a_disabled_account(checked: Checked, registered) -> None:
    spec = LaunchSpec()
    assert checked.flow.launch(spec).status_code == 303
    row = checked.session.scalar(select(LtiUser).where(LtiUser.sub == spec.sub))
    assert row is not None
    row.user.is_active = False
    checked.session.commit()
    checked.flow.client.cookies.clear()
    checked.before = _counts(checked.session)
    checked.refused(checked.flow.launch(spec), 403, "disabled")


def test_get_on_the_launch_endpoint(checked: Checked) -> None:
    assert checked.flow.client.get("/lti/launch").status_code == 405
