"""The one error format: RFC 9457 problem details on API paths, HTML pages elsewhere, and an OpenAPI schema that
declares them (``app.web.errors``)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import pytest

from app.web.errors import KINDS, PROBLEM_BASE, PROBLEM_MEDIA_TYPE, Problem, ValidationProblem, kind_of
from tests.conftest import TinyExercise
from worker.core.errors import ExerciseFormatError, GpulabError, NotFound, RateLimited

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def _problem(response: Any, status: int, slug: str | None) -> dict[str, Any]:
    """Assert ``response`` is a problem of ``status`` and type ``slug`` (None: about:blank); return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body: dict[str, Any] = response.json()
    assert body["type"] == (PROBLEM_BASE + slug if slug else "about:blank")
    assert body["status"] == status and body["title"] and isinstance(body["detail"], str)
    assert body["instance"] == response.request.url.path
    Problem.model_validate(body)
    return body


def test_every_kind_has_its_own_type_and_the_nearest_listed_class_wins() -> None:
    assert len({kind.type for kind in KINDS.values()}) == len(KINDS)

    class Unlisted(NotFound):
        pass

    assert kind_of(Unlisted("x")).slug == "not-found"
    assert kind_of(ExerciseFormatError("s", "bad")).status == 422
    assert kind_of(GpulabError("x")).status == 400


def test_a_domain_error_is_a_problem(learner_client: TestClient) -> None:
    body = _problem(learner_client.get("/api/exercises/no-such-exercise"), 404, "not-found")
    assert body["title"] == "Not found" and "no-such-exercise" in body["detail"]


def test_a_logged_out_call_is_an_unauthorized_problem(client: TestClient) -> None:
    assert _problem(client.get("/api/auth/me"), 401, "unauthorized")["detail"] == "log in first"


def test_a_rate_limited_problem_keeps_retry_after(app: FastAPI, client: TestClient) -> None:
    @app.get("/api/test-rate-limited")
    def limited() -> None:
        raise RateLimited("slow down", retry_after_s=7)

    response = client.get("/api/test-rate-limited")
    assert _problem(response, 429, "rate-limited")["detail"] == "slow down"
    assert response.headers["retry-after"] == "7"


def test_a_validation_problem_lists_each_field_error(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    response = learner_client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions",
        content=b'{"code": 123, "extra": "secret input"}',
        headers={"Content-Type": "application/json"},
    )
    body = _problem(response, 422, "validation-error")
    ValidationProblem.model_validate(body)
    assert body["detail"].startswith("invalid request: ") and "code: Input should be a valid string" in body["detail"]
    assert {(tuple(e["loc"]), e["type"]) for e in body["errors"]} == {
        (("body", "code"), "string_type"),
        (("body", "extra"), "extra_forbidden"),
    }
    assert all(set(e) == {"loc", "msg", "type"} for e in body["errors"])
    assert "secret input" not in response.text  # the input is never echoed


def test_a_row_id_out_of_range_is_a_validation_problem(make_user: Any, login: Any, client: TestClient) -> None:
    from app.domain.models import Role

    login(client, make_user(Role.instructor))
    body = _problem(client.get(f"/api/instructor/checks/{10**22}"), 422, "validation-error")
    assert body["errors"][0]["loc"] == ["path", "check_id"]


