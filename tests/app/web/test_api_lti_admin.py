"""``/api/admin/lti``: manual registration of platforms, deployments, gpulab's keys and the score outbox, for admins.

Covers: everyone but an admin is refused (and writes nothing); a platform registered through the API is stored
and a loopback platform launches with it; a duplicate is 409 and a bad URL 422, both writing nothing; deployments
added let launches in, removed keep them out; a platform is deleted only while nothing launched from it;
rotating makes a new current key while the old kid stays in ``/lti/jwks`` (within the grace period); the outbox
lists unsent rows (pending, retrying, failed) and "retry" makes one due now, a given-up one included. Verified
launches from unknown deployments are listed per platform, accepted (then let in) or dismissed (still refused);
a platform may accept its client's new deployments as they launch.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.lti import keys, platforms
from app.domain.models import LtiLink, LtiPlatform, LtiScoreOutbox, LtiToolKey, LtiUser, Role, User, utcnow
from app.settings import Settings
from tests.app.domain.lti.conftest import Flow
from tests.app.domain.lti.platform import LaunchSpec, LoopbackPlatform
from worker.core.config import Mode

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

API = "/api/admin/lti"
JSON = {"Content-Type": "application/json"}  # the API's CSRF rule, for calls without a body


def platform_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "issuer": "https://moodle.example.edu",
        "client_id": "abc123",
        "name": "Moodle",
        "auth_login_url": "https://moodle.example.edu/mod/lti/auth.php",
        "auth_token_url": "https://moodle.example.edu/mod/lti/token.php",
        "jwks_url": "https://moodle.example.edu/mod/lti/certs.php",
        "deployment_ids": ["1"],
    }
    body.update(changes)
    return body


def platform_count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(LtiPlatform)) or 0


def make_outbox_row(session: Session, platform: LtiPlatform, user: User, **fields: Any) -> LtiScoreOutbox:
    """Store a link of ``platform`` and an unsent score of ``user`` on it (as ``scores.queue_score`` would)."""
    link = LtiLink(platform_id=platform.id, deployment_id="1", resource_link_id=f"rl-{secrets.token_hex(4)}",
                   title="Week 1", lineitem_url="https://moodle.example.edu/ags/lineitems/1")  # fmt: skip
    session.add(link)
    session.flush()
    row = LtiScoreOutbox(
        platform_id=platform.id, link_id=link.id, user_id=user.id, lineitem_url=str(link.lineitem_url),
        payload={"scoreGiven": 40.0, "scoreMaximum": 100.0, "userId": "sub-1"}, created_at=utcnow(),
        **{"attempts": 0, "next_attempt_at": utcnow(), **fields},
    )  # fmt: skip
    session.add(row)
    session.commit()
    return row


@pytest.fixture
def loopback() -> Iterator[LoopbackPlatform]:
    running = LoopbackPlatform().start()
    try:
        yield running
    finally:
        running.stop()


# --- who may -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", [None, Role.learner, Role.instructor])
def test_everyone_but_an_admin_is_refused_and_writes_nothing(
    role: Role | None, client: TestClient, make_user: Callable[..., User], login: Callable[..., None],
    db_session: Session, moodle: LtiPlatform,
) -> None:  # fmt: skip
    if role is not None:
        login(client, make_user(role))
    expected = 401 if role is None else 403
    platforms.note_refused(session=db_session, platform_id=moodle.id, deployment_id="9")
    db_session.commit()
    kids = list(db_session.scalars(select(LtiToolKey.kid)))
    calls = [
        client.get(f"{API}/platforms"),
        client.post(f"{API}/platforms", json=platform_body(client_id="other")),
        client.post(f"{API}/platforms/{moodle.id}/deployments", json={"deployment_id": "2"}),
        client.delete(f"{API}/platforms/{moodle.id}/deployments/1", headers=JSON),
        client.delete(f"{API}/platforms/{moodle.id}", headers=JSON),
        client.patch(f"{API}/platforms/{moodle.id}", json={"accept_new_deployments": True}),
        client.post(f"{API}/platforms/{moodle.id}/refused-deployments/accept", json={"deployment_id": "9"}),
        client.delete(f"{API}/platforms/{moodle.id}/refused-deployments/9", headers=JSON),
        client.get(f"{API}/keys"),
        client.post(f"{API}/keys/rotate", headers=JSON),
        client.get(f"{API}/outbox"),
    ]
    assert [call.status_code for call in calls] == [expected] * len(calls)
    assert calls[0].headers["content-type"] == "application/problem+json"
    db_session.expire_all()
    assert platform_count(db_session) == 1
    assert db_session.get(LtiPlatform, moodle.id) is not None
    stored = db_session.get(LtiPlatform, moodle.id)
    assert stored is not None and stored.deployment_ids == ["1"] and not stored.accept_new_deployments
    assert [r.deployment_id for r in platforms.refused_deployments(stored)] == ["9"]
    assert list(db_session.scalars(select(LtiToolKey.kid))) == kids


# --- platforms -----------------------------------------------------------------------------------------------


def test_manual_registration_stores_a_platform_that_launches(
    admin_client: TestClient, db_session: Session, loopback: LoopbackPlatform
) -> None:
    body = {
        "issuer": loopback.issuer, "client_id": loopback.client_id, "name": " Loopback ",
        "auth_login_url": loopback.auth_url, "auth_token_url": loopback.token_url, "jwks_url": loopback.jwks_url,
        "deployment_ids": [loopback.deployment_id, loopback.deployment_id],
    }  # fmt: skip
    created = admin_client.post(f"{API}/platforms", json=body)
    assert created.status_code == 201, created.text
    shown = created.json()
    assert (shown["issuer"], shown["client_id"], shown["name"]) == (loopback.issuer, loopback.client_id, "Loopback")
    assert shown["deployment_ids"] == [loopback.deployment_id]  # once
    assert (shown["users"], shown["links"], shown["deletable"]) == (0, 0, True)
    stored = platforms.find(session=db_session, issuer=loopback.issuer, client_id=loopback.client_id)
    assert stored.id == shown["id"] and stored.jwks_url == loopback.jwks_url and stored.audience is None
    assert [p["id"] for p in admin_client.get(f"{API}/platforms").json()] == [stored.id]
    assert admin_client.get(f"{API}/platforms/{stored.id}").json() == shown

    launched = Flow(admin_client, loopback).launch(LaunchSpec())
    assert launched.status_code == 303, launched.text
    assert db_session.scalar(select(func.count()).select_from(LtiUser).where(LtiUser.platform_id == stored.id)) == 1


def test_a_duplicate_registration_is_a_conflict(admin_client: TestClient, db_session: Session, moodle) -> None:
    again = admin_client.post(f"{API}/platforms", json=platform_body(name="Moodle again"))
    assert again.status_code == 409, again.text
    assert again.json()["type"].endswith("/conflict") and "registered already" in again.json()["detail"]
    db_session.expire_all()
    assert platform_count(db_session) == 1 and db_session.get(LtiPlatform, moodle.id).name == "Moodle"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("jwks_url", "ftp://moodle.example.edu/certs", "JWKS URL"),
        ("auth_login_url", "https://[broken/auth", "authorisation URL"),
        ("issuer", "https://moodle.example.edu/?x=1", "issuer"),
        ("client_id", "   ", "client id"),
        ("deployment_ids", ["1", "bad\x00id"], "deployment id"),
    ],
)
def test_a_malformed_field_is_refused_and_nothing_is_written(
    admin_client: TestClient, db_session: Session, field: str, value: Any, said: str
) -> None:
    refused = admin_client.post(f"{API}/platforms", json=platform_body(**{field: value}))
    assert refused.status_code == 422, refused.text
    assert said in refused.json()["detail"]
    assert platform_count(db_session) == 0
    assert admin_client.get(f"{API}/platforms").json() == []


def test_http_urls_are_refused_outside_dev_mode(
    admin_client: TestClient, db_session: Session, app: Any, settings: Settings
) -> None:
    app.state.settings = settings.model_copy(update={"mode": Mode.production})
    assert not app.state.settings.relaxed
    refused = admin_client.post(f"{API}/platforms", json=platform_body(jwks_url="http://moodle.example.edu/certs"))
    assert refused.status_code == 422 and "https" in refused.json()["detail"]
    assert platform_count(db_session) == 0


def test_deployments_added_let_launches_in_and_removed_keep_them_out(
    admin_client: TestClient, db_session: Session, loopback: LoopbackPlatform, admin: User,
    login: Callable[..., None],
) -> None:  # fmt: skip
    body = {
        "issuer": loopback.issuer, "client_id": loopback.client_id, "auth_login_url": loopback.auth_url,
        "auth_token_url": loopback.token_url, "jwks_url": loopback.jwks_url,
    }  # fmt: skip
    platform_id = admin_client.post(f"{API}/platforms", json=body).json()["id"]
    flow = Flow(admin_client, loopback)
    spec = LaunchSpec()
    assert flow.launch(spec).status_code == 403

    deployments = f"{API}/platforms/{platform_id}/deployments"
    added = admin_client.post(deployments, json={"deployment_id": loopback.deployment_id})
    assert added.status_code == 200, added.text
    assert added.json()["deployment_ids"] == [loopback.deployment_id]
    again = admin_client.post(deployments, json={"deployment_id": "canvas:42/x"})
    assert again.json()["deployment_ids"] == [loopback.deployment_id, "canvas:42/x"]
    bad = admin_client.post(deployments, json={"deployment_id": " "})
    assert bad.status_code == 422
    assert flow.launch(LaunchSpec()).status_code == 303  # let in now (and signed in as the platform's learner)
    login(admin_client, admin)

    removed = admin_client.delete(f"{API}/platforms/{platform_id}/deployments/canvas:42/x", headers=JSON)
    assert removed.status_code == 200, removed.text
    assert removed.json()["deployment_ids"] == [loopback.deployment_id]
    removed = admin_client.delete(f"{API}/platforms/{platform_id}/deployments/{loopback.deployment_id}", headers=JSON)
    assert removed.json()["deployment_ids"] == []
    db_session.expire_all()
    assert db_session.get(LtiPlatform, platform_id).deployment_ids == []  # type: ignore[union-attr]
    admin_client.cookies.clear()
    assert flow.launch(LaunchSpec()).status_code == 403
    login(admin_client, admin)

    unknown = admin_client.delete(f"{API}/platforms/{platform_id}/deployments/nope", headers=JSON)
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    assert admin_client.post(f"{API}/platforms/999999/deployments", json={"deployment_id": "1"}).status_code == 404


def test_refused_deployments_are_listed_accepted_and_dismissed(
    admin_client: TestClient, db_session: Session, loopback: LoopbackPlatform, admin: User,
    login: Callable[..., None],
) -> None:  # fmt: skip
    body = {
        "issuer": loopback.issuer, "client_id": loopback.client_id, "auth_login_url": loopback.auth_url,
        "auth_token_url": loopback.token_url, "jwks_url": loopback.jwks_url,
    }  # fmt: skip
    created = admin_client.post(f"{API}/platforms", json=body).json()
    assert (created["refused_deployments"], created["accept_new_deployments"]) == ([], False)
    platform_id = created["id"]
    flow = Flow(admin_client, loopback)
    admin_client.cookies.clear()  # the platform's people launch from two installs gpulab does not know
    for deployment in ("install-a", "install-b", "install-a"):
        assert flow.launch(LaunchSpec(deployment_id=deployment)).status_code == 403
    login(admin_client, admin)

    shown = admin_client.get(f"{API}/platforms/{platform_id}").json()
    refused = {r["deployment_id"]: r for r in shown["refused_deployments"]}
    assert [r["deployment_id"] for r in shown["refused_deployments"]] == ["install-a", "install-b"]  # newest first
    assert (refused["install-a"]["launches"], refused["install-b"]["launches"]) == (2, 1)
    assert refused["install-a"]["first_at"] < refused["install-a"]["last_at"]
    assert refused["install-a"]["last_at"].endswith("Z") or refused["install-a"]["last_at"].endswith("+00:00")

    accept = f"{API}/platforms/{platform_id}/refused-deployments/accept"
    accepted = admin_client.post(accept, json={"deployment_id": "install-a"})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["deployment_ids"] == ["install-a"]
    assert [r["deployment_id"] for r in accepted.json()["refused_deployments"]] == ["install-b"]
    again = admin_client.post(accept, json={"deployment_id": "install-a"})  # no longer refused
    assert again.status_code == 404 and "install-a" in again.json()["detail"]
    assert admin_client.post(accept, json={"deployment_id": "install-a", "x": 1}).status_code == 422

    dismissed = admin_client.delete(f"{API}/platforms/{platform_id}/refused-deployments/install-b", headers=JSON)
    assert dismissed.status_code == 200, dismissed.text
    assert (dismissed.json()["refused_deployments"], dismissed.json()["deployment_ids"]) == ([], ["install-a"])
    gone = admin_client.delete(f"{API}/platforms/{platform_id}/refused-deployments/install-b", headers=JSON)
    assert gone.status_code == 404

    admin_client.cookies.clear()
    assert flow.launch(LaunchSpec(deployment_id="install-a")).status_code == 303  # accepted: let in
    assert flow.launch(LaunchSpec(deployment_id="install-b")).status_code == 403  # dismissed: still refused
    login(admin_client, admin)
    shown = admin_client.get(f"{API}/platforms/{platform_id}").json()
    assert [(r["deployment_id"], r["launches"]) for r in shown["refused_deployments"]] == [("install-b", 1)]


def test_a_platform_may_accept_new_deployments_of_its_client(
    admin_client: TestClient, db_session: Session, loopback: LoopbackPlatform, admin: User,
    login: Callable[..., None],
) -> None:  # fmt: skip
    body = {
        "issuer": loopback.issuer, "client_id": loopback.client_id, "auth_login_url": loopback.auth_url,
        "auth_token_url": loopback.token_url, "jwks_url": loopback.jwks_url, "accept_new_deployments": True,
    }  # fmt: skip
    created = admin_client.post(f"{API}/platforms", json=body)
    assert created.status_code == 201 and created.json()["accept_new_deployments"] is True
    platform_id = created.json()["id"]
    admin_client.cookies.clear()
    assert Flow(admin_client, loopback).launch(LaunchSpec(deployment_id="course-12")).status_code == 303
    login(admin_client, admin)
    shown = admin_client.get(f"{API}/platforms/{platform_id}").json()
    assert (shown["deployment_ids"], shown["refused_deployments"]) == (["course-12"], [])

    switched = admin_client.patch(f"{API}/platforms/{platform_id}", json={"accept_new_deployments": False})
    assert switched.status_code == 200 and switched.json()["accept_new_deployments"] is False
    db_session.expire_all()
    assert db_session.get(LtiPlatform, platform_id).accept_new_deployments is False  # type: ignore[union-attr]
    bad = admin_client.patch(f"{API}/platforms/{platform_id}", json={"accept_new_deployments": "maybe"})
    assert bad.status_code == 422
    assert admin_client.patch(f"{API}/platforms/{platform_id}", json={"name": "x"}).status_code == 422
    assert admin_client.patch(f"{API}/platforms/999999", json={"accept_new_deployments": True}).status_code == 404


def test_a_platform_is_deleted_only_while_nothing_launched_from_it(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, learner: User
) -> None:
    spare = platforms.register(session=db_session, **platform_body(client_id="typo"))
    db_session.commit()
    make_outbox_row(db_session, moodle, learner)

    kept = admin_client.delete(f"{API}/platforms/{moodle.id}", headers=JSON)
    assert kept.status_code == 409, kept.text
    assert "1 link" in kept.json()["detail"]
    listed = {p["client_id"]: p for p in admin_client.get(f"{API}/platforms").json()}
    assert (listed["abc123"]["links"], listed["abc123"]["deletable"]) == (1, False)
    assert listed["typo"]["deletable"] is True

    gone = admin_client.delete(f"{API}/platforms/{spare.id}", headers=JSON)
    assert gone.status_code == 204, gone.text
    db_session.expire_all()
    assert db_session.get(LtiPlatform, spare.id) is None and db_session.get(LtiPlatform, moodle.id) is not None
    assert admin_client.delete(f"{API}/platforms/{spare.id}", headers=JSON).status_code == 404


# --- keys ----------------------------------------------------------------------------------------------------


def _jwks_kids(client: TestClient) -> list[str]:
    return [key["kid"] for key in client.get("/lti/jwks").json()["keys"]]


def test_rotating_makes_a_new_current_key_and_the_old_one_stays_published(
    admin_client: TestClient, db_session: Session, settings: Settings
) -> None:
    [first] = admin_client.get(f"{API}/keys").json()  # the first call makes the first key
    assert (first["current"], first["published"], first["retired_at"]) == (True, True, None)
    assert _jwks_kids(admin_client) == [first["kid"]]

    rotated = admin_client.post(f"{API}/keys/rotate", headers=JSON)
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()
    assert new["kid"] != first["kid"] and new["current"] is True
    assert keys.current(session=db_session).kid == new["kid"]  # it signs from now on
    assert _jwks_kids(admin_client) == [new["kid"], first["kid"]]  # the old one within the grace period
    listed = admin_client.get(f"{API}/keys").json()
    assert [k["kid"] for k in listed] == [new["kid"], first["kid"]]
    old = listed[1]
    assert (old["current"], old["published"]) == (False, True) and old["retired_at"] is not None

    row = db_session.scalars(select(LtiToolKey).where(LtiToolKey.kid == first["kid"])).one()
    row.retired_at = utcnow() - timedelta(seconds=settings.lti_key_grace_s + 60)
    db_session.commit()
    assert _jwks_kids(admin_client) == [new["kid"]]
    assert [k["published"] for k in admin_client.get(f"{API}/keys").json()] == [True, False]


# --- the outbox ----------------------------------------------------------------------------------------------


def test_retry_makes_an_unsent_score_due_now(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, learner: User
) -> None:
    later = utcnow() + timedelta(minutes=30)
    row = make_outbox_row(db_session, moodle, learner, attempts=3, next_attempt_at=later, last_error="HTTP 503")
    [shown] = admin_client.get(f"{API}/outbox").json()
    assert (shown["id"], shown["state"], shown["attempts"], shown["last_error"]) == (row.id, "retrying", 3, "HTTP 503")
    assert shown["given_up_at"] is None

    before = utcnow()
    retried = admin_client.post(f"{API}/outbox/{row.id}/retry", headers=JSON)
    assert retried.status_code == 200, retried.text
    db_session.expire_all()
    stored = db_session.get(LtiScoreOutbox, row.id)
    assert stored is not None and before <= stored.next_attempt_at <= utcnow() < later
    assert stored.attempts == 3 and stored.sent_at is None  # only the wait is cut short
    assert retried.json()["next_attempt_at"] == admin_client.get(f"{API}/outbox").json()[0]["next_attempt_at"]

    stored.sent_at = utcnow()
    db_session.commit()
    assert admin_client.post(f"{API}/outbox/{row.id}/retry", headers=JSON).status_code == 404  # sent: nothing owed
    assert admin_client.post(f"{API}/outbox/999999/retry", headers=JSON).status_code == 404
    assert admin_client.get(f"{API}/outbox").json() == []


def test_a_given_up_score_is_failed_and_retry_takes_it_up_again(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, learner: User
) -> None:
    given_up = utcnow() - timedelta(minutes=5)
    row = make_outbox_row(db_session, moodle, learner, attempts=1, given_up_at=given_up, last_error="HTTP 404")
    fresh = make_outbox_row(db_session, moodle, learner)
    states = {shown["id"]: (shown["state"], shown["given_up_at"]) for shown in admin_client.get(f"{API}/outbox").json()}
    assert states[fresh.id] == ("pending", None)
    assert states[row.id][0] == "failed" and states[row.id][1] is not None

    retried = admin_client.post(f"{API}/outbox/{row.id}/retry", headers=JSON)
    assert retried.status_code == 200, retried.text
    assert (retried.json()["state"], retried.json()["given_up_at"]) == ("retrying", None)
    db_session.expire_all()
    stored = db_session.get(LtiScoreOutbox, row.id)
    assert stored is not None and stored.given_up_at is None and stored.next_attempt_at <= utcnow()
