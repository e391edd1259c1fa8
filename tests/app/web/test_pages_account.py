"""Changing one's password, and the forced change of a one-time password (CSV enrollment, an admin's reset)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.domain.accounts import people
from app.domain.accounts.passwords import verify_password
from app.domain.models import Role, User
from tests.conftest import PASSWORD, make_test_client

NEW = "a-password-of-my-own"


def _csrf(page: str) -> str:
    marker = 'name="csrf_token" value="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]


def test_a_one_time_password_must_be_changed_before_anything_else(
    client: TestClient, db_session: Session, login: Callable[..., None]
) -> None:
    account = people.create_account(session=db_session, email="fresh@example.com", name="F", role=Role.learner)
    db_session.commit()
    user = db_session.query(User).filter_by(email="fresh@example.com").one()
    assert user.must_change_password
    login(client, user, account.password)

    assert client.get("/api/auth/me").json()["must_change_password"] is True
    refused = client.get("/api/exercises")
    assert refused.status_code == 403
    assert refused.json()["type"].endswith("/password-change-required")
    assert "/api/auth/password" in refused.json()["detail"]
    page = client.get("/courses", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/account/password?next=/courses"

    form = client.get("/account/password?next=/courses")
    assert form.status_code == 200 and 'id="password-forced"' in form.text
    differ = client.post("/account/password", data={
        "csrf_token": _csrf(form.text), "current": account.password, "new": NEW, "repeated": NEW + "x",
        "next": "/courses",
    })  # fmt: skip
    assert differ.status_code == 422 and "the two new passwords differ" in differ.text
    assert client.get("/api/exercises").status_code == 403  # still not changed

    done = client.post("/account/password", data={
        "csrf_token": _csrf(differ.text), "current": account.password, "new": NEW, "repeated": NEW, "next": "/courses",
    }, follow_redirects=False)  # fmt: skip
    assert done.status_code == 303 and done.headers["location"] == "/courses"
    assert client.get("/api/exercises").status_code == 200  # this session goes on, with the new fingerprint
    assert "Your password is changed" in client.get("/courses").text
    db_session.expire_all()
    user = db_session.get(User, user.id)
    assert user is not None and not user.must_change_password and verify_password(NEW, user.password_hash)


def test_the_api_changes_a_password_with_the_rules_and_ends_other_sessions(
    client: TestClient, app: object, learner: User, login: Callable[..., None], db_session: Session
) -> None:

    login(client, learner)
    with make_test_client(app) as other:
        login(other, learner)
        url = "/api/auth/password"
        wrong = client.post(url, json={"current": "not-it", "new": NEW, "repeated": NEW})
        assert wrong.status_code == 422 and "current password is wrong" in wrong.json()["detail"]
        short = client.post(url, json={"current": PASSWORD, "new": "short", "repeated": "short"})
        assert short.status_code == 422 and "8 to" in short.json()["detail"]
        same = client.post(url, json={"current": PASSWORD, "new": PASSWORD, "repeated": PASSWORD})
        assert same.status_code == 422 and "is the current one" in same.json()["detail"]
        assert client.post(url, json={"current": PASSWORD, "new": NEW, "repeated": NEW}).status_code == 204
        assert client.get("/api/auth/me").status_code == 200
        assert other.get("/api/auth/me").status_code == 401  # the other session ended
    assert client.post("/api/auth/login", json={"email": learner.email, "password": NEW}).status_code == 200


def test_an_admin_reset_makes_a_one_time_password_and_a_typed_one_does_not(db_session: Session, learner: User) -> None:
    assert not learner.must_change_password
    people.reset_password(session=db_session, user=learner)
    assert learner.must_change_password
    typed = people.create_account(
        session=db_session, email="typed@example.com", name="T", role=Role.learner, password="chosen-by-admin"
    )
    assert not db_session.query(User).filter_by(email=typed.email).one().must_change_password
