"""The exercise API: published exercises only, never a hidden file, sanitised prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

SUMMARY_KEYS = {"slug", "title", "kind", "topic", "difficulty", "framework", "points", "version"}
DETAIL_KEYS = SUMMARY_KEYS | {"prompt_md", "prompt_html", "starter_code", "examples", "quiz", "params"}


def test_list_shows_published_exercises_without_secrets(
    learner_client: TestClient,
    tiny_exercise: TinyExercise,
    make_exercise: Callable[..., TinyExercise],
    db_session: Session,
) -> None:
    hidden = make_exercise()
    hidden.exercise.is_published = False
    db_session.commit()

    response = learner_client.get("/api/exercises")
    assert response.status_code == 200
    by_slug = {e["slug"]: e for e in response.json()}
    assert tiny_exercise.slug in by_slug and hidden.slug not in by_slug
    entry = by_slug[tiny_exercise.slug]
    assert set(entry) == SUMMARY_KEYS
    assert entry == {
        "slug": tiny_exercise.slug,
        "title": "Add two numbers",
        "kind": "code",
        "topic": "Warm-up",
        "difficulty": "beginner",
        "framework": "python",
        "points": 5.0,
        "version": 1,
    }
    for marker in tiny_exercise.secret_markers:
        assert marker not in response.text


def test_detail_has_prompt_starter_and_examples_but_no_hidden_files(
    learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    response = learner_client.get(f"/api/exercises/{tiny_exercise.slug}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == DETAIL_KEYS
    assert body["starter_code"] == tiny_exercise.files["starter.py"]
    assert body["examples"] == {"test_example.py": tiny_exercise.files["examples/test_example.py"]}
    assert body["prompt_md"] == tiny_exercise.files["prompt.md"]
    assert "<code>add(a, b)</code>" in body["prompt_html"]
    # Positive control: the visible markers do reach the learner, so the absence checks below mean something.
    assert tiny_exercise.example_marker in response.text and tiny_exercise.starter_marker in response.text
    for marker in tiny_exercise.secret_markers:
        assert marker not in response.text, marker
    assert "must_fail" not in response.text and "test_negative" not in response.text


def test_prompt_html_is_sanitised(learner_client: TestClient, make_exercise: Callable[..., TinyExercise]) -> None:
    evil = make_exercise(
        prompt_md=(
            "# Evil\n\n<script>alert('prompt')</script>\n\n<img src=x onerror=alert(1)>\n\n"
            '<p onclick="steal()">click</p> [x](javascript:alert(2)) <a href="javascript:alert(3)">y</a>\n'
        )
    )
    body = learner_client.get(f"/api/exercises/{evil.slug}").json()
    html = body["prompt_html"].lower()
    assert "<h1>evil</h1>" in html and "click" in html
    for forbidden in ("<script", "alert('prompt')", "onerror", "onclick", 'href="javascript'):
        assert forbidden not in html, forbidden
    assert "<script>" in body["prompt_md"]  # the source is returned as written, as text


def test_unknown_or_unpublished_exercise_is_404(
    learner_client: TestClient, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    missing = learner_client.get("/api/exercises/no-such-exercise")
    assert missing.status_code == 404 and "no-such-exercise" in missing.json()["detail"]
    tiny_exercise.exercise.is_published = False
    db_session.commit()
    assert learner_client.get(f"/api/exercises/{tiny_exercise.slug}").status_code == 404


def test_detail_follows_the_current_version(
    learner_client: TestClient, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    from app.domain.exercises.bank import upsert_exercise
    from worker.bank.spec import ExerciseSpec

    files = {**tiny_exercise.files, "prompt.md": "# Second version\n"}
    upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(tiny_exercise.slug, files))
    db_session.commit()
    body = learner_client.get(f"/api/exercises/{tiny_exercise.slug}").json()
    assert body["version"] == 2 and body["prompt_md"] == "# Second version\n"


def test_openapi_docs_are_served(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    assert schema["info"]["title"] == "gpulab"
    assert "/api/exercises/{slug}/submissions" in schema["paths"]
