"""Admin pages and API: dashboard numbers, the grades CSV, user management and CSV import."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Role, Submission, SubmissionStatus, User
from app.domain.operations.dashboard import grades_csv, percentile, score_chart_svg
from app.domain.submissions.lifecycle import create_submission
from tests.app.web.test_api_instructor import token
from tests.conftest import PASSWORD, TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def graded(db: Session, user: User, ex: TinyExercise, verdict: Verdict, score: float) -> Submission:
    sub = create_submission(session=db, user=user, exercise=ex.exercise, code="x", max_bytes=65536)
    sub.status, sub.verdict, sub.score, sub.runtime_ms = SubmissionStatus.graded, verdict, score, 100
    sub.started_at = sub.created_at
    db.flush()
    return sub


def test_grades_csv_rows_match_the_database(
    admin_client: TestClient, make_user: Callable[..., User], tiny_exercise: TinyExercise, db_session: Session
) -> None:
    ada = make_user(Role.learner, email="=cmd@example.com")
    bob = make_user(Role.learner)
    graded(db_session, ada, tiny_exercise, Verdict.failed, 2.0)
    graded(db_session, ada, tiny_exercise, Verdict.passed, 5.0)
    db_session.commit()
    response = admin_client.get("/admin/grades.csv")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    by_key = {(r["email"], r["exercise"]): r for r in rows}
    learners = db_session.scalars(select(User).where(User.role == Role.learner)).all()
    assert len([r for r in rows if r["exercise"] == tiny_exercise.slug]) == len(learners)
    ada_row = by_key[("'=cmd@example.com", tiny_exercise.slug)]  # formula injection defused
    assert (ada_row["best_score"], ada_row["max_score"], ada_row["attempts"], ada_row["passed"]) == (
        "5",
        "5",
        "2",
        "yes",
    )
    assert ada_row["last_submission"]
    bob_row = by_key[(bob.email, tiny_exercise.slug)]
    assert (bob_row["best_score"], bob_row["attempts"], bob_row["passed"], bob_row["last_submission"]) == (
        "",
        "0",
        "no",
        "",
    )


def test_csv_cells_that_look_like_formulas_are_prefixed() -> None:
    from app.domain.operations.dashboard import Cell, ExerciseRow, GradeMatrix

    users = [User(id=i, email=e) for i, e in enumerate(["+a@x.io", "-b@x.io", "@c@x.io", 'q"uote,@x.io'])]
    row = ExerciseRow(slug="s", title="t", max_score=1.0, published=True)
    text = grades_csv(GradeMatrix(learners=users, exercises=[row], cells={(0, "s"): Cell(attempts=1, best=1.0)}))
    emails = [r[0] for r in csv.reader(io.StringIO(text))][1:]
    assert emails == ["'+a@x.io", "'-b@x.io", "'@c@x.io", 'q"uote,@x.io']


def test_dashboard_shows_stats_chart_and_matrix(
    admin_client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    graded(db_session, learner, tiny_exercise, Verdict.failed, 1.0)
    graded(db_session, learner, tiny_exercise, Verdict.passed, 5.0)
    db_session.commit()
    html = admin_client.get("/admin").text
    assert "<svg" in html and 'role="img"' in html and learner.email in html and "in-process" in html
    stats = admin_client.get("/api/admin/stats").json()
    row = next(e for e in stats["exercises"] if e["slug"] == tiny_exercise.slug)
    assert row["attempts"] == 2 and row["pass_rate"] == 1.0 and row["median_attempts_to_pass"] == 2.0
    assert sum(row["score_histogram"]) == 1 and row["score_histogram"][-1] == 1
    assert stats["queues"]["mode"] == "in-process" and stats["timing"]["runtime_p50_ms"] == 100.0


def test_percentiles_and_chart_are_plain_numbers() -> None:
    assert percentile([], 50) is None
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile(list(range(1, 101)), 95) == 95
    assert "<script" not in score_chart_svg([0.0, 0.5, 1.0])


def test_admin_creates_changes_and_disables_users(
    admin_client: TestClient, admin: User, client: TestClient, db_session: Session, login: Callable[..., None]
) -> None:
    created = admin_client.post("/api/admin/users", json={"email": "New@Example.com", "name": "Nu", "role": "learner"})
    assert created.status_code == 201 and created.json()["password"]
    new_id, password = created.json()["id"], created.json()["password"]
    assert admin_client.post(f"/api/admin/users/{new_id}", json={"role": "instructor"}).json()["role"] == "instructor"
    assert admin_client.post(f"/api/admin/users/{admin.id}", json={"active": False}).status_code == 422
    assert admin_client.post(f"/api/admin/users/{admin.id}", json={"role": "learner"}).status_code == 422

    from fastapi.testclient import TestClient as Client

    other = Client(client.app)
    assert other.post("/api/auth/login", json={"email": "new@example.com", "password": password}).status_code == 200
    assert other.get("/api/auth/me").status_code == 200
    csrf = token(admin_client, "/admin/users")
    admin_client.post(f"/admin/users/{new_id}/active", data={"csrf_token": csrf, "active": "0"})
    assert db_session.get(User, new_id).is_active is False
    assert other.get("/api/auth/me").status_code == 401  # the open session stopped working
    assert other.post("/api/auth/login", json={"email": "new@example.com", "password": password}).status_code == 401


def test_user_form_escapes_and_reports_errors(admin_client: TestClient) -> None:
    csrf = token(admin_client, "/admin/users")
    response = admin_client.post("/admin/users", data={"csrf_token": csrf, "email": "<b>bad", "role": "learner"})
    assert response.status_code == 422 and "&lt;b&gt;bad" in response.text and "<b>bad" not in response.text


def test_csv_import_is_all_or_nothing(admin_client: TestClient, learner: User, db_session: Session) -> None:
    csrf = token(admin_client, "/admin/users")
    bad = (
        f"email,name,role\nok1@example.com,Ok,learner\nnot-an-email,X,\n{learner.email},Dup,\nok2@example.com,,wizard\n"
    )
    response = admin_client.post(
        "/admin/users/import", data={"csrf_token": csrf}, files={"file": ("l.csv", bad.encode(), "text/csv")}
    )
    assert response.status_code == 422 and "Nothing imported" in response.text
    for needle in ["line 3", "not a valid e-mail", "line 4", "already has an account", "line 5", "unknown role"]:
        assert needle in response.text
    assert db_session.scalar(select(User).where(User.email == "ok1@example.com")) is None

    good = "ok1@example.com,Ok One\nok2@example.com,,instructor\n"
    response = admin_client.post(
        "/admin/users/import", data={"csrf_token": csrf}, files={"file": ("l.csv", good.encode(), "text/csv")}
    )
    assert response.status_code == 200 and "2 accounts ready" in response.text
    ok2 = db_session.scalar(select(User).where(User.email == "ok2@example.com"))
    assert ok2 is not None and ok2.role is Role.instructor
    ok1 = db_session.scalar(select(User).where(User.email == "ok1@example.com"))
    assert ok1 is not None and ok1.name == "Ok One" and ok1.role is Role.learner


def test_instructors_cannot_reach_admin(client: TestClient, instructor: User, login: Callable[..., None]) -> None:
    login(client, instructor, PASSWORD)
    assert client.get("/admin").status_code == 403 and client.get("/api/admin/users").status_code == 403
    assert client.get("/instructor").status_code == 200
