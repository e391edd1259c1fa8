"""Server-rendered pages: login/logout forms and their CSRF token, catalogue progress, exercise, history, errors."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy.orm import Session

from app.domain.models import Submission, SubmissionStatus, User
from app.domain.submissions.lifecycle import create_submission
from tests.conftest import PASSWORD, RecordingDispatcher, TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def test_login_page_renders_an_accessible_form(client: TestClient) -> None:
    response = client.get("/login")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert '<label for="email">' in html and '<input id="email"' in html
    assert '<label for="password">' in html and 'type="password"' in html
    assert '<script src="/static/app.js"' in html and 'name="csrf_token"' in html
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
    assert 'data-last-submission=""' in html and '<label for="code" id="code-label">' in html
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
    editor = html.split('<textarea id="code"', 1)[1].split("</textarea>", 1)[0]
    assert tiny_exercise.starter_marker not in editor  # the editor holds the last submission, not the starter
    assert f'data-last-submission="{submission.id}"' in html


def test_unknown_exercise_page_is_404_html(learner_client: TestClient) -> None:
    response = learner_client.get("/exercises/no-such-thing")
    assert response.status_code == 404 and "text/html" in response.headers["content-type"]
    assert "no-such-thing" in response.text


# --- forms and CSRF ------------------------------------------------------------------------------------------


def form_token(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "the page has no form token"
    return match.group(1)


def test_every_form_route_checks_the_csrf_token(app: FastAPI) -> None:
    """Any state-changing route outside /api must depend on the form-token check (JSON API has its own rule)."""
    from fastapi.routing import APIRoute

    from app.web import pages

    checks = {pages.verify_form_csrf}

    def calls(dependant: Any) -> set[Any]:
        found = {dependant.call}
        for sub in dependant.dependencies:
            found |= calls(sub)
        return found

    def routes(items: list[Any]) -> Iterator[APIRoute]:
        for item in items:
            if isinstance(item, APIRoute):
                yield item
            inner = getattr(item, "original_router", None)  # FastAPI includes routers lazily
            if inner is not None:
                yield from routes(inner.routes)

    form_routes = [
        r for r in routes(app.routes)
        if isinstance(r, APIRoute) and r.methods & {"POST", "PUT", "PATCH", "DELETE"} and not r.path.startswith("/api/")
    ]  # fmt: skip
    assert {"/login", "/logout", "/exercises/{slug}/submissions", "/admin/users"} <= {r.path for r in form_routes}
    # LTI's OIDC login and launch are cross-site posts from the LMS by design: the OIDC state bound to this
    # browser, the nonce and the platform-signed id_token protect them instead (tests/app/domain/lti).
    cross_site_by_design = {"/lti/login", "/lti/launch"}
    for route in form_routes:
        if route.path in cross_site_by_design:
            continue
        assert calls(route.dependant) & checks, f"{route.path} does not check the form's CSRF token"


def test_login_form_logs_in_with_the_token_and_follows_next(client: TestClient, learner: User) -> None:
    token = form_token(client.get("/login").text)
    data = {"email": learner.email, "password": PASSWORD, "next": "/exercises/abc"}
    assert client.post("/login", data=data, follow_redirects=False).status_code == 403  # no token
    response = client.post("/login", data={**data, "csrf_token": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/exercises/abc"
    assert client.get("/api/auth/me").json()["email"] == learner.email


def test_login_form_refuses_a_wrong_password_and_a_foreign_token(client: TestClient, learner: User) -> None:
    token = form_token(client.get("/login").text)
    wrong = client.post("/login", data={"email": learner.email, "password": "nope-nope", "csrf_token": token})
    assert wrong.status_code == 401 and "Wrong e-mail or password." in wrong.text
    assert f'value="{learner.email}"' in wrong.text  # the e-mail stays filled in, escaped by the template
    forged = client.post(
        "/login", data={"email": learner.email, "password": PASSWORD, "csrf_token": "x" * 43}, follow_redirects=False
    )
    assert forged.status_code == 403 and "text/html" in forged.headers["content-type"]
    assert client.get("/api/auth/me").status_code == 401


def test_logout_form_needs_the_token(learner_client: TestClient) -> None:
    html = learner_client.get("/exercises").text
    assert learner_client.post("/logout", data={"csrf_token": "forged"}).status_code == 403
    assert learner_client.get("/api/auth/me").status_code == 200
    response = learner_client.post("/logout", data={"csrf_token": form_token(html)}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert learner_client.get("/api/auth/me").status_code == 401


def test_submit_form_without_javascript(
    learner_client: TestClient, tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session
) -> None:
    url = f"/exercises/{tiny_exercise.slug}/submissions"
    token = form_token(learner_client.get(f"/exercises/{tiny_exercise.slug}").text)
    assert learner_client.post(url, data={"code": "x = 1\n"}).status_code == 403 and dispatcher.calls == []
    response = learner_client.post(url, data={"code": "x = 1\n", "csrf_token": token}, follow_redirects=False)
    assert response.status_code == 303 and len(dispatcher.calls) == 1
    submission_id = dispatcher.calls[0][0]
    assert response.headers["location"] == f"/exercises/{tiny_exercise.slug}/history?attempt={submission_id}#attempt"
    row = db_session.get(Submission, submission_id)
    assert row is not None and row.code == "x = 1\n"


# --- catalogue, history, errors ------------------------------------------------------------------------------


def test_catalogue_groups_by_topic_and_shows_progress(
    learner_client: TestClient, learner: User, make_exercise: Callable[..., TinyExercise], db_session: Session
) -> None:
    done, untouched = make_exercise(), make_exercise()
    submission = create_submission(session=db_session, user=learner, exercise=done.exercise, code="x", max_bytes=9999)
    submission.status, submission.verdict, submission.score = SubmissionStatus.graded, Verdict.passed, 5.0
    db_session.commit()
    html = learner_client.get("/exercises").text
    assert '<h2 id="topic-1">Warm-up</h2>' in html
    row = html.split(f'href="/exercises/{done.slug}"', 1)[1].split("</li>", 1)[0]
    assert "Passed" in row and "best 5/5" in row and "1 attempt" in row
    other = html.split(f'href="/exercises/{untouched.slug}"', 1)[1].split("</li>", 1)[0]
    assert "Not started" in other and "best" not in other
    assert "passed" in html and 'aria-label="Exercises passed"' in html


def test_history_page_lists_attempts_and_escapes_the_diff(
    learner_client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    codes = ["def add(a, b):\n    return '<b>'\n", "def add(a, b):\n    return '</pre><script>x()</script>'\n"]
    rows = []
    for minutes, code in enumerate(codes):
        row = create_submission(session=db_session, user=learner, exercise=tiny_exercise.exercise, code=code,
                                max_bytes=9999)  # fmt: skip
        row.created_at = datetime(2030, 1, 1, 12, minutes, tzinfo=UTC)
        rows.append(row)
    rows[0].status, rows[0].verdict, rows[0].score = SubmissionStatus.graded, Verdict.failed, 2.0
    db_session.commit()

    html = learner_client.get(f"/exercises/{tiny_exercise.slug}/history").text
    assert "Attempt 2" in html and "Attempt 1" in html and "best: 2/5" in html
    assert "<script>x()</script>" not in html and "&lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;" in html
    assert '<span class="diff-del">-    return &#39;&lt;b&gt;&#39;</span>' in html
    assert '<span class="diff-add">+    return' in html
    first = learner_client.get(f"/exercises/{tiny_exercise.slug}/history", params={"attempt": rows[0].id}).text
    assert "This was your first attempt" in first


def test_history_of_someone_elses_attempt_is_404(
    learner_client: TestClient, other_learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    theirs = create_submission(session=db_session, user=other_learner, exercise=tiny_exercise.exercise, code="x",
                               max_bytes=9999)  # fmt: skip
    db_session.commit()
    response = learner_client.get(f"/exercises/{tiny_exercise.slug}/history", params={"attempt": theirs.id})
    assert response.status_code == 404 and "text/html" in response.headers["content-type"]
    empty = learner_client.get(f"/exercises/{tiny_exercise.slug}/history")
    assert empty.status_code == 200 and "No attempts yet" in empty.text


def test_prompt_code_blocks_are_highlighted_and_escaped(
    learner_client: TestClient, make_exercise: Callable[..., TinyExercise]
) -> None:
    ex = make_exercise(prompt_md="Intro\n\n```python\nif a < b:\n    print('<i>')\n```\n")
    html = learner_client.get(f"/exercises/{ex.slug}").text
    assert '<pre class="code"><code class="language-python"><span class="k">if</span>' in html
    assert "&#39;&lt;i&gt;&#39;" in html or "'&lt;i&gt;'" in html
    assert "print('<i>')" not in html


def test_unknown_page_is_a_404_page_with_navigation(learner_client: TestClient, learner: User) -> None:
    response = learner_client.get("/no/such/page")
    assert response.status_code == 404 and "text/html" in response.headers["content-type"]
    assert "Not found" in response.text and learner.email in response.text
    api = learner_client.get("/api/no-such-endpoint")
    assert api.status_code == 404 and api.json()["detail"] == "Not Found"


def test_exercise_page_offers_the_editor_actions(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    html = learner_client.get(f"/exercises/{tiny_exercise.slug}").text
    assert 'id="run-button"' in html and 'id="reset-button"' in html and 'aria-live="polite"' in html
    assert f'action="/exercises/{tiny_exercise.slug}/submissions"' in html
    assert 'id="starter-code">"# STARTER-' in html  # JSON for "reset to starter"


def test_timed_escapes_the_sentence_and_makes_its_utc_times_time_elements() -> None:
    from app.web.pages import timed_text

    html = str(timed_text("closed on 2026-12-08 17:00 UTC for <b>'x'</b>; again 2027-01-02 03:04 UTC"))
    assert html == (
        'closed on <time datetime="2026-12-08T17:00:00Z" data-format="long">2026-12-08 17:00 UTC</time> for '
        "&lt;b&gt;&#39;x&#39;&lt;/b&gt;; again "
        '<time datetime="2027-01-02T03:04:00Z" data-format="long">2027-01-02 03:04 UTC</time>'
    )
    assert str(timed_text("open")) == "open"


@pytest.mark.parametrize(
    ("stored", "iso"),
    [
        (datetime(2026, 12, 1, 23, 16), "2026-12-01T23:16:00+00:00"),  # naive, as SQLite hands it back: UTC
        (datetime(2026, 12, 2, 0, 16, tzinfo=timezone(timedelta(hours=1))), "2026-12-01T23:16:00+00:00"),
    ],
)
def test_when_writes_a_time_element_with_its_offset(stored: datetime, iso: str) -> None:
    from app.web.pages import time_element

    assert str(time_element(stored)) == f'<time datetime="{iso}" data-format="short">2026-12-01 23:16 UTC</time>'
    ago = str(time_element(stored, "ago", "5 s <ago>"))
    assert ago == f'<time datetime="{iso}" data-format="ago">5 s &lt;ago&gt;</time>'  # the text is escaped
    assert str(time_element(None)) == ""
    with pytest.raises(ValueError, match="unknown time format"):
        time_element(stored, "weird")


def test_the_error_page_shows_a_refusals_time_in_the_viewers_zone() -> None:
    from app.web.pages import templates

    page = templates.get_template("error.html").render(
        request=None, user=None, title="Not allowed", code=403, message="closed on 2026-12-08 17:00 UTC"
    )
    assert '<time datetime="2026-12-08T17:00:00Z" data-format="long">2026-12-08 17:00 UTC</time>' in page


# --- the learning path on the catalogue ------------------------------------------------------------------------


def test_catalogue_shows_the_learning_path_with_a_learners_standing(
    learner_client: TestClient, learner: User, make_exercise: Callable[..., TinyExercise], db_session: Session
) -> None:
    from app.domain.exercises.bank import store_path
    from tests.app.domain.exercises.test_learning_path import grade, path_of

    first, second, later, loose = make_exercise(), make_exercise(), make_exercise(), make_exercise()
    store_path(session=db_session, path=path_of([("basics", [second.slug, first.slug], []),
                                                 ("next-step", [later.slug], ["basics"])]))  # fmt: skip
    db_session.commit()
    html = learner_client.get("/exercises").text
    assert '<h2 id="path-title">Learning path</h2>' in html and "Warm-up" not in html  # topics give way to modules
    basics = html.split('id="module-basics"', 1)[1].split('id="module-next-step"', 1)[0]
    assert '<span class="module-number">1.</span> Module basics</h3>' in basics and "Why basics." in basics
    assert "<strong>Ready</strong>" in basics and "0 of 2 passed" in basics
    assert basics.index(second.slug) < basics.index(first.slug)  # the path's order, not the title's
    step = html.split('id="module-next-step"', 1)[1]
    assert '<strong>Locked</strong>: finish <a href="#module-basics">Module basics</a> first' in step
    assert "Builds on" not in step  # the lock already names the prerequisite
    assert '<progress max="1" value="0" aria-label="Module next-step: exercises passed">0 of 1</progress>' in step
    assert '<h2 id="others-title">More exercises</h2>' in html and f'href="/exercises/{loose.slug}"' in step

    grade(db_session, learner, first, Verdict.passed)
    grade(db_session, learner, second, Verdict.passed)
    html = learner_client.get("/exercises").text
    basics = html.split('id="module-basics"', 1)[1].split('id="module-next-step"', 1)[0]
    assert "<strong>Done</strong>" in basics and "2 of 2 passed" in basics and "module-done" in html
    step = html.split('id="module-next-step"', 1)[1].split("</section>", 1)[0]
    assert "<strong>Ready</strong>" in step and "finish" not in step
    assert 'Builds on <a href="#module-basics">Module basics</a>.' in step

    by_topic = learner_client.get("/exercises", params={"by": "topic"}).text
    assert '<h2 id="topic-1">Warm-up</h2>' in by_topic and "path-title" not in by_topic
    assert '<a href="/exercises">Show the learning path</a>' in by_topic


def test_staff_see_the_path_without_a_standing(
    client: TestClient, instructor: User, login: Callable[..., None], make_exercise: Callable[..., TinyExercise],
    db_session: Session,
) -> None:  # fmt: skip
    from app.domain.exercises.bank import store_path
    from tests.app.domain.exercises.test_learning_path import path_of

    one, two = make_exercise(), make_exercise()
    store_path(session=db_session, path=path_of([("basics", [one.slug], []), ("next-step", [two.slug], ["basics"])]))
    db_session.commit()
    login(client, instructor)
    html = client.get("/exercises").text
    assert "Module basics" in html and "Why basics." in html and f'href="/exercises/{one.slug}"' in html
    assert "module-status" not in html and 'aria-label="Module basics: exercises passed"' not in html
    assert 'Builds on <a href="#module-basics">Module basics</a>.' in html.split('id="module-next-step"', 1)[1]
