"""Password hashes on the real database: new accounts get argon2, an old scrypt hash upgrades at its next login."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from pwdlib import PasswordHash
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.accounts import people
from app.domain.accounts.passwords import authenticate, create_user, verify_password
from app.domain.models import Role, User
from tests.app.web.test_pages import form_token
from tests.app.web.test_sessions import old_scrypt_hash
from tests.conftest import PASSWORD

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def stored_hash(session: Session, user: User) -> str:
    """Return the hash the database holds for ``user`` (not the one in the session's memory)."""
    session.expire_all()
    return str(session.scalar(select(User.password_hash).where(User.id == user.id)))


def with_old_hash(session: Session, user: User, password: str = PASSWORD) -> str:
    user.password_hash = old_scrypt_hash(password)
    session.commit()
    return user.password_hash


def test_new_accounts_get_argon2(db_session: Session) -> None:
    user = create_user(session=db_session, email="new@example.com", password=PASSWORD, role=Role.learner)
    account = people.create_account(session=db_session, email="other@example.com", name="O", role=Role.learner)
    db_session.commit()
    other = db_session.scalars(select(User).where(User.email == account.email)).one()
    for who, password in ((user, PASSWORD), (other, account.password)):
        encoded = stored_hash(db_session, who)
        assert encoded.startswith("$argon2id$") and verify_password(password, encoded)
    reset = people.reset_password(session=db_session, user=user)
    db_session.commit()
    assert stored_hash(db_session, user).startswith("$argon2id$")
    assert verify_password(reset, stored_hash(db_session, user))


def test_old_scrypt_hash_logs_in_and_is_replaced_by_argon2(db_session: Session, learner: User) -> None:
    old = with_old_hash(db_session, learner)
    assert authenticate(session=db_session, email=learner.email, password=PASSWORD) is learner
    db_session.commit()  # what the login route does
    new = stored_hash(db_session, learner)
    assert new != old and new.startswith("$argon2id$") and verify_password(PASSWORD, new)
    # The next login finds nothing to upgrade.
    assert authenticate(session=db_session, email=learner.email, password=PASSWORD) is learner
    assert stored_hash(db_session, learner) == new


def test_wrong_password_does_not_upgrade(db_session: Session, learner: User) -> None:
    old = with_old_hash(db_session, learner)
    assert authenticate(session=db_session, email=learner.email, password="not the password") is None
    db_session.commit()
    assert stored_hash(db_session, learner) == old


def test_inactive_user_is_not_upgraded(db_session: Session, learner: User) -> None:
    old = with_old_hash(db_session, learner)
    learner.is_active = False
    db_session.commit()
    assert authenticate(session=db_session, email=learner.email, password=PASSWORD) is None
    db_session.commit()
    assert stored_hash(db_session, learner) == old


def test_argon2_hash_of_other_parameters_upgrades_at_login(
    db_session: Session, learner: User, production_passwords: PasswordHash
) -> None:
    # The app tests hash at cheap parameters, so a production-cost hash stands for one of outdated parameters.
    learner.password_hash = outdated = production_passwords.hash(PASSWORD)
    db_session.commit()
    assert authenticate(session=db_session, email=learner.email, password=PASSWORD) is learner
    db_session.commit()
    new = stored_hash(db_session, learner)
    assert new != outdated and verify_password(PASSWORD, new)


def test_old_scrypt_hash_logs_in_through_the_api(client: TestClient, db_session: Session, learner: User) -> None:
    with_old_hash(db_session, learner)
    response = client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    assert client.get("/api/auth/me").status_code == 200


@pytest.mark.parametrize("form", [False, True], ids=["api", "page"])
def test_login_route_keeps_the_upgraded_hash(
    client: TestClient, db_session: Session, learner: User, form: bool
) -> None:
    old = with_old_hash(db_session, learner)
    if form:
        data = {"email": learner.email, "password": PASSWORD, "csrf_token": form_token(client.get("/login").text)}
        response = client.post("/login", data=data, follow_redirects=False)
        assert response.status_code == 303, response.text
    else:
        response = client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD})
        assert response.status_code == 200, response.text
    db_session.rollback()  # drops whatever the route left uncommitted, as closing its session does
    assert stored_hash(db_session, learner) != old
    assert client.get("/api/auth/me").status_code == 200
