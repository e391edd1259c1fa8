"""A course across terms and a person's data over the API and the pages: copy, archive, audit, export, erase."""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.models import AssignmentItem, Course, CourseRole, Role, Submission, SubmissionStatus, User, utcnow
from tests.app.web.test_api_courses import course, logout  # noqa: F401  (course: a fixture)
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
CODE = "def add(a, b):\n    return a + b\n"


def _assignment(client: TestClient, slug: str, exercise: str, **fields: Any) -> dict[str, Any]:
    body = {"title": "Week 1", "items": [{"exercise": exercise, "weight": 2}], **fields}
    made = client.post(f"/api/courses/{slug}/assignments", json=body)
    assert made.status_code == 201, made.text
    return dict(made.json())


def test_next_term_over_the_api_and_who_may_start_it(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    tiny_exercise: TinyExercise, make_user: Callable[..., User], db_session: Session,
) -> None:  # fmt: skip
    ta = make_user(Role.learner)
    membership.enroll(session=db_session, course=db_session.scalars(select(Course).where(Course.slug == course)).one(),
                      user=ta, role=CourseRole.ta)  # fmt: skip
    db_session.commit()
    login(client, instructor)
    due = (utcnow() + timedelta(days=10)).replace(microsecond=0)
    _assignment(client, course, tiny_exercise.slug, due_at=due.isoformat(), max_attempts=4)
    body = {"slug": "gpu-102", "title": "GPU 101", "term": "Spring 2027", "shift_days": 182, "with_staff": True}
    made = client.post(f"/api/courses/{course}/copy", json=body)
    assert made.status_code == 201, made.text
    assert made.json() == {"slug": "gpu-102", "title": "GPU 101", "term": "Spring 2027", "is_practice": False,
                           "role": "instructor", "archived_at": None}  # fmt: skip
    (copied,) = client.get("/api/courses/gpu-102").json()["assignments"]
    assert (copied["title"], copied["is_published"], copied["max_attempts"]) == ("Week 1", False, 4)
    assert copied["due_at"] == (due + timedelta(days=182)).isoformat().replace("+00:00", "Z")
    members = {m["email"]: m["role"] for m in client.get("/api/courses/gpu-102/members").json()}
    assert members == {instructor.email: "instructor", ta.email: "ta"}
    again = client.post(f"/api/courses/{course}/copy", json=body)
    assert again.status_code == 409 and "already exists" in again.json()["detail"]
    both = client.post(f"/api/courses/{course}/copy", json=body | {"slug": "x-3", "first_due": due.isoformat()})
    assert both.status_code == 422 and "either" in both.json()["detail"]
    logout(client)
    login(client, ta)
    assert client.post(f"/api/courses/{course}/copy", json=body | {"slug": "by-ta"}).status_code == 403
    logout(client)
    login(client, learner)
    assert client.post(f"/api/courses/{course}/copy", json=body | {"slug": "by-learner"}).status_code == 403


