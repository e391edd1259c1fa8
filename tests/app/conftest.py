"""Fixtures of the app tests: cheap password hashes.

Contract: every test here hashes new passwords with argon2id at the smallest cost parameters (about a millisecond
instead of about 0.1 s at the production ones; the app tests create and log in hundreds of users). Existing
hashes of any cost still verify, and a login upgrades them to the test parameters as it would to the production
ones. ``production_passwords`` (autouse) returns the production ``PasswordHash`` for tests that check it.
"""

from __future__ import annotations

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from app.domain import security


@pytest.fixture(autouse=True)
def production_passwords(monkeypatch: pytest.MonkeyPatch) -> PasswordHash:
    """Hash with cheap argon2 parameters during the test; return the production ``PasswordHash``."""
    production = security.PASSWORDS
    cheap = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1), *production.hashers[1:]))
    monkeypatch.setattr(security, "PASSWORDS", cheap)
    return production
