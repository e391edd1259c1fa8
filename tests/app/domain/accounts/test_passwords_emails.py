"""E-mail addresses: email-validator's rules for new accounts, today's spelling, login open to older accounts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from app.cli import DEMO_USERS
from app.domain.accounts import people
from app.domain.accounts.passwords import check_email, create_user, hash_password
from app.domain.models import Role, User
from app.web.schemas.auth import LoginIn
from app.web.schemas.common import Email
from tests.conftest import PASSWORD
from worker.core.errors import InvalidInput

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

EMAIL = TypeAdapter(Email)


def test_demo_accounts_and_the_test_domains_are_valid() -> None:
    for email, _role, _password in DEMO_USERS:
        assert check_email(email) == email
    for email in ("learner-0123456789@example.com", "a@x.org", "b@x.io", "ada@example.com"):
        assert check_email(email) == email


def test_email_type_checks_normalises_and_says_why() -> None:
    assert EMAIL.validate_python("  Ada@Example.COM ") == "ada@example.com"
    with pytest.raises(ValidationError) as caught:
        EMAIL.validate_python("ada@lab.local")
    assert "'ada@lab.local' is not a valid e-mail address: " in str(caught.value)
    assert EMAIL.json_schema() == {"type": "string", "format": "email", "maxLength": 320}


def test_login_body_takes_any_address_and_documents_the_format() -> None:
    # Not checked: an account made under the older, looser rules must still be able to log in.
    assert LoginIn(email="old@lab.local", password="x").email == "old@lab.local"
    assert LoginIn.model_json_schema()["properties"]["email"]["format"] == "email"


@pytest.mark.postgres
def test_openapi_says_format_email(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["LoginIn"]["properties"]["email"]["format"] == "email"


@pytest.mark.postgres
def test_new_accounts_refuse_special_use_domains(db_session: Session) -> None:
    with pytest.raises(InvalidInput, match="special-use or reserved name"):
        create_user(session=db_session, email="ada@lab.local", password=PASSWORD, role=Role.learner)
    report = people.import_csv(session=db_session, data=b"email\nok@example.com\nbob@school.test\n")
    assert report.created == []
    assert report.errors == [
        "line 3: 'bob@school.test' is not a valid e-mail address: The part after the @-sign is a special-use or "
        "reserved name that cannot be used with email."
    ]


@pytest.mark.postgres
def test_an_account_made_under_the_older_rules_still_logs_in(client: TestClient, db_session: Session) -> None:
    db_session.add(User(email="old@lab.local", password_hash=hash_password(PASSWORD), role=Role.learner))
    db_session.commit()
    response = client.post("/api/auth/login", json={"email": "Old@Lab.local", "password": PASSWORD})
    assert response.status_code == 200, response.text
    assert response.json()["email"] == "old@lab.local"