def test_an_archived_course_refuses_every_change_and_its_learner_still_reads(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    admin: User, tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    week = _assignment(client, course, tiny_exercise.slug)
    logout(client)
    login(client, learner)
    sent = client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE, "assignment_id": week["id"]}
    )
    assert sent.status_code == 202, sent.text
    sub = db_session.get(Submission, sent.json()["id"])
    assert sub is not None
    sub.status, sub.verdict, sub.score, sub.max_score = SubmissionStatus.graded, Verdict.passed, 5.0, 5.0
    db_session.commit()
    grades_before = client.get(f"/api/courses/{course}/grades/me").json()
    logout(client)
    login(client, instructor)
    archived = client.post(f"/api/courses/{course}/archive", json={})
    assert archived.status_code == 200 and archived.json()["archived_at"] is not None
    item_id = db_session.scalars(select(AssignmentItem.id).where(AssignmentItem.assignment_id == week["id"])).one()
    refused = {
        "enrol": client.post(f"/api/courses/{course}/members", json={"csv": "email\nnew@example.com\n"}),
        "invite": client.post(f"/api/courses/{course}/invite", json={"rotate": True}),
        "assignment": client.post(
            f"/api/courses/{course}/assignments", json={"title": "W2", "items": [{"exercise": tiny_exercise.slug}]}
        ),
        "extension": client.post(
            f"/api/assignments/{week['id']}/extensions",
            json={"email": learner.email, "extra_attempts": 1, "reason": "x"},
        ),
        "override": client.post(
            f"/api/courses/{course}/overrides",
            json={"item_id": item_id, "email": learner.email, "score_pct": 10, "comment": "x"},
        ),
    }
    for what, answer in refused.items():
        assert answer.status_code == 409, (what, answer.text)
        assert "archived" in answer.json()["detail"], what
    assert client.get(f"/api/courses/{course}/gradebook.csv").status_code == 200  # staff still export
    assert [c["slug"] for c in client.get("/api/courses").json()].count(course) == 0
    assert [c["slug"] for c in client.get("/api/courses?archived=true").json()] == [course]
    kept = client.request("DELETE", f"/api/courses/{course}/archive", json={})
    assert kept.status_code == 403 and "only an admin" in kept.json()["detail"]
    logout(client)
    login(client, learner)
    again = client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE, "assignment_id": week["id"]}
    )
    assert again.status_code == 403 and "archived" in again.json()["detail"]
    assert client.get(f"/api/courses/{course}/grades/me").json() == grades_before
    page = client.get(f"/courses/{course}")
    assert page.status_code == 200 and 'id="archived-note"' in page.text
    logout(client)
    login(client, admin)
    opened = client.request("DELETE", f"/api/courses/{course}/archive", json={})
    assert opened.status_code == 200 and opened.json()["archived_at"] is None


