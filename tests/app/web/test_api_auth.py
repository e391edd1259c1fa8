"""Log in, log out, who am I, login rate limiting and the CSRF rule, through the HTTP API."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.domain.accounts.passwords import hash_password
from app.domain.models import Role, User
from tests.conftest import PASSWORD, TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def test_login_sets_an_httponly_lax_cookie_and_me_answers(client: TestClient, learner: User) -> None:
    response = client.post("/api/auth/login", json={"email": learner.email.upper(), "password": PASSWORD})
    assert response.status_code == 200
    assert response.json() == {"email": learner.email, "role": "learner", "must_change_password": False}
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("gpulab_session=")
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()
    assert "secure" not in cookie.lower()  # cookie_secure defaults to False
    me = client.get("/api/auth/me")
    assert me.status_code == 200
    assert me.json() == {"email": learner.email, "role": "learner", "must_change_password": False}


def test_wrong_password_and_unknown_email_get_the_same_401(client: TestClient, learner: User) -> None:
    wrong = client.post("/api/auth/login", json={"email": learner.email, "password": "not the password"})
    unknown = client.post("/api/auth/login", json={"email": "nobody@example.com", "password": PASSWORD})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()  # nothing tells whether the e-mail exists
    assert wrong.json()["detail"] == "wrong email or password"
    assert "set-cookie" not in wrong.headers
    assert client.get("/api/auth/me").status_code == 401


def test_inactive_user_cannot_log_in(client: TestClient, learner: User, db_session: Session) -> None:
    learner.is_active = False
    db_session.commit()
    response = client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
    assert response.status_code == 401


def test_rate_limit_after_max_failures(client: TestClient, learner: User) -> None:
    limit = client.app.state.settings.login_max_failures
    for _ in range(limit):
        response = client.post("/api/auth/login", json={"email": learner.email, "password": "guess"})
        assert response.status_code == 401
    refused = client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
    assert refused.status_code == 429  # even the right password, while the window lasts
    assert int(refused.headers["retry-after"]) > 0
    assert "too many failed logins" in refused.json()["detail"]
    # The client IP is locked out too, for any e-mail.
    other = client.post("/api/auth/login", json={"email": "someone@example.com", "password": "x"})
    assert other.status_code == 429


def test_logout_ends_the_session_even_for_a_copied_cookie(client: TestClient, learner: User) -> None:
    client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
    stolen = client.cookies.get("gpulab_session")
    assert stolen
    response = client.post("/api/auth/logout", headers={"Content-Type": "application/json"})
    assert response.status_code == 204
    assert client.get("/api/auth/me").status_code == 401
    client.cookies.set("gpulab_session", stolen)
    assert client.get("/api/auth/me").status_code == 401


def test_password_change_ends_older_sessions(client: TestClient, learner: User, db_session: Session) -> None:
    client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
    assert client.get("/api/auth/me").status_code == 200
    learner.password_hash = hash_password("a brand new password")
    db_session.commit()
    assert client.get("/api/auth/me").status_code == 401


def test_tampered_cookie_is_not_a_session(client: TestClient, learner: User) -> None:
    client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
    value = client.cookies.get("gpulab_session")
    assert value
    client.cookies.set("gpulab_session", value[:-2] + ("AA" if not value.endswith("AA") else "BB"))
    assert client.get("/api/auth/me").status_code == 401


def test_unauthenticated_api_calls_get_401(client: TestClient) -> None:
    for path in ("/api/auth/me", "/api/exercises", "/api/exercises/anything", "/api/me/submissions"):
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json()["detail"] == "log in first", path
        assert response.json()["type"] == "https://gpulab.dev/problems/unauthorized", path


def test_role_check_admin_dependency(make_user: Callable[..., User]) -> None:
    from app.web.deps import require_role
    from worker.core.errors import Forbidden

    check = require_role(Role.admin)  # async: it runs on the event loop, not in the threadpool
    assert asyncio.run(check(make_user(Role.admin))).role is Role.admin
    with pytest.raises(Forbidden, match="admin role"):
        asyncio.run(check(make_user(Role.instructor)))


class TestCsrf:
    def test_text_plain_post_with_session_cookie_is_refused(
        self, learner_client: TestClient, tiny_exercise: TinyExercise
    ) -> None:
        response = learner_client.post(
            f"/api/exercises/{tiny_exercise.slug}/submissions",
            content=b'{"code": "x = 1"}',
            headers={"Content-Type": "text/plain"},
        )
        assert response.status_code == 403
        assert "Content-Type: application/json" in response.json()["detail"]

    def test_form_post_with_session_cookie_is_refused(self, learner_client: TestClient) -> None:
        response = learner_client.post("/api/auth/logout", data={"a": "b"})
        assert response.status_code == 403
        assert learner_client.get("/api/auth/me").status_code == 200  # still logged in

    def test_foreign_origin_is_refused(self, learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
        response = learner_client.post(
            f"/api/exercises/{tiny_exercise.slug}/submissions",
            json={"code": "x = 1"},
            headers={"Origin": "https://evil.example"},
        )
        assert response.status_code == 403
        assert "does not match this site" in response.json()["detail"]

    def test_same_origin_json_is_allowed(self, learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
        response = learner_client.post(
            f"/api/exercises/{tiny_exercise.slug}/submissions",
            json={"code": "x = 1"},
            headers={"Origin": "http://testserver"},
        )
        assert response.status_code == 202

    def test_cross_site_login_form_is_refused(self, client: TestClient, learner: User) -> None:
        response = client.post("/api/auth/login", data={"email": learner.email, "password": PASSWORD})
        assert response.status_code == 403
