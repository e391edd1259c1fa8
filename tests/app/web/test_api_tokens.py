"""Personal access tokens: shown once and stored hashed, scoped, revocable, API-only, under the browser's rules."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.accounts import tokens
from app.domain.models import ApiToken, Role, Submission, User
from app.domain.submissions.lifecycle import create_submission
from app.settings import Settings
from tests.app.web.test_api_courses import _assignment, course, logout  # noqa: F401  (course: a fixture)
from tests.conftest import PASSWORD, RecordingDispatcher, TinyExercise
from worker.core.errors import Forbidden

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

CODE = "def add(a, b):\n    return a + b\n"
READ_SUBMIT = [tokens.Scope.read, tokens.Scope.submit]


def _token(session: Session, user: User, scopes: list[tokens.Scope] = READ_SUBMIT) -> str:
    _row, token = tokens.create_token(session=session, user=user, name="laptop", scopes=scopes)
    session.commit()
    return token


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_token_is_shown_once_and_only_its_hash_and_prefix_are_kept(
    learner_client: TestClient, learner: User, db_session: Session
) -> None:
    made = learner_client.post("/api/me/tokens", json={"name": " my  GPU box ", "scopes": ["submit", "read"]})
    assert made.status_code == 201, made.text
    body = made.json()
    token = body["token"]
    assert re.fullmatch(r"gpl_[A-Za-z0-9_-]{43}", token)
    assert body["name"] == "my GPU box" and body["scopes"] == ["read", "submit"] and body["prefix"] == token[:12]
    assert body["last_used_at"] is None and body["revoked_at"] is None and body["created_at"].endswith("Z")
    row = db_session.scalar(select(ApiToken).where(ApiToken.user_id == learner.id))
    assert row is not None and row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    stored = " ".join(str(getattr(row, c.key)) for c in ApiToken.__table__.columns)
    assert token not in stored and token[12:] not in stored
    listed = learner_client.get("/api/me/tokens").json()
    assert [t["id"] for t in listed] == [body["id"]] and "token" not in listed[0]


def test_a_token_reads_and_submits_as_its_owner_and_records_its_last_use(
    client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session,
    dispatcher: RecordingDispatcher,
) -> None:  # fmt: skip
    token = _token(db_session, learner)
    me = client.get("/api/auth/me", headers=_bearer(token))
    assert me.status_code == 200 and me.json()["email"] == learner.email
    sent = client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE}, headers=_bearer(token))
    assert sent.status_code == 202, sent.text
    row = db_session.get(Submission, sent.json()["id"])
    assert row is not None and row.user_id == learner.id and dispatcher.calls == [(row.id, "cpu")]
    result = client.get(f"/api/submissions/{row.id}", headers=_bearer(token))
    assert result.status_code == 200 and result.json()["status"] == "queued"
    used = db_session.scalar(select(ApiToken.last_used_at).where(ApiToken.user_id == learner.id))
    assert used is not None
    assert "gpulab_session" not in client.cookies  # a token call starts no session


def test_a_call_outside_the_tokens_scopes_is_refused_naming_the_scope(
    client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    read_only = _token(db_session, learner, [tokens.Scope.read])
    submit_only = _token(db_session, learner, [tokens.Scope.submit])
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    refused = client.post(url, json={"code": CODE}, headers=_bearer(read_only))
    assert refused.status_code == 403 and "'submit' scope" in refused.json()["detail"]
    assert client.get("/api/me/submissions", headers=_bearer(read_only)).status_code == 200
    blind = client.get("/api/me/submissions", headers=_bearer(submit_only))
    assert blind.status_code == 403 and "'read' scope" in blind.json()["detail"]
    assert client.post(url, json={"code": CODE}, headers=_bearer(submit_only)).status_code == 202
    # A learner's own other writes (joining a course by invite) need more than submit: staff, which they cannot have.
    assert client.post("/api/invites/nothing", json={}, headers=_bearer(submit_only)).status_code == 403


def test_the_staff_scope_is_for_staff_and_a_narrower_token_of_staff_acts_as_a_learner(
    client: TestClient, learner: User, instructor: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    with pytest.raises(Forbidden):
        tokens.create_token(session=db_session, user=learner, name="x", scopes=[tokens.Scope.staff])
    theirs = create_submission(
        session=db_session, user=learner, exercise=tiny_exercise.exercise, code=CODE, max_bytes=4096
    )
    db_session.commit()
    reader = _token(db_session, instructor, [tokens.Scope.read])
    staff = _token(db_session, instructor, [tokens.Scope.read, tokens.Scope.staff])
    staff_list = f"/api/instructor/exercises/{tiny_exercise.slug}/submissions"
    refused = client.get(staff_list, headers=_bearer(reader))
    assert refused.status_code == 403 and "'staff' scope" in refused.json()["detail"]
    assert client.get(staff_list, headers=_bearer(staff)).status_code == 200
    assert client.get(f"/api/submissions/{theirs.id}", headers=_bearer(reader)).status_code == 404
    assert client.get(f"/api/submissions/{theirs.id}", headers=_bearer(staff)).status_code == 200
    # Staff's routes that check the role inside need the staff scope too.
    for path in ("/api/similarity/runs/1", "/api/grades/1"):
        inline = client.get(path, headers=_bearer(reader))
        assert inline.status_code == 403 and "'staff' scope" in inline.json()["detail"], path
        assert client.get(path, headers=_bearer(staff)).status_code == 404, path


def test_a_revoked_or_unknown_token_is_refused_and_only_its_owner_revokes_it(
    client: TestClient, learner: User, other_learner: User, login: Callable[..., None], db_session: Session
) -> None:
    token = _token(db_session, learner)
    row = db_session.scalar(select(ApiToken).where(ApiToken.user_id == learner.id))
    assert row is not None
    login(client, other_learner)
    assert client.post(f"/api/me/tokens/{row.id}/revoke", json={}).status_code == 404
    logout(client)
    assert client.get("/api/me/submissions", headers=_bearer(token)).status_code == 200
    login(client, learner)
    revoked = client.post(f"/api/me/tokens/{row.id}/revoke", json={})
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    logout(client)
    for bad in (token, token + "x", "gpl_" + "A" * 43, "not-a-token", "gpl_" + "A" * 500):
        refused = client.get("/api/me/submissions", headers=_bearer(bad))
        assert refused.status_code == 401, bad
        assert refused.json()["detail"] == "the access token is unknown or was revoked"
    learner.is_active = False
    db_session.commit()
    assert client.get("/api/me/submissions", headers=_bearer(_token(db_session, learner))).status_code == 401


def test_tokens_work_on_the_api_only_and_never_manage_tokens_or_log_in(
    client: TestClient, learner: User, db_session: Session
) -> None:
    token = _token(db_session, learner, [tokens.Scope.read, tokens.Scope.submit])
    page = client.get("/exercises", headers=_bearer(token), follow_redirects=False)
    assert page.status_code in (302, 303, 307) and page.headers["location"].startswith("/login")
    listing = client.get("/api/me/tokens", headers=_bearer(token))
    assert listing.status_code == 403 and "cannot be used here" in listing.json()["detail"]
    more = client.post("/api/me/tokens", json={"name": "x", "scopes": ["read"]}, headers=_bearer(token))
    assert more.status_code == 403
    form = client.post("/account/tokens", data={"name": "x", "scopes": "read"}, headers=_bearer(token))
    assert form.status_code == 403  # a page form: no session, so no form token either
    new_password = {"current": "whatever", "new": "a-new-long-password", "repeated": "a-new-long-password"}
    changed = client.post("/api/auth/password", json=new_password, headers=_bearer(token))
    assert changed.status_code == 403 and "cannot be used here" in changed.json()["detail"]


def test_a_token_never_logs_in_or_out_even_beside_a_session_cookie(
    client: TestClient, learner: User, db_session: Session
) -> None:
    token = _token(db_session, learner, [tokens.Scope.read, tokens.Scope.submit])
    assert client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD}).status_code == 200
    assert client.get("/api/auth/me").status_code == 200  # the browser's session
    out = client.post("/api/auth/logout", json={}, headers=_bearer(token))
    assert out.status_code == 403 and "cannot be used here" in out.json()["detail"]
    assert client.get("/api/auth/me").status_code == 200, "the cookie's session must survive a token's logout"
    client.cookies.clear()
    login = client.post("/api/auth/login", json={"email": learner.email, "password": PASSWORD}, headers=_bearer(token))
    assert login.status_code == 403 and "set-cookie" not in login.headers
    assert client.get("/api/auth/me").status_code == 401


def test_the_attempt_rules_of_an_assignment_hold_for_a_token(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, max_attempts=1)
    logout(client)
    token = _token(db_session, learner)
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    assert client.post(url, json={"code": CODE, "assignment_id": made["id"]}, headers=_bearer(token)).status_code == 202
    spent = client.post(url, json={"code": CODE, "assignment_id": made["id"]}, headers=_bearer(token))
    assert spent.status_code == 403 and "no attempts left" in spent.json()["detail"]


def test_bad_token_requests_are_refused_with_the_reason(
    learner_client: TestClient, learner: User, db_session: Session
) -> None:
    for body, status in (
        ({"name": "x", "scopes": []}, 422),
        ({"name": "x", "scopes": ["admin"]}, 422),
        ({"name": "", "scopes": ["read"]}, 422),
        ({"name": "  ", "scopes": ["read"]}, 422),
        ({"name": "bell\u0007", "scopes": ["read"]}, 422),
        ({"name": "x", "scopes": ["staff"]}, 403),
    ):
        answer = learner_client.post("/api/me/tokens", json=body)
        assert answer.status_code == status, (body, answer.text)
    for _ in range(tokens.MAX_ACTIVE_TOKENS):
        _token(db_session, learner)
    too_many = learner_client.post("/api/me/tokens", json={"name": "x", "scopes": ["read"]})
    assert too_many.status_code == 409 and "revoke one" in too_many.json()["detail"]


def test_the_account_page_makes_shows_once_lists_and_revokes_tokens(
    learner_client: TestClient, learner: User, db_session: Session
) -> None:
    page = learner_client.get("/account")
    assert page.status_code == 200 and "No tokens yet." in page.text and 'value="staff"' not in page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None
    made = learner_client.post(
        "/account/tokens", data={"csrf_token": csrf.group(1), "name": "cluster", "scopes": ["read", "submit"]}
    )
    assert made.status_code == 200
    shown = re.search(r'id="new-token-value">(gpl_[^<]+)<', made.text)
    assert shown is not None
    again = learner_client.get("/account")
    assert shown.group(1) not in again.text and shown.group(1)[:12] in again.text and "never" in again.text
    row = db_session.scalar(select(ApiToken).where(ApiToken.user_id == learner.id))
    assert row is not None and row.scopes == ["read", "submit"]
    revoked = learner_client.post(f"/account/tokens/{row.id}/revoke", data={"csrf_token": csrf.group(1)})
    assert revoked.status_code == 200 and "is revoked" in revoked.text  # followed the redirect
    assert learner_client.get("/api/me/submissions", headers=_bearer(shown.group(1))).status_code == 401
    refused = learner_client.post("/account/tokens", data={"csrf_token": csrf.group(1), "name": "x"})
    assert refused.status_code == 422 and "choose at least one scope" in refused.text


def test_the_command_line_script_is_served_to_anyone(client: TestClient) -> None:
    answer = client.get("/cli/gpulab-submit.py")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/x-python")
    assert "def main(" in answer.text and "import torch" not in answer.text


def test_the_served_command_line_points_at_the_server_that_served_it(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    served = client.get("/cli/gpulab-submit.py").text
    assert 'DEFAULT_SERVER = "http://testserver"\n' in served and "127.0.0.1:8000" not in served
    settings.public_url = "https://gpulab.example.org"
    public = client.get("/cli/gpulab-submit.py").text
    assert 'DEFAULT_SERVER = "https://gpulab.example.org"\n' in public
    script = tmp_path / "gpulab-submit.py"
    script.write_text(public, encoding="utf-8")
    shown = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin"}
    )
    assert "else https://gpulab.example.org" in " ".join(shown.stdout.split())  # the default a learner runs with


def test_staff_may_hold_the_staff_scope(make_user: Callable[..., User], db_session: Session) -> None:
    assert tokens.may_hold_staff(session=db_session, user=make_user(Role.instructor))
    assert not tokens.may_hold_staff(session=db_session, user=make_user(Role.learner))