def test_the_audit_trail_is_read_only_by_those_entitled(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    admin: User, make_user: Callable[..., User], tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    gpu = db_session.scalars(select(Course).where(Course.slug == course)).one()
    ta, stranger = make_user(Role.learner), make_user(Role.instructor)
    membership.enroll(session=db_session, course=gpu, user=ta, role=CourseRole.ta)
    membership.create_course(session=db_session, slug="elsewhere", title="Elsewhere", creator=stranger)
    db_session.commit()
    login(client, instructor)
    week = _assignment(client, course, tiny_exercise.slug)
    granted = client.post(f"/api/assignments/{week['id']}/extensions",
                          json={"email": learner.email, "extra_attempts": 1, "reason": "a family matter"})  # fmt: skip
    assert granted.status_code == 201, granted.text
    logout(client)
    login(client, learner)
    assert client.post("/api/me/tokens", json={"name": "laptop", "scopes": ["read"]}).status_code == 201
    logout(client)

    for who, status in ((instructor, 200), (ta, 200), (admin, 200), (learner, 403), (stranger, 404)):
        login(client, who)
        answer = client.get(f"/api/courses/{course}/audit")
        assert answer.status_code == status, (who.email, answer.text)
        if status == 200:
            actions = [e["action"] for e in answer.json()]
            assert "extension.grant" in actions and "member.enrol" in actions and "token.create" not in actions
            grant = next(e for e in answer.json() if e["action"] == "extension.grant")
            assert (grant["actor"], grant["subject"], grant["after"]["extra_attempts"]) == (
                instructor.email,
                learner.email,
                1,
            )
            only = client.get(f"/api/courses/{course}/audit", params={"action": "extension", "subject": learner.email})
            assert [e["action"] for e in only.json()] == ["extension.grant"]
            csv = client.get(f"/api/courses/{course}/audit.csv", params={"action": "extension"})
            assert csv.headers["content-type"].startswith("text/csv") and "extension.grant" in csv.text
            assert client.get(f"/courses/{course}/audit").status_code == 200
        else:
            assert client.get(f"/api/courses/{course}/audit.csv").status_code == status
            assert client.get(f"/courses/{course}/audit").status_code == status
        site = client.get("/api/admin/audit")
        assert site.status_code == (200 if who is admin else 403)
        if who is admin:
            assert "token.create" in [e["action"] for e in site.json()]
            assert client.get("/admin/audit").status_code == 200
            bad = client.get("/api/admin/audit", params={"since": "2026-12-01T00:00Z", "until": "2026-11-01T00:00Z"})
            assert bad.status_code == 422 and "after" in bad.json()["detail"]
        logout(client)


def test_a_learner_downloads_their_data_and_an_admin_erases_a_person(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    other_learner: User, admin: User, tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    week = _assignment(client, course, tiny_exercise.slug)
    client.post(f"/api/courses/{course}/members", json={"csv": f"email\n{other_learner.email}\n"})
    logout(client)
    login(client, learner)
    mine = "def add(a, b):\n    return a + b  # MERLIN-4402\n"
    assert client.post(f"/api/exercises/{tiny_exercise.slug}/submissions",
                       json={"code": mine, "assignment_id": week["id"]}).status_code == 202  # fmt: skip
    data = client.get("/api/me/export")
    assert data.status_code == 200 and data.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(data.content)) as z:
        assert json.loads(z.read("account.json"))["email"] == learner.email
        assert any("MERLIN-4402" in z.read(n).decode() for n in z.namelist() if n.startswith("code/"))
        assert not any(other_learner.email in z.read(n).decode() for n in z.namelist())
    assert 'id="export-link"' in client.get("/account").text
    logout(client)

    login(client, admin)
    wrong = client.post(f"/api/admin/users/{learner.id}/erase", json={"confirm_email": "someone@else.org"})
    assert wrong.status_code == 422 and "confirm" in wrong.json()["detail"]
    address = learner.email
    assert client.post(f"/api/admin/users/{learner.id}/erase", json={"confirm_email": address}).status_code == 204
    erased_address = client.get("/api/admin/users").json()
    assert address not in [u["email"] for u in erased_address]
    again = client.post(
        f"/api/admin/users/{learner.id}/erase", json={"confirm_email": f"erased-{learner.id}@erased.invalid"}
    )
    assert again.status_code == 409 and "erased already" in again.json()["detail"]
    logout(client)
    # Every page of the course still renders for its staff, the erased learner shown as such.
    login(client, instructor)
    for path in (f"/courses/{course}", f"/courses/{course}/manage", f"/courses/{course}/gradebook",
                 f"/courses/{course}/audit", f"/courses/{course}/assignments/{week['id']}",
                 f"/api/courses/{course}/gradebook", f"/api/courses/{course}/gradebook.csv",
                 f"/instructor/exercises/{tiny_exercise.slug}", f"/instructor/exercises/{tiny_exercise.slug}/insights",
                 f"/api/instructor/exercises/{tiny_exercise.slug}/insights",
                 f"/api/instructor/exercises/{tiny_exercise.slug}/submissions",
                 f"/instructor/assignments/{week['id']}/similarity"):  # fmt: skip
        page = client.get(path)
        assert page.status_code == 200, (path, page.text[:300])
        assert address not in page.text, path
    assert "erased user" in client.get(f"/courses/{course}/gradebook").text
    assert address not in client.get(f"/courses/{course}/gradebook").text
    # The erased person cannot log in any more.
    logout(client)
    refused = client.post("/api/auth/login", json={"email": address, "password": "correct horse battery staple"})
    assert refused.status_code == 401


def test_the_manage_pages_next_term_form_moves_dates_to_a_first_due_date_in_the_chosen_zone(
    client: TestClient, course: str, login: Callable[..., None], instructor: User,  # noqa: F811
    tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    due = (utcnow() + timedelta(days=10)).replace(second=0, microsecond=0)
    _assignment(client, course, tiny_exercise.slug, due_at=due.isoformat())
    page = client.get(f"/courses/{course}/manage")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token and 'id="copy-form"' in page.text
    form = {"csrf_token": token.group(1), "title": "GPU 101", "new_slug": "gpu-next", "term": "Fall 2027",
            "move": "first_due", "first_due": "2027-09-20T23:59", "tz": "Europe/Berlin"}  # fmt: skip
    made = client.post(f"/courses/{course}/copy", data=form, follow_redirects=False)
    assert made.status_code == 303 and made.headers["location"] == "/courses/gpu-next/manage#assignments"
    (copied,) = client.get("/api/courses/gpu-next").json()["assignments"]
    assert copied["due_at"] == "2027-09-20T21:59:00Z"  # 23:59 in Berlin (summer time) is 21:59 UTC
    again = client.post(f"/courses/{course}/copy", data=form | {"move": "days", "shift_days": "many"})
    assert again.status_code == 422 and "number of days" in again.text and 'value="gpu-next"' in again.text
