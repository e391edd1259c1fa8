"""Inputs PostgreSQL cannot take (ids past its integer, NUL characters, lone surrogates, the last date) are answered
as 404 or 422 problems, never as 500s: what the schemathesis fuzz (``test_openapi_fuzz``) and probes around it found.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from app.domain.models import Exercise, Role, User
from tests.app.web.test_api_quiz import quiz  # noqa: F401  (the fixture)
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def staff_client(client: TestClient, make_user: Callable[..., User], login: Callable[..., None]) -> TestClient:
    login(client, make_user(Role.admin))
    return client


@pytest.mark.parametrize("row_id", [2**31, 2**63 - 1, 10**22, 0])
@pytest.mark.parametrize("path", ["/api/instructor/checks/{}", "/api/instructor/regrades/{}"])
def test_an_id_no_integer_column_holds_is_a_422(staff_client: TestClient, path: str, row_id: int) -> None:
    response = staff_client.get(path.format(row_id))
    assert response.status_code == 422 and response.json()["type"].endswith("/validation-error")


def test_the_largest_integer_id_is_a_plain_404(staff_client: TestClient, tiny_exercise: TinyExercise) -> None:
    assert staff_client.get(f"/api/instructor/checks/{2**31 - 1}").status_code == 404
    assert staff_client.post(f"/api/admin/users/{2**31 - 1}", json={}).status_code == 404
    version = f"/api/instructor/exercises/{tiny_exercise.slug}/versions/{2**31 - 1}/publish"
    assert staff_client.post(version, headers=JSON).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/api/exercises/a%00b",
        "/api/exercises/UPPER-case",
        "/api/submissions/a%00b",
        "/api/submissions/a%00b/diff",
        "/api/instructor/exercises/a%00b/submissions",
        "/api/instructor/submissions/a%00b/history",
    ],
)
def test_a_slug_or_id_that_cannot_exist_is_a_404(staff_client: TestClient, path: str) -> None:
    response = staff_client.get(path)
    assert response.status_code == 404 and response.json()["type"].endswith("/not-found")


def test_review_filters_with_a_nul_or_the_last_date(staff_client: TestClient, tiny_exercise: TinyExercise) -> None:
    url = f"/api/instructor/exercises/{tiny_exercise.slug}/submissions"
    nul = staff_client.get(url, params={"learner": "a\x00b"})
    assert nul.status_code == 422 and "NUL" in nul.json()["detail"]
    assert staff_client.get(url, params={"until": "9999-12-31", "since": "0001-01-01"}).json() == []


def test_text_with_a_nul_is_refused_before_the_database(staff_client: TestClient) -> None:
    created = staff_client.post("/api/admin/users", json={"email": "nul@example.com", "name": "a\x00b"})
    assert created.status_code == 422 and created.json()["errors"][0]["loc"] == ["body", "name"]
    login = staff_client.post("/api/auth/login", json={"email": "a\x00@example.com", "password": "x"})
    assert login.status_code == 401 and login.json()["detail"] == "wrong email or password"  # as any wrong e-mail


def test_a_lone_surrogate_is_refused_as_not_text(
    learner_client: TestClient,
    tiny_exercise: TinyExercise,
    quiz: Exercise,  # noqa: F811
) -> None:
    code = learner_client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", content=b'{"code": "x = 1  # \\ud800"}', headers=JSON
    )
    assert code.status_code == 422 and "surrogate" in code.json()["detail"]
    text = b'{"answers": {"q3": "a \\ud800 text answer of words"}}'
    answer = learner_client.post(f"/api/exercises/{quiz.slug}/quiz", content=text, headers=JSON)
    assert answer.status_code == 422 and "surrogate" in answer.json()["detail"]
    unknown = learner_client.post(
        f"/api/exercises/{quiz.slug}/quiz", content=b'{"answers": {"\\ud800": "x"}}', headers=JSON
    )
    assert unknown.status_code == 422 and "\\ud800" in unknown.json()["detail"]  # quoted as the escape


def _notebook_with(source: str, tags: object = None) -> dict[str, object]:
    cell = {"cell_type": "code", "id": "c1", "metadata": {"tags": ["solution"] if tags is None else tags},
            "source": source, "outputs": [], "execution_count": None}  # fmt: skip
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}


def test_hostile_notebooks_are_refused_with_the_reason_never_a_500(
    learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    import json

    url = f"/api/exercises/{tiny_exercise.slug}/notebook-submissions"
    cases: list[tuple[bytes, int, str]] = [
        # A NUL or a lone surrogate in the solution cell: the code's own rules, as from the editor.
        (json.dumps({"notebook": json.dumps(_notebook_with("x = 1\x00"))}).encode(), 422, "NUL"),
        (json.dumps({"notebook": json.dumps(_notebook_with("x = '\ud800'"))}).encode(), 422, "surrogate"),
        # A lone surrogate in the file's text itself: no JSON parser takes it as a notebook.
        (b'{"notebook": "\\ud800"}', 422, "not JSON"),
        (json.dumps({"notebook": json.dumps(_notebook_with("x = 1", tags="solution"))}).encode(), 422, "not valid"),
        (json.dumps({"notebook": json.dumps(_notebook_with("x = 1", tags=[1, None]))}).encode(), 422, "not valid"),
        (json.dumps({"notebook": json.dumps({**_notebook_with("x = 1"), "metadata": {"kernelspec": 7}})}).encode(),
         422, "not valid"),
        (json.dumps({"notebook": json.dumps({**_notebook_with("x = 1"), "cells": "all"})}).encode(), 422,
         "must be a list of cell objects"),
        (json.dumps({"notebook": json.dumps({"nbformat": "4", "cells": []})}).encode(), 422, "notebook"),
        (json.dumps({"notebook": "null"}).encode(), 422, "not a notebook"),
        (json.dumps({"notebook": {"nbformat": 4}}).encode(), 422, "Input should be a valid string"),
        (json.dumps({"notebook": "x", "extra": 1}).encode(), 422, "Extra inputs are not permitted"),
    ]  # fmt: skip
    for body, status, reason in cases:
        answer = learner_client.post(url, content=body, headers=JSON)
        assert answer.status_code == status, (body[:120], answer.text)
        problem = answer.json()
        assert reason in problem["detail"] or any(reason in e["msg"] for e in problem.get("errors", [])), problem
    huge = learner_client.post(url, content=b'{"notebook": "' + b"x" * (9 * 1024 * 1024) + b'"}', headers=JSON)
    assert huge.status_code == 413 and huge.json()["type"].endswith("/payload-too-large")
    assert learner_client.get(f"/api/exercises/{tiny_exercise.slug}/submissions").status_code == 405


def test_hostile_token_headers_and_token_requests_are_refused_never_a_500(
    learner_client: TestClient, learner: User
) -> None:
    unknown = "the access token is unknown or was revoked"
    for value in ("Bearer gpl_" + "A" * 10_000, "Bearer gpl_\xe9\xff", "Bearer \x7f", "Bearer gpl_ x", "bearer gpl_"):
        answer = learner_client.get("/api/me/submissions", headers={"Authorization": value.encode("latin-1")})
        assert answer.status_code == 401 and answer.json()["detail"] == unknown, value
    # Another scheme, or a bare "Bearer", is no token: the session cookie decides, as without the header.
    for value in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer ", ""):
        assert learner_client.get("/api/me/submissions", headers={"Authorization": value}).status_code == 200, value
    import json

    for name in ("a\x00b", "\ud800", "x" * 101, "\n\t"):
        body = json.dumps({"name": name, "scopes": ["read"]}).encode()  # ASCII escapes: a lone surrogate travels
        made = learner_client.post("/api/me/tokens", content=body, headers=JSON)
        assert made.status_code == 422, (name, made.text)
    for token_id in (0, 2**31, -1):
        assert learner_client.post(f"/api/me/tokens/{token_id}/revoke", json={}).status_code == 422
    assert learner_client.post(f"/api/me/tokens/{2**31 - 1}/revoke", json={}).status_code == 404
