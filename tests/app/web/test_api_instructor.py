"""Instructor pages and API: drafts from the editor and from zips, publish visibility, checks, regrade history."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, ExerciseCheck, GradingRecord, SubmissionStatus, TestResult, User
from app.domain.submissions.lifecycle import create_submission
from tests.app.web.test_api_instructor_zip import make_zip
from tests.conftest import RecordingDispatcher, TinyExercise, tiny_files
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from worker.grading.sandbox.fake import FakeSandbox

pytestmark = pytest.mark.postgres


@pytest.fixture
def checks(dispatcher: RecordingDispatcher) -> list[tuple[int, str]]:
    """The ``(check_id, queue)`` of every check the pages started (recorded by the dispatcher, not run)."""
    return dispatcher.checks


@pytest.fixture
def staff_client(client: TestClient, instructor: User, login: Callable[..., None]) -> TestClient:
    login(client, instructor)
    return client


def token(client: TestClient, path: str = "/instructor") -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).text)
    assert match, "no CSRF token on the page"
    return match.group(1)


def author_fields(slug: str, csrf: str, **extra: str) -> dict[str, str]:
    files = tiny_files(prompt_md="Write `add`.\n", queue="cpu", tag=slug)
    return {
        "csrf_token": csrf, "slug": slug, "title": "Add numbers", "topic": "Warm-up", "difficulty": "beginner",
        "framework": "python", "queue": "cpu", "timeout_s": "10", "memory_mb": "256", "prompt_md": files["prompt.md"],
        "starter": files["starter.py"], "solution": files["solution.py"], "test_file": "test_add.py",
        "tests": files["tests/test_add.py"], "wrong_name": "subtracts.py", "wrong_code": files["wrong/subtracts.py"],
        "wrong_must_fail": "test_add.py::test_small", "wrong_why": "subtracts", **extra,
    }  # fmt: skip


def test_learners_get_403_on_every_staff_page_and_api(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    slug = tiny_exercise.slug
    paths = ["/instructor", "/instructor/new", f"/instructor/exercises/{slug}", "/admin", "/admin/users"]
    paths += ["/admin/grades.csv", f"/instructor/exercises/{slug}/submissions", "/api/instructor/exercises"]
    paths += ["/api/admin/stats", "/api/admin/users", f"/instructor/exercises/{slug}/versions/1/preview"]
    for path in paths:
        assert learner_client.get(path, follow_redirects=False).status_code == 403, path
    assert learner_client.post("/api/instructor/preview", json={"markdown": "x"}).status_code == 403
    assert learner_client.post(f"/api/instructor/exercises/{slug}/unpublish", json={}).status_code == 403
    assert learner_client.post("/api/admin/users", json={"email": "x@example.com"}).status_code == 403


def test_logged_out_visitors_are_sent_to_login(client: TestClient) -> None:
    response = client.get("/instructor", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/login?next=/instructor"
    assert client.get("/api/instructor/exercises").status_code == 401


def test_forms_without_the_csrf_token_are_refused(staff_client: TestClient, db_session: Session) -> None:
    fields = author_fields("no-token-here", "wrong-token")
    assert staff_client.post("/instructor/new", data=fields).status_code == 403
    del fields["csrf_token"]
    assert staff_client.post("/instructor/new", data=fields).status_code == 403
    assert db_session.scalar(select(Exercise).where(Exercise.slug == "no-token-here")) is None


def test_authoring_makes_an_unlisted_draft_then_check_and_publish_make_it_live(
    staff_client: TestClient,
    db_session: Session,
    checks: list[tuple[int, str]],
    learner: User,
    login: Callable[..., None],
) -> None:
    csrf = token(staff_client)
    response = staff_client.post("/instructor/new", data=author_fields("authored-add", csrf), follow_redirects=False)
    assert (
        response.status_code == 303 and response.headers["location"] == "/instructor/exercises/authored-add/versions/1"
    )
    exercise = db_session.scalar(select(Exercise).where(Exercise.slug == "authored-add"))
    assert exercise is not None and exercise.current_version is None and len(exercise.versions) == 1
    version = exercise.versions[0]
    assert version.source == "editor" and version.files["wrong/subtracts.py"].startswith("# WRONG")
    assert 'file = "wrong/subtracts.py"' in version.files["exercise.toml"]

    # Publishing needs a passed check.
    publish = "/instructor/exercises/authored-add/versions/1/publish"
    staff_client.post(publish, data={"csrf_token": csrf})
    assert exercise.current_version is None
    assert staff_client.post("/api/instructor/exercises/authored-add/versions/1/publish", json={}).status_code == 409

    assert staff_client.post(
        "/instructor/exercises/authored-add/versions/1/check", data={"csrf_token": csrf}
    ).status_code in (200, 303)
    check_id, queue = checks[-1]
    check = db_session.get(ExerciseCheck, check_id)
    assert check is not None and check.status == "queued" and check.total == 2  # solution + one wrong variant
    assert queue == "cpu" and check.dispatched_at is not None  # sent after commit, stamped for the sweeper
    check.status = "passed"
    db_session.commit()
    staff_client.post(publish, data={"csrf_token": csrf})
    db_session.refresh(exercise)
    assert exercise.current_version_id == version.id and exercise.is_published

    staff_client.cookies.clear()
    login(staff_client, learner)
    assert staff_client.get("/api/exercises/authored-add").status_code == 200


def test_a_refused_draft_keeps_the_input_and_writes_nothing(staff_client: TestClient, db_session: Session) -> None:
    csrf = token(staff_client)
    fields = author_fields("broken-add", csrf, wrong_must_fail="test_add.py::test_nope", title="Kept <title>")
    response = staff_client.post("/instructor/new", data=fields)
    assert response.status_code == 422
    assert "names unknown tests" in response.text and 'value="Kept &lt;title&gt;"' in response.text
    assert db_session.scalar(select(Exercise).where(Exercise.slug == "broken-add")) is None


def test_upload_makes_a_draft_and_refusals_change_nothing(staff_client: TestClient, db_session: Session) -> None:
    csrf = token(staff_client)
    files = tiny_files(prompt_md="Add.\n", queue="cpu", tag="up")
    good = make_zip({f"zipped-add/{p}": c for p, c in files.items()})
    response = staff_client.post(
        "/instructor/upload", data={"csrf_token": csrf}, files={"archive": ("x.zip", good, "application/zip")},
        follow_redirects=False,
    )  # fmt: skip
    assert response.status_code == 303, response.text
    exercise = db_session.scalar(select(Exercise).where(Exercise.slug == "zipped-add"))
    assert exercise is not None and exercise.versions[0].source == "upload" and not exercise.is_published

    bad = make_zip({"evil-add/../x.py": "x"})
    response = staff_client.post(
        "/instructor/upload", data={"csrf_token": csrf}, files={"archive": ("evil.zip", bad, "application/zip")}
    )
    assert response.status_code == 422 and "Upload refused" in response.text and "is not allowed" in response.text
    assert db_session.scalar(select(Exercise).where(Exercise.slug == "evil-add")) is None
    invalid = make_zip({f"no-toml/{p}": c for p, c in files.items() if p != "exercise.toml"})
    response = staff_client.post(
        "/instructor/upload", data={"csrf_token": csrf}, files={"archive": ("n.zip", invalid, "application/zip")}
    )
    assert response.status_code == 422 and "exercise.toml is missing" in response.text


def test_unpublish_hides_and_preview_shows_a_draft_without_secrets(
    staff_client: TestClient, tiny_exercise: TinyExercise, db_session: Session, learner: User,
    login: Callable[..., None],
) -> None:  # fmt: skip
    slug = tiny_exercise.slug
    html = staff_client.get(f"/instructor/exercises/{slug}/versions/1/preview").text
    assert tiny_exercise.starter_marker in html and "Preview of version 1" in html
    for marker in tiny_exercise.secret_markers:
        assert marker not in html
    assert staff_client.post(f"/api/instructor/exercises/{slug}/unpublish", json={}).json()["published"] is False
    staff_client.cookies.clear()
    login(staff_client, learner)
    assert staff_client.get(f"/api/exercises/{slug}").status_code == 404
    assert slug not in staff_client.get("/exercises").text


def test_preview_renders_sanitised_markdown(staff_client: TestClient) -> None:
    body = staff_client.post("/api/instructor/preview", json={"markdown": "**hi** <script>alert(1)</script>"}).json()
    assert "<strong>hi</strong>" in body["html"] and "script" not in body["html"]


def test_submissions_are_filtered_and_learner_code_is_escaped(
    staff_client: TestClient, tiny_exercise: TinyExercise, learner: User, other_learner: User, db_session: Session
) -> None:
    evil = "<script>alert('x')</script>"
    mine = create_submission(
        session=db_session, user=learner, exercise=tiny_exercise.exercise, code=evil, max_bytes=65536
    )
    create_submission(
        session=db_session, user=other_learner, exercise=tiny_exercise.exercise, code="ok", max_bytes=65536
    )
    mine.status, mine.verdict, mine.score, mine.message = SubmissionStatus.graded, Verdict.failed, 0.0, evil
    db_session.commit()
    listing = staff_client.get(
        f"/api/instructor/exercises/{tiny_exercise.slug}/submissions", params={"learner": learner.email[:12]}
    )
    assert [s["id"] for s in listing.json()] == [mine.id]
    assert (
        len(
            staff_client.get(
                f"/api/instructor/exercises/{tiny_exercise.slug}/submissions", params={"verdict": "pending"}
            ).json()
        )
        == 1
    )
    assert (
        staff_client.get(
            f"/api/instructor/exercises/{tiny_exercise.slug}/submissions", params={"since": "2999-01-01"}
        ).json()
        == []
    )
    page = staff_client.get(f"/instructor/submissions/{mine.id}").text
    assert evil not in page and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert evil not in staff_client.get(f"/instructor/exercises/{tiny_exercise.slug}/submissions").text


def test_regrade_archives_the_old_result_and_requeues(
    staff_client: TestClient, tiny_exercise: TinyExercise, learner: User, db_session: Session,
    dispatcher: RecordingDispatcher,
) -> None:  # fmt: skip
    sub = create_submission(
        session=db_session, user=learner, exercise=tiny_exercise.exercise, code="x", max_bytes=65536
    )
    sub.status, sub.verdict, sub.score, sub.attempts = SubmissionStatus.graded, Verdict.failed, 2.0, 1
    sub.tests.append(
        TestResult(position=0, name="test_add.py::test_small", outcome="failed", message="m", points=0, max_points=2)
    )
    running = create_submission(
        session=db_session, user=learner, exercise=tiny_exercise.exercise, code="y", max_bytes=65536
    )
    running.status = SubmissionStatus.running
    db_session.commit()
    csrf = token(staff_client)
    response = staff_client.post(
        f"/instructor/exercises/{tiny_exercise.slug}/regrade", data={"csrf_token": csrf, "version": "1"},
        follow_redirects=False,
    )  # fmt: skip
    assert response.status_code == 303 and response.headers["location"].startswith("/instructor/regrades/")
    db_session.refresh(sub)
    assert sub.status is SubmissionStatus.queued and sub.verdict is None and sub.tests == [] and sub.attempts == 0
    assert dispatcher.calls == [(sub.id, "cpu")]  # the running one is left alone
    records = list(db_session.scalars(select(GradingRecord).where(GradingRecord.submission_id == sub.id)))
    assert len(records) == 1 and records[0].verdict == "failed" and records[0].score == 2.0
    assert records[0].tests[0]["name"] == "test_add.py::test_small"
    regrade_id = int(response.headers["location"].rsplit("/", 1)[1])
    assert staff_client.get(f"/api/instructor/regrades/{regrade_id}").json() == {
        "id": regrade_id,
        "total": 1,
        "done": 0,
        "passed": 0,
        "finished": False,
    }
    # The grading task's claim takes the requeued row exactly once.
    from app.domain.submissions.lifecycle import claim

    assert claim(session=db_session, submission_id=sub.id, lease_s=900) is not None
    assert claim(session=db_session, submission_id=sub.id, lease_s=900) is None
    history = staff_client.get(f"/api/instructor/submissions/{sub.id}/history").json()
    assert [h["verdict"] for h in history] == ["failed"]


def test_sync_does_not_unpublish_exercises_made_in_the_browser(db_session: Session, tmp_path) -> None:
    from app.domain.exercises.authoring import add_draft, validate
    from app.domain.exercises.bank import sync_bank

    spec = validate("browser-only", tiny_files(prompt_md="x", queue="cpu", tag="b"))
    version, _ = add_draft(session=db_session, spec=spec, source="editor", user=None)
    version.exercise.current_version = version
    version.exercise.is_published = True
    db_session.flush()
    report = sync_bank(session=db_session, root=tmp_path)
    assert "browser-only" not in report.unpublished and version.exercise.is_published


def test_run_check_records_progress(db_session: Session, settings, fake_sandbox: FakeSandbox) -> None:
    import textwrap

    from app.domain.exercises.authoring import add_draft, validate
    from app.domain.exercises.checks import create_check, run_check

    files = {
        "exercise.toml": 'title = "Check me"\n[limits]\ntimeout_s = 20\nmemory_mb = 256\n\n[[wrong]]\n'
        'file = "wrong/minus.py"\nmust_fail = ["test_add.py::test_small"]\n',
        "prompt.md": "add\n", "starter.py": "def add(a, b):\n    raise NotImplementedError\n",
        "solution.py": "def add(a, b):\n    return a + b\n", "wrong/minus.py": "def add(a, b):\n    return a - b\n",
        "tests/test_add.py": textwrap.dedent("""
            def test_small(submission):
                assert submission.add(1, 2) == 3, "add(1, 2) should be 3"
            """),
    }  # fmt: skip
    version, _ = add_draft(session=db_session, spec=validate("check-me", files), source="editor", user=None)
    check = create_check(session=db_session, version=version, user=None)
    db_session.commit()
    fake_sandbox.handler = lambda job: job.reply(default="failed" if "a - b" in job.code else "passed")

    @contextmanager
    def factory():
        yield db_session

    # One shared test session: no heartbeat thread may use it concurrently, so the beat is far off.
    quiet = settings.model_copy(update={"heartbeat_interval_s": 3600})
    run_check(check.id, factory=factory, sandbox=fake_sandbox, settings=quiet)
    db_session.refresh(check)
    assert check.status == "passed", check.problems
    assert len(check.lines) == 2 and all(line.startswith("ok") for line in check.lines)
    assert check.attempts == 1 and check.started_at is not None and check.heartbeat_at is not None


def test_the_editor_writes_a_rubric_and_reads_it_back(staff_client: TestClient, db_session: Session) -> None:
    fields = author_fields("with-rubric", token(staff_client, "/instructor/new"))
    fields.update(rubric="1 | clear-names | Names say what they hold.\n\n-1 | hardcoded | Hard-codes answers.",
                  rubric_comments="Name the numbers.\n")  # fmt: skip
    saved = staff_client.post("/instructor/new", data=fields, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    exercise = db_session.scalars(select(Exercise).where(Exercise.slug == "with-rubric")).one()
    version = exercise.versions[-1]
    meta = tomllib.loads(dict(version.files)["exercise.toml"])
    assert [(r["id"], r["points"]) for r in meta["rubric"]] == [("clear-names", 1.0), ("hardcoded", -1.0)]
    assert meta["rubric_comments"] == ["Name the numbers."]
    again = staff_client.get(f"/instructor/new?from=with-rubric&version={version.number}")
    assert "1 | clear-names | Names say what they hold.\n-1 | hardcoded | Hard-codes answers." in again.text
    assert "feedback" not in meta["wrong"][0], "a page that sends no wrong_feedback keeps its variants"
    for bad, reason in (("one | x | y", "is not a number"), ("1 | only two", "points | id | text"),
                        ("0 | zero | Nothing.", "must not be 0")):  # fmt: skip
        refused = staff_client.post("/instructor/new", data={**fields, "slug": "bad-rubric", "rubric": bad})
        assert refused.status_code == 422 and reason in refused.text, bad
    assert db_session.scalar(select(Exercise).where(Exercise.slug == "bad-rubric")) is None


def test_the_editor_keeps_a_wrong_variants_feedback_fragment(staff_client: TestClient, db_session: Session) -> None:
    fields = author_fields("with-feedback", token(staff_client, "/instructor/new"), wrong_feedback="should be 3")
    assert staff_client.post("/instructor/new", data=fields, follow_redirects=False).status_code == 303
    version = db_session.scalars(select(Exercise).where(Exercise.slug == "with-feedback")).one().versions[-1]
    assert tomllib.loads(dict(version.files)["exercise.toml"])["wrong"][0]["feedback"] == "should be 3"
    again = staff_client.get(f"/instructor/new?from=with-feedback&version={version.number}")
    assert 'name="wrong_feedback" type="text" value="should be 3"' in again.text
