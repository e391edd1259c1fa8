"""Server-rendered pages: login, redirects when logged out, the exercise page and its escaping."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.models import User
from app.submissions import create_submission
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def test_login_page_renders_an_accessible_form(client: TestClient) -> None:
    response = client.get("/login")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert '<label for="email">' in html and '<input id="email"' in html
    assert '<label for="password">' in html and 'type="password"' in html
    assert '<script src="/static/app.js"' in html
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert client.get("/static/app.js").status_code == 200 and client.get("/static/app.css").status_code == 200


@pytest.mark.parametrize("path", ["/exercises", "/exercises/some-exercise"])
def test_pages_redirect_to_login_when_logged_out(client: TestClient, path: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/login?next={path}"


def test_root_redirects_by_session(client: TestClient, learner_client: TestClient) -> None:
    assert learner_client.get("/", follow_redirects=False).headers["location"] == "/exercises"
    learner_client.cookies.clear()
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"


@pytest.mark.parametrize(
    ("next_path", "target"),
    [("/exercises/abc", "/exercises/abc"), ("//evil.example/x", "/exercises"), ("https://evil.example", "/exercises")],
)
def test_login_page_only_follows_local_next(learner_client: TestClient, next_path: str, target: str) -> None:
    response = learner_client.get("/login", params={"next": next_path}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == target


def test_exercise_list_page(learner_client: TestClient, tiny_exercise: TinyExercise, learner: User) -> None:
    html = learner_client.get("/exercises").text
    assert f'href="/exercises/{tiny_exercise.slug}"' in html and "Add two numbers" in html
    assert learner.email in html and 'id="logout"' in html


def test_exercise_page_shows_prompt_starter_and_examples(
    learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    response = learner_client.get(f"/exercises/{tiny_exercise.slug}")
    assert response.status_code == 200
    html = response.text
    assert "<code>add(a, b)</code>" in html  # the rendered prompt
    assert tiny_exercise.starter_marker in html and tiny_exercise.example_marker in html
    assert 'data-last-submission=""' in html and '<label for="code">' in html
    for marker in tiny_exercise.secret_markers:
        assert marker not in html


def test_exercise_page_escapes_the_last_submission(
    learner_client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    code = "</textarea><script>alert('pwned')</script>\n# mine\n"
    submission = create_submission(
        session=db_session, user=learner, exercise=tiny_exercise.exercise, code=code, max_bytes=65536
    )
    db_session.commit()
    html = learner_client.get(f"/exercises/{tiny_exercise.slug}").text
    assert "<script>alert('pwned')</script>" not in html and "</textarea><script>" not in html
    assert "&lt;/textarea&gt;&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in html
    assert tiny_exercise.starter_marker not in html  # the editor holds the last submission, not the starter
    assert f'data-last-submission="{submission.id}"' in html


def test_unknown_exercise_page_is_404_html(learner_client: TestClient) -> None:
    response = learner_client.get("/exercises/no-such-thing")
    assert response.status_code == 404 and "text/html" in response.headers["content-type"]
    assert "no-such-thing" in response.text
