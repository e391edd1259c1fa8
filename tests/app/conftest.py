"""Fixtures of the app tests: cheap password hashes, a hand-registered LTI platform.

Contract: every test here hashes new passwords with argon2id at the smallest cost parameters (about a
millisecond instead of about 0.1 s at the production ones; the app tests create and log in hundreds of users).
Existing hashes of any cost still verify, and a login upgrades them to the test parameters as it would to the
production ones. ``production_passwords`` (autouse) returns the production ``PasswordHash`` for tests that
check it. ``moodle`` is a platform registered by hand as ``test_api_lti_admin.platform_body`` describes it
(committed in the test), for the LTI admin API and page tests.
"""

from __future__ import annotations

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy.orm import Session

from app.domain.accounts import passwords as security
from app.domain.models import LtiPlatform


@pytest.fixture(autouse=True)
def production_passwords(monkeypatch: pytest.MonkeyPatch) -> PasswordHash:
    """Hash with cheap argon2 parameters during the test; return the production ``PasswordHash``."""
    production = security.PASSWORDS
    cheap = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1), *production.hashers[1:]))
    monkeypatch.setattr(security, "PASSWORDS", cheap)
    return production


@pytest.fixture
def moodle(db_session: Session) -> LtiPlatform:
    """A Moodle registered by hand (the fields of ``platform_body``)."""
    from app.domain.lti import platforms
    from tests.app.web.test_api_lti_admin import platform_body

    row = platforms.register(session=db_session, **platform_body())
    db_session.commit()
    return row
