"""Courses and assignments over the API: who sees what, enrollment, gated submissions, extensions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.domain.models import AssignmentItem, Course, Submission, SubmissionStatus, User, utcnow
from tests.conftest import RecordingDispatcher, TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

CODE = "def add(a, b):\n    return a + b\n"


def logout(client: TestClient) -> None:
    assert client.post("/api/auth/logout", json={}).status_code == 204


def _iso(delta: timedelta) -> str:
    return (utcnow() + delta).isoformat()


@pytest.fixture
def course(client: TestClient, instructor: User, login: Callable[..., None], learner: User) -> str:
    """Create course ``gpu-101`` as ``instructor`` and enroll ``learner``; leave the client logged out."""
    login(client, instructor)
    made = client.post("/api/courses", json={"slug": "gpu-101", "title": "GPU 101"})
    assert made.status_code == 201, made.text
    rows = client.post("/api/courses/gpu-101/members", json={"csv": f"email\n{learner.email}\n"})
    assert rows.status_code == 200 and rows.json()[0]["outcome"] == "added", rows.text
    logout(client)
    return "gpu-101"


def _assignment(client: TestClient, slug: str, exercise: str, **fields: Any) -> dict[str, Any]:
    body = {"title": "Week 1", "items": [{"exercise": exercise, "weight": 1}], **fields}
    made = client.post(f"/api/courses/{slug}/assignments", json=body)
    assert made.status_code == 201, made.text
    return dict(made.json())


def test_only_site_instructors_create_courses_and_outsiders_see_nothing(
    client: TestClient, course: str, login: Callable[..., None], learner: User, other_learner: User
) -> None:
    login(client, learner)
    refused = client.post("/api/courses", json={"slug": "mine", "title": "Mine"})
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
    mine = client.get("/api/courses").json()
    assert [c["slug"] for c in mine][:1] == ["practice"] and {
        "slug": "gpu-101",
        "title": "GPU 101",
        "term": "",
        "is_practice": False,
        "role": "learner",
        "archived_at": None,
    } in mine
    assert client.get("/api/courses/gpu-101/members").status_code == 403  # a learner is no staff
    logout(client)
    login(client, other_learner)
    assert client.get("/api/courses/gpu-101").status_code == 404  # not enrolled: the course does not exist for them
    assert "gpu-101" not in {c["slug"] for c in client.get("/api/courses").json()}


def test_invite_links_enroll_and_rotating_ends_the_old_one(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, other_learner: User
) -> None:
    login(client, instructor)
    first = client.post("/api/courses/gpu-101/invite", json={}).json()
    second = client.post("/api/courses/gpu-101/invite", json={"rotate": True}).json()
    assert first["token"] != second["token"] and second["path"] == f"/join/{second['token']}"
    logout(client)
    login(client, other_learner)
    assert client.post(f"/api/invites/{first['token']}", json={}).status_code == 404
    joined = client.post(f"/api/invites/{second['token']}", json={})
    assert joined.status_code == 200 and joined.json()["role"] == "learner"
    assert client.get("/api/courses/gpu-101").status_code == 200


def test_a_learner_sees_their_dates_gate_and_score(
    client: TestClient,
    course: str,
    login: Callable[..., None],
    instructor: User,
    learner: User,
    tiny_exercise: TinyExercise,
    dispatcher: RecordingDispatcher,
) -> None:
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, due_at=_iso(timedelta(days=7)), max_attempts=2)
    assert made["items"][0]["gate"] is None  # staff see the assignment, not a gate of their own
    logout(client)

    login(client, learner)
    view = client.get(f"/api/assignments/{made['id']}").json()
    gate = view["items"][0]["gate"]
    assert (gate["window"], gate["allowed"], gate["attempts_left"]) == ("open", True, 2)
    assert "2 attempts left" in gate["reason"] and "due on" in gate["reason"]
    listed = client.get(f"/api/courses/{course}").json()["assignments"]
    assert [a["id"] for a in listed] == [made["id"]]

    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    sent = client.post(url, json={"code": CODE, "assignment_id": made["id"]})
    assert sent.status_code == 202, sent.text
    assert dispatcher.calls and dispatcher.calls[-1][0] == sent.json()["id"]
    gate = client.get(f"/api/assignments/{made['id']}").json()["items"][0]["gate"]
    assert (gate["attempts_used"], gate["attempts_left"]) == (1, 1)


def test_the_attempt_limit_holds_and_platform_errors_cost_nothing(
    client: TestClient,
    course: str,
    login: Callable[..., None],
    instructor: User,
    learner: User,
    tiny_exercise: TinyExercise,
    db_session: Session,
) -> None:
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, max_attempts=1)
    logout(client)
    login(client, learner)
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    first = client.post(url, json={"code": CODE, "assignment_id": made["id"]})
    assert first.status_code == 202
    refused = client.post(url, json={"code": CODE, "assignment_id": made["id"]})
    assert refused.status_code == 403 and "no attempts left" in refused.json()["detail"]

    row = db_session.get(Submission, first.json()["id"])
    assert row is not None and row.assignment_id == made["id"]
    row.status, row.verdict = SubmissionStatus.error, Verdict.internal_error  # our fault: it must not count
    db_session.commit()
    again = client.post(url, json={"code": CODE, "assignment_id": made["id"]})
    assert again.status_code == 202, again.text
    practice = client.post(url, json={"code": CODE})  # practice cannot bypass the limit (examples only, the default)
    assert practice.status_code == 403 and "runs only the example tests" in practice.json()["detail"]


def test_closed_not_open_and_rate_limited_submissions_are_refused_with_the_reason(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    make_exercise: Callable[..., TinyExercise],
) -> None:  # fmt: skip
    early, late, rated = make_exercise(), make_exercise(), make_exercise()
    login(client, instructor)
    future = _assignment(client, course, early.slug, opens_at=_iso(timedelta(days=1)))
    past = _assignment(client, course, late.slug, opens_at=_iso(timedelta(days=-3)), due_at=_iso(timedelta(days=-1)))
    bucket = _assignment(client, course, rated.slug, rate_burst=1, rate_refill_s=300)
    logout(client)
    login(client, learner)

    def send(ex: TinyExercise, assignment: dict[str, Any]) -> Any:
        body = {"code": CODE, "assignment_id": assignment["id"]}
        return client.post(f"/api/exercises/{ex.slug}/submissions", json=body)

    opens = send(early, future)
    assert opens.status_code == 403 and opens.json()["detail"].startswith("opens on")
    closed = send(late, past)
    assert closed.status_code == 403 and closed.json()["detail"].startswith("closed on")
    assert send(rated, bucket).status_code == 202
    limited = send(rated, bucket)
    assert limited.status_code == 429 and limited.json()["detail"].startswith("Wait ")
    assert "then submit again" in limited.json()["detail"] and int(limited.headers["Retry-After"]) > 0
    assert 1 <= int(limited.headers["Retry-After"]) <= 300
    other = send(rated, past)  # an exercise that is not part of that assignment
    assert other.status_code == 403 and "is not part of" in other.json()["detail"]


def test_an_extension_gives_new_dates_and_attempts_and_is_audited(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(
        client, course, tiny_exercise.slug, opens_at=_iso(timedelta(days=-3)), due_at=_iso(timedelta(days=-1)),
        max_attempts=1,
    )  # fmt: skip
    missing = client.post(
        f"/api/assignments/{made['id']}/extensions",
        json={"email": learner.email, "due_at": _iso(timedelta(days=2)), "reason": " "},
    )
    assert missing.status_code == 422  # a reason is required: the audit list must say why
    granted = client.post(
        f"/api/assignments/{made['id']}/extensions",
        json={"email": learner.email, "due_at": _iso(timedelta(days=2)), "extra_attempts": 1, "reason": "ill"},
    )
    assert granted.status_code == 201, granted.text
    assert granted.json()["granted_by"] == instructor.email and granted.json()["revoked_at"] is None
    logout(client)

    login(client, learner)
    view = client.get(f"/api/assignments/{made['id']}").json()
    assert view["extended"] is True and view["items"][0]["gate"]["attempts_left"] == 2
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    assert client.post(url, json={"code": CODE, "assignment_id": made["id"]}).status_code == 202
    assert client.get(f"/api/assignments/{made['id']}/extensions").status_code == 403  # staff only
    logout(client)

    login(client, instructor)
    revoked = client.post(f"/api/extensions/{granted.json()['id']}/revoke", json={})
    assert revoked.status_code == 200 and revoked.json()["revoked_by"] == instructor.email
    audit = client.get(f"/api/assignments/{made['id']}/extensions").json()
    assert [(e["reason"], e["revoked_at"] is not None) for e in audit] == [("ill", True)]
    logout(client)
    login(client, learner)
    closed = client.post(url, json={"code": CODE, "assignment_id": made["id"]})
    assert closed.status_code == 403 and closed.json()["detail"].startswith("closed on")


def test_outsiders_and_staff_cannot_submit_under_an_assignment(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, other_learner: User,
    tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug)
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    staff = client.post(url, json={"code": CODE, "assignment_id": made["id"]})
    assert staff.status_code == 403
    logout(client)
    login(client, other_learner)
    assert client.post(url, json={"code": CODE, "assignment_id": made["id"]}).status_code == 404
    assert client.get(f"/api/assignments/{made['id']}").status_code == 404
    assert client.post(url, json={"code": CODE, "assignment_id": 2**31}).status_code == 422  # beyond any id


def test_without_the_practice_course_learners_open_only_their_courses_exercises(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    other_learner: User, make_exercise: Callable[..., TinyExercise], db_session: Session,
) -> None:  # fmt: skip
    assigned, loose, later = make_exercise(), make_exercise(), make_exercise()
    login(client, instructor)
    _assignment(client, course, assigned.slug)
    _assignment(client, course, later.slug, opens_at=_iso(timedelta(days=1)))
    logout(client)
    db_session.execute(delete(Course).where(Course.is_practice.is_(True)))
    db_session.commit()

    login(client, learner)
    assert client.get(f"/api/exercises/{assigned.slug}").status_code == 200
    assert client.get(f"/api/exercises/{loose.slug}").status_code == 404
    assert client.get(f"/api/exercises/{later.slug}").status_code == 404  # its assignment opens tomorrow
    logout(client)
    login(client, other_learner)
    assert client.get(f"/api/exercises/{assigned.slug}").status_code == 404


def test_the_gradebook_shows_overrides_and_exports_csv_to_staff_only(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug)
    item_id = db_session.scalars(select(AssignmentItem.id).where(AssignmentItem.assignment_id == made["id"])).one()
    book = client.get(f"/api/courses/{course}/gradebook").json()
    (row,) = book["rows"]
    assert row["email"] == learner.email and row["cells"][0]["score_pct"] == 0 and row["total_pct"] == 0
    assert client.post(
        f"/api/courses/{course}/overrides", json={"item_id": item_id, "email": learner.email, "score_pct": 80,
                                                  "comment": " "}
    ).status_code == 422  # fmt: skip
    audit = client.post(
        f"/api/courses/{course}/overrides",
        json={"item_id": item_id, "email": learner.email, "score_pct": 80, "comment": "oral exam"},
    )
    assert audit.status_code == 201 and audit.json()[0]["comment"] == "oral exam" and audit.json()[0]["in_force"]
    csv_answer = client.get(f"/api/courses/{course}/gradebook.csv")
    assert csv_answer.headers["content-type"].startswith("text/csv") and "80.0" in csv_answer.text
    logout(client)

    login(client, learner)
    assert client.get(f"/api/courses/{course}/gradebook").status_code == 403
    mine = client.get(f"/api/courses/{course}/grades/me").json()
    assert mine["cells"][0]["score_pct"] == 80 and mine["cells"][0]["override"]["comment"] == "oral exam"
    assert client.post(f"/api/overrides/{audit.json()[0]['id']}/revert", json={}).status_code in (403, 404)
    logout(client)

    login(client, instructor)
    assert client.post(f"/api/overrides/{audit.json()[0]['id']}/revert", json={}).status_code == 200
    assert client.get(f"/api/courses/{course}/gradebook").json()["rows"][0]["cells"][0]["score_pct"] == 0
    assert client.get(f"/api/courses/{course}/overrides").json()[0]["reverted_by"] == instructor.email