def test_an_invalid_input_422_has_no_field_errors(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    response = learner_client.post(f"/api/exercises/{tiny_exercise.slug}/quiz", json={"answers": {}})
    body = _problem(response, 422, "invalid-input")
    assert "errors" not in body and "not a quiz" in body["detail"]


def test_an_http_error_is_about_blank_with_the_status_phrase(learner_client: TestClient) -> None:
    assert _problem(learner_client.get("/api/no-such-endpoint"), 404, None)["title"] == "Not Found"
    wrong_method = learner_client.delete("/api/auth/me", headers={"Content-Type": "application/json"})
    assert _problem(wrong_method, 405, None)["title"] == "Method Not Allowed"
    assert wrong_method.headers["allow"] == "GET"


def test_the_middlewares_refusals_are_problems(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    forged = learner_client.post(url, content=b'{"code": "x"}', headers={"Content-Type": "text/plain"})
    assert "cross-site request forgery" in _problem(forged, 403, "forbidden")["detail"]
    huge = learner_client.post(url, content=b"x" * (4 * 1024 * 1024), headers={"Content-Type": "application/json"})
    detail = _problem(huge, 413, "payload-too-large")["detail"]
    assert detail.startswith("Your code is over the limit of 64 KB. Shorten it")
    assert huge.headers["connection"] == "close" and int(huge.headers["content-length"]) == len(huge.content)


def test_an_unexpected_error_is_a_problem_on_the_api_and_plain_text_on_pages(app: FastAPI) -> None:
    @app.get("/api/test-boom")
    @app.get("/test-boom")
    def boom() -> None:
        raise RuntimeError("a secret from deep inside")

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient

    client = TestClient(app, raise_server_exceptions=False)
    body = _problem(client.get("/api/test-boom"), 500, None)
    assert body["title"] == "Internal Server Error" and "secret" not in body["detail"]
    page = client.get("/test-boom")
    assert page.status_code == 500 and page.text == "Internal Server Error"
    assert page.headers["content-type"].startswith("text/plain")


def test_pages_still_answer_html(learner_client: TestClient) -> None:
    response = learner_client.get("/exercises/no-such-exercise")
    assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")


# --- OpenAPI -------------------------------------------------------------------------------------------------


@pytest.fixture
def spec(client: TestClient) -> dict[str, Any]:
    body: dict[str, Any] = client.get("/openapi.json").json()
    return body


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


def test_the_schema_declares_every_error_answer_as_a_problem(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    assert {"Problem", "ValidationProblem", "FieldError"} <= set(schemas)
    assert not {"HTTPValidationError", "ValidationError"} & set(schemas)
    for method, path, op in _operations(spec):
        for status, response in op["responses"].items():
            if int(status) < 400 or (path, status) == ("/readyz", "503"):  # readyz's 503 is its ReadyOut
                continue
            ref = "ValidationProblem" if status == "422" else "Problem"
            assert response["content"] == {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": f"#/components/schemas/{ref}"}}}, (
                method,
                path,
                status,
            )


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("GET", "/api/auth/me", {"401", "403"}),  # 403: an access token without the read scope
        ("POST", "/api/auth/login", {"400", "401", "403", "413", "422", "429"}),
        ("POST", "/api/auth/logout", {"403", "413"}),
        ("GET", "/api/exercises/{slug}", {"401", "403", "404", "422"}),
        ("POST", "/api/exercises/{slug}/runs", {"400", "401", "403", "404", "413", "422", "429", "503"}),
        ("GET", "/api/submissions/{submission_id}/events", {"401", "403", "404", "422"}),
        ("GET", "/api/instructor/checks/{check_id}", {"401", "403", "404", "422"}),
        ("POST", "/api/admin/users", {"400", "401", "403", "409", "413", "422"}),
        ("GET", "/api/admin/stats", {"401", "403"}),
        ("GET", "/metrics", {"401", "403"}),
        ("GET", "/healthz", set()),
    ],
)
def test_the_schema_derives_the_errors_of_dependencies_and_middlewares(
    spec: dict[str, Any], method: str, path: str, statuses: set[str]
) -> None:
    responses = spec["paths"][path][method.lower()]["responses"]
    assert {s for s in responses if int(s) >= 400} == statuses


def test_retry_after_is_declared_on_429_and_503(spec: dict[str, Any]) -> None:
    runs = spec["paths"]["/api/exercises/{slug}/runs"]["post"]["responses"]
    assert set(runs["429"]["headers"]) == set(runs["503"]["headers"]) == {"Retry-After"}
    assert "Retry-After" in spec["paths"]["/api/auth/login"]["post"]["responses"]["429"]["headers"]


def test_the_schema_says_what_non_json_successes_are(spec: dict[str, Any]) -> None:
    events = spec["paths"]["/api/submissions/{submission_id}/events"]["get"]["responses"]["200"]["content"]
    item = events["text/event-stream"]["itemSchema"]
    assert item["properties"]["event"]["const"] == "status"
    assert item["properties"]["data"]["contentSchema"] == {"$ref": "#/components/schemas/SubmissionOut"}
    metrics = spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain; version=0.0.4; charset=utf-8"]
