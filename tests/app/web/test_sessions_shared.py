"""Session revocation lives in the database: a logout in one app instance is refused by every other one."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import func, select

from app.domain.accounts.passwords import create_user
from app.domain.models import RevokedSession, Role, utcnow
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.settings import get_settings
from tests.support import configure, fresh_postgres_db, require_service

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

PASSWORD = "a-fine-long-password"
EMAIL = "lin@example.com"
JSON = {"Content-Type": "application/json"}


def _client(app: FastAPI) -> TestClient:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient

    return TestClient(app)  # no lifespan: these apps only authenticate


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database (SQLite file or fresh PostgreSQL) with one learner; yield its URL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        require_service("PostgreSQL", "127.0.0.1", 5432)
        url = fresh_postgres_db("gpulab_shared_sessions")
    configure(monkeypatch, mode="dev", database_url=url, secret_key="s" * 48, data_dir=str(tmp_path))
    upgrade()
    with session_scope() as session:
        create_user(session=session, email=EMAIL, password=PASSWORD, role=Role.learner)
    yield url


def _revoked_count() -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).select_from(RevokedSession)) or 0)


def test_logout_in_one_app_is_refused_by_another(database: str) -> None:
    from app.main import create_app

    first, second = _client(create_app(get_settings())), _client(create_app(get_settings()))
    assert first.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD}).status_code == 200
    cookie = first.cookies.get("gpulab_session")
    second.cookies.set("gpulab_session", cookie)
    assert second.get("/api/auth/me").status_code == 200, "the same signed cookie is good in both"

    assert first.post("/api/auth/logout", headers=JSON).status_code == 204
    assert _revoked_count() == 1
    assert second.get("/api/auth/me").status_code == 401, "the other process honours the logout"

    # Logging out the copy too is harmless: the nonce is stored once.
    second.cookies.set("gpulab_session", cookie)
    assert second.post("/api/auth/logout", headers=JSON).status_code == 204
    assert _revoked_count() == 1
    assert first.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD}).status_code == 200
    assert first.get("/api/auth/me").status_code == 200, "a new login gets a new nonce"


def test_a_logout_purges_revocations_that_expired(database: str) -> None:
    from app.main import create_app

    with session_scope() as session:
        session.add(RevokedSession(nonce="long-gone", expires_at=utcnow() - timedelta(seconds=1)))
        session.add(RevokedSession(nonce="still-live", expires_at=utcnow() + timedelta(hours=1)))
    client = _client(create_app(get_settings()))
    assert client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD}).status_code == 200
    assert client.post("/api/auth/logout", headers=JSON).status_code == 204
    with session_scope() as session:
        nonces = set(session.scalars(select(RevokedSession.nonce)))
        expiry = max(session.scalars(select(RevokedSession.expires_at)))
    assert "long-gone" not in nonces and "still-live" in nonces and len(nonces) == 2
    max_age_s = get_settings().session_max_age_s
    assert abs((expiry.replace(tzinfo=None) - utcnow().replace(tzinfo=None)).total_seconds() - max_age_s) < 60
