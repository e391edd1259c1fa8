"""The course pages: my courses, a course's assignments with their dates and gates, joining, an exercise under an
assignment, and the staff pages (members, CSV enrollment, invite link, assignment form, extensions)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Assignment, Course, CourseMember, Extension, Submission, User, utcnow
from tests.conftest import RecordingDispatcher, TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

CODE = "def add(a, b):\n    return a + b\n"


def logout(client: TestClient) -> None:
    assert client.post("/api/auth/logout", json={}).status_code == 204


def form_token(client: TestClient, path: str = "/courses") -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).text)
    assert match, f"{path} has no form token"
    return match.group(1)


def _iso(delta: timedelta) -> str:
    return (utcnow() + delta).isoformat()


@pytest.fixture
def course(client: TestClient, instructor: User, login: Callable[..., None], learner: User) -> str:
    """Course ``gpu-101`` made by ``instructor`` with ``learner`` enrolled; the client is left logged out."""
    login(client, instructor)
    assert client.post("/api/courses", json={"slug": "gpu-101", "title": "GPU 101"}).status_code == 201
    assert client.post("/api/courses/gpu-101/members", json={"csv": f"{learner.email}\n"}).status_code == 200
    logout(client)
    return "gpu-101"


def _assignment(client: TestClient, exercise: str, **fields: Any) -> dict[str, Any]:
    body = {"title": "Week 1", "items": [{"exercise": exercise, "weight": 1}], **fields}
    made = client.post("/api/courses/gpu-101/assignments", json=body)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _is_html_page(response: Any, status: int) -> bool:
    return response.status_code == status and response.headers["content-type"].startswith("text/html")


def test_learners_see_only_their_courses_practice_first(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    other_learner: User,
) -> None:  # fmt: skip
    login(client, instructor)
    assert client.post("/api/courses", json={"slug": "other-course", "title": "Other course"}).status_code == 201
    logout(client)
    login(client, learner)
    page = client.get("/courses")
    assert page.status_code == 200
    listed = re.findall(r'class="course-link" href="/courses/([^"]+)"', page.text)
    assert listed == ["practice", "gpu-101"]  # not the other course, and practice first
    assert '<a href="/courses" aria-current="page">Courses</a>' in page.text  # the nav link
    assert "New course" not in page.text  # learners create no courses
    logout(client)
    login(client, other_learner)
    assert re.findall(r'class="course-link" href="/courses/([^"]+)"', client.get("/courses").text) == ["practice"]
    assert _is_html_page(client.get("/courses/gpu-101"), 404)


def test_the_course_page_shows_dates_as_time_elements_the_window_and_the_gate(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    due = (utcnow() + timedelta(days=7)).replace(microsecond=0)
    made = _assignment(
        client, tiny_exercise.slug, due_at=due.isoformat(), late_until=(due + timedelta(days=1)).isoformat(),
        max_attempts=2, late_credit_pct=40,
    )  # fmt: skip
    _assignment(client, tiny_exercise.slug, title="Hidden draft", is_published=False)
    staff_view = client.get("/courses/gpu-101").text
    assert "Hidden draft" in staff_view and "Manage the course" in staff_view
    logout(client)

    login(client, learner)
    html = client.get("/courses/gpu-101").text
    assert "Hidden draft" not in html  # learners see published assignments only
    stamp = due.astimezone(UTC).isoformat()
    assert f'<time datetime="{stamp}" data-format="long">{due:%Y-%m-%d %H:%M} UTC</time>' in html
    assert 'class="window window-open">Open' in html and "40% credit" in html
    assert "Your dates" in html and "(extended)" not in html
    assert "due on" in html and "2 attempts left" in html  # the gate's sentence, before any submission
    link = f"/courses/gpu-101/assignments/{made['id']}/exercises/{tiny_exercise.slug}"
    assert f'href="{link}"' in html

    page = client.get(link).text
    assert f'data-assignment="{made["id"]}"' in page
    assert page.index('id="gate-text"') < page.index('id="submit-button"')  # the sentence sits above Submit
    assert "2 attempts left" in page and f'action="/courses/gpu-101/assignments/{made["id"]}/exercises/' in page


def test_an_exercise_page_under_another_course_or_outside_the_assignment_is_404(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    make_exercise: Callable[..., TinyExercise],
) -> None:  # fmt: skip
    inside, outside = make_exercise(), make_exercise()
    login(client, instructor)
    made = _assignment(client, inside.slug)
    assert client.post("/api/courses", json={"slug": "elsewhere", "title": "Elsewhere"}).status_code == 201
    logout(client)
    login(client, learner)
    base = f"/assignments/{made['id']}/exercises"
    assert client.get(f"/courses/gpu-101{base}/{inside.slug}").status_code == 200
    assert _is_html_page(client.get(f"/courses/gpu-101{base}/{outside.slug}"), 404)
    assert _is_html_page(client.get(f"/courses/elsewhere{base}/{inside.slug}"), 404)


def test_staff_pages_are_forbidden_to_learners_and_not_found_to_outsiders(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    other_learner: User, tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, tiny_exercise.slug)
    logout(client)
    staff_pages = [
        "/courses/gpu-101/manage", "/courses/gpu-101/assignments/new",
        f"/courses/gpu-101/assignments/{made['id']}/edit", f"/courses/gpu-101/assignments/{made['id']}/extensions",
    ]  # fmt: skip
    login(client, learner)
    for path in staff_pages:
        refused = client.get(path)
        assert _is_html_page(refused, 403), path
        assert "Not allowed" in refused.text
    logout(client)
    login(client, other_learner)
    for path in staff_pages:
        assert _is_html_page(client.get(path), 404), path
    logout(client)
    assert client.get("/courses/gpu-101/manage", follow_redirects=False).headers["location"] == (
        "/login?next=/courses/gpu-101/manage"
    )


def test_forms_without_the_csrf_token_are_refused(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, db_session: Session
) -> None:
    login(client, instructor)
    assert client.post("/courses/gpu-101/members", data={"csv": "new-one@example.com\n"}).status_code == 403
    assert client.post("/courses", data={"slug": "sneaky", "title": "Sneaky"}).status_code == 403
    assert client.post("/courses/gpu-101/invite", data={"csrf_token": "forged"}).status_code == 403
    assert db_session.scalar(select(User).where(User.email == "new-one@example.com")) is None
    assert db_session.scalar(select(Course).where(Course.slug == "sneaky")) is None


def test_creating_a_course_and_an_assignment_through_the_forms_reads_dates_in_the_chosen_zone(
    client: TestClient, login: Callable[..., None], instructor: User, tiny_exercise: TinyExercise,
    db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    token = form_token(client)
    made = client.post("/courses", data={"csrf_token": token, "slug": "gpu-201", "title": "GPU 201"},
                       follow_redirects=False)  # fmt: skip
    assert made.status_code == 303 and made.headers["location"] == "/courses/gpu-201/manage"
    assert "GPU 201" in client.get("/courses/gpu-201/manage").text

    new_form = client.get("/courses/gpu-201/assignments/new").text
    assert 'type="datetime-local"' in new_form and "<option selected>UTC</option>" in new_form
    assert 'data-zone-auto="1"' in new_form and "America/New_York" in new_form
    fields = {
        "csrf_token": token, "title": "Week <1>", "tz": "America/New_York", "opens_at": "2026-12-01T09:00",
        "due_at": "2026-12-08T12:00", "late_until": "", "late_credit_pct": "50", "counts": "last",
        "max_attempts": "3", "rate_burst": "", "rate_refill_s": "", "is_published": "1",
        "items": f"{tiny_exercise.slug} 2\n",
    }  # fmt: skip
    saved = client.post("/courses/gpu-201/assignments", data=fields, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    assignment = db_session.scalars(select(Assignment).where(Assignment.title == "Week <1>")).one()
    assert assignment.due_at is not None and assignment.opens_at is not None
    assert assignment.due_at.astimezone(UTC) == datetime(2026, 12, 8, 17, 0, tzinfo=UTC)  # 12:00 EST is 17:00 UTC
    assert assignment.opens_at.astimezone(UTC) == datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    assert (assignment.counts, assignment.max_attempts, [i.weight for i in assignment.items]) == ("last", 3, [2.0])
    assert "Assignment &#39;Week &lt;1&gt;&#39; created." in client.get("/courses/gpu-201/manage").text

    # The edit form starts in UTC (courses.js moves it to the browser's zone); a refusal keeps what was typed.
    edit = client.get(f"/courses/gpu-201/assignments/{assignment.id}/edit").text
    assert 'value="2026-12-08T17:00" data-utc="2026-12-08T17:00"' in edit
    summer = {**fields, "title": "Kept <title>", "tz": "Europe/Paris", "due_at": "2026-11-30T10:00"}
    refused = client.post(f"/courses/gpu-201/assignments/{assignment.id}/edit", data=summer)
    assert refused.status_code == 422 and "the due date must be after the opening date" in refused.text
    assert 'value="Kept &lt;title&gt;"' in refused.text and 'value="2026-11-30T10:00"' in refused.text
    assert "<option selected>Europe/Paris</option>" in refused.text and "data-zone-auto" not in refused.text
    bad_zone = client.post(f"/courses/gpu-201/assignments/{assignment.id}/edit", data={**fields, "tz": "Mars/Base"})
    assert bad_zone.status_code == 422 and "unknown time zone" in bad_zone.text
    db_session.refresh(assignment)
    assert assignment.title == "Week <1>"  # nothing written


def test_a_ta_manages_members_but_not_assignments(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, make_user: Callable[..., User],
) -> None:  # fmt: skip
    ta = make_user()
    login(client, instructor)
    assert client.post("/api/courses/gpu-101/members", json={"csv": f"{ta.email},,ta\n"}).status_code == 200
    logout(client)
    login(client, ta)
    manage = client.get("/courses/gpu-101/manage")
    assert manage.status_code == 200 and "New assignment" not in manage.text and "Rotate" not in manage.text
    assert _is_html_page(client.get("/courses/gpu-101/assignments/new"), 403)


def test_the_csv_enrollment_form_reports_every_row(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    other_learner: User, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    token = form_token(client, "/courses/gpu-101/manage")
    rows = [f"{other_learner.email},Other", "fresh-person@example.com,Fresh", "not-an-email,Bad", f"{learner.email},"]
    text = "email,name\n" + "\n".join(rows) + "\n"
    answer = client.post("/courses/gpu-101/members", data={"csrf_token": token, "csv": text})
    assert answer.status_code == 200
    found = re.findall(r'<tr class="outcome-(\w+)"><td class="num">(\d+)</td><td>([^<]*)</td>', answer.text)
    assert [(outcome, line) for outcome, line, _ in found] == [
        ("added", "2"), ("created", "3"), ("refused", "4"), ("already", "5")
    ]  # fmt: skip
    assert "One-time passwords are shown only now" in answer.text
    assert re.search(r"<code>[A-Za-z0-9][^<]{7,}</code>", answer.text)  # the new account's one-time password
    made = db_session.scalar(select(User).where(User.email == "fresh-person@example.com"))
    assert made is not None
    assert db_session.scalar(select(CourseMember).where(CourseMember.user_id == made.id)) is not None
    assert "fresh-person@example.com" in client.get("/courses/gpu-101/manage").text  # in the members list now

    upload = client.post(
        "/courses/gpu-101/members", data={"csrf_token": token},
        files={"file": ("people.csv", b"\xff\xfe not utf-8", "text/csv")},
    )  # fmt: skip
    assert upload.status_code == 422 and 'id="csv-error"' in upload.text
    empty = client.post("/courses/gpu-101/members", data={"csrf_token": token, "csv": "  "})
    assert empty.status_code == 422 and "paste the CSV or choose a file" in empty.text


def test_invite_links_rotate_and_the_join_page_enrolls(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, other_learner: User,
    db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    token = form_token(client, "/courses/gpu-101/manage")
    assert "Make an invite link" in client.get("/courses/gpu-101/manage").text
    client.post("/courses/gpu-101/invite", data={"csrf_token": token})
    first = re.search(r'value="http://testserver/join/([^"]+)"', client.get("/courses/gpu-101/manage").text)
    assert first
    client.post("/courses/gpu-101/invite", data={"csrf_token": token, "rotate": "1"})
    second = re.search(r'value="http://testserver/join/([^"]+)"', client.get("/courses/gpu-101/manage").text)
    assert second and second.group(1) != first.group(1)
    logout(client)

    login(client, other_learner)
    assert _is_html_page(client.get(f"/join/{first.group(1)}"), 404)  # the old link ended
    page = client.get(f"/join/{second.group(1)}")
    assert page.status_code == 200 and "Join GPU 101" in page.text
    joined = client.post(f"/join/{second.group(1)}", data={"csrf_token": form_token(client)}, follow_redirects=False)
    assert joined.status_code == 303 and joined.headers["location"] == "/courses/gpu-101"
    assert "Welcome to GPU 101." in client.get("/courses/gpu-101").text
    assert "already in this course" in client.get(f"/join/{second.group(1)}").text


def test_extensions_are_granted_and_revoked_through_the_forms(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, tiny_exercise.slug, opens_at=_iso(timedelta(days=-3)), due_at=_iso(timedelta(days=-1)),
                       max_attempts=1)  # fmt: skip
    url = f"/courses/gpu-101/assignments/{made['id']}/extensions"
    page = client.get(url).text
    assert f'<option value="{learner.email}">' in page and "No extensions yet." in page
    token = form_token(client, url)
    fields = {"csrf_token": token, "email": learner.email, "tz": "Asia/Tokyo", "due_at": "2030-01-10T09:00",
              "late_until": "", "extra_attempts": "2", "reason": ""}  # fmt: skip
    missing = client.post(url, data=fields)
    assert missing.status_code == 422 and "the reason" in missing.text and 'value="2030-01-10T09:00"' in missing.text
    granted = client.post(url, data={**fields, "reason": "ill <a week>"}, follow_redirects=False)
    assert granted.status_code == 303 and granted.headers["location"] == url
    extension = db_session.scalars(select(Extension).where(Extension.assignment_id == made["id"])).one()
    assert extension.due_at.astimezone(UTC) == datetime(2030, 1, 10, 0, 0, tzinfo=UTC)  # 09:00 in Tokyo
    audit = client.get(url).text
    assert "ill &lt;a week&gt;" in audit and f"by {instructor.email}" in audit and "Revoke" in audit
    logout(client)

    login(client, learner)
    html = client.get("/courses/gpu-101").text
    assert "Your dates (extended)" in html and "3 attempts left" in html
    assert '3 per exercise <span class="meta">(1, +2 for you)</span>' in html
    assert '<time datetime="2030-01-10T00:00:00+00:00" data-format="long">' in html
    logout(client)

    login(client, instructor)
    revoke = f"{url}/{extension.id}/revoke"
    assert client.post(revoke, data={"csrf_token": token}).status_code == 403  # the last session's token
    done = client.post(revoke, data={"csrf_token": form_token(client, url)}, follow_redirects=False)
    assert done.status_code == 303
    audit = client.get(url).text
    assert "revoked" in audit and audit.count(f"by {instructor.email}") == 2 and "Revoke<" not in audit
    db_session.refresh(extension)
    assert extension.revoked_at is not None
    logout(client)
    login(client, learner)
    assert "(extended)" not in client.get("/courses/gpu-101").text


def test_an_extension_that_moves_only_the_due_date_keeps_a_late_period_as_long_as_the_assignments(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, tiny_exercise.slug, due_at="2030-01-01T12:00:00+00:00",
                       late_until="2030-01-03T12:00:00+00:00")  # fmt: skip
    url = f"/courses/gpu-101/assignments/{made['id']}/extensions"
    page = client.get(url).text
    assert 'name="late_until" type="datetime-local" value=""' in page
    assert "a late period as long as the assignment&#39;s, 48 h" in page
    fields = {"csrf_token": form_token(client, url), "email": learner.email, "tz": "UTC", "due_at": "2030-01-05T12:00",
              "late_until": "", "extra_attempts": "0", "reason": "moved"}  # fmt: skip
    assert client.post(url, data=fields, follow_redirects=False).status_code == 303
    none = client.post(url, data={**fields, "no_late": "1", "reason": "no late"}, follow_redirects=False)
    assert none.status_code == 303
    kept, dropped = db_session.scalars(
        select(Extension).where(Extension.assignment_id == made["id"]).order_by(Extension.id)
    ).all()
    assert kept.late_until is not None and kept.late_until.astimezone(UTC) == datetime(2030, 1, 7, 12, tzinfo=UTC)
    assert dropped.late_until is None


def test_submitting_without_javascript_passes_the_gate(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, tiny_exercise.slug, max_attempts=1)
    staff_page = client.get(f"/courses/gpu-101/assignments/{made['id']}/exercises/{tiny_exercise.slug}").text
    assert 'data-assignment=""' in staff_page and "what you submit here is practice" in staff_page
    logout(client)
    login(client, learner)
    page = f"/courses/gpu-101/assignments/{made['id']}/exercises/{tiny_exercise.slug}"
    token = form_token(client, page)
    sent = client.post(f"{page}/submissions", data={"csrf_token": token, "code": CODE}, follow_redirects=False)
    assert sent.status_code == 303 and sent.headers["location"].startswith(f"/exercises/{tiny_exercise.slug}/history")
    stored = db_session.scalars(select(Submission).where(Submission.user_id == learner.id)).one()
    assert stored.assignment_id == made["id"] and dispatcher.calls[-1][0] == stored.id
    assert "no attempts left (1 used)" in client.get(page).text
    refused = client.post(f"{page}/submissions", data={"csrf_token": token, "code": CODE})
    assert _is_html_page(refused, 403) and "no attempts left" in refused.text


def test_an_assignment_has_a_page_of_its_own_that_learners_of_the_course_may_open(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    other_learner: User, tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, tiny_exercise.slug, title="Week 3", max_attempts=1)
    draft = _assignment(client, tiny_exercise.slug, title="Draft week", is_published=False)
    assert f'href="/courses/gpu-101/assignments/{made["id"]}">Week 3</a>' in client.get("/courses/gpu-101").text
    assert _is_html_page(client.get(f"/courses/gpu-101/assignments/{draft['id']}"), 200)  # staff see drafts
    logout(client)

    login(client, learner)
    page = client.get(f"/courses/gpu-101/assignments/{made['id']}")
    assert _is_html_page(page, 200)
    assert '<span aria-current="page">Week 3</span>' in page.text and "1 attempt left" in page.text
    assert "Draft week" not in page.text
    assert _is_html_page(client.get(f"/courses/gpu-101/assignments/{draft['id']}"), 404)  # a draft is not there
    logout(client)
    login(client, other_learner)
    assert _is_html_page(client.get(f"/courses/gpu-101/assignments/{made['id']}"), 404)  # not their course


def test_a_quiz_under_an_assignment_has_its_page_with_the_gate(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    db_session: Session,
) -> None:  # fmt: skip
    from app.domain.exercises.bank import upsert_exercise
    from tests.app.web.test_api_quiz import QUIZ
    from worker.bank.spec import ExerciseSpec

    files = {"exercise.toml": 'title = "Week quiz"\nkind = "quiz"\ntopic = "Quizzes"\n', "prompt.md": "Go.",
             "quiz.toml": QUIZ}  # fmt: skip
    quiz, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files("week-quiz", files))
    db_session.commit()
    login(client, instructor)
    closes = (utcnow() + timedelta(days=2)).replace(microsecond=0)
    made = _assignment(client, quiz.slug, title="Quiz week", max_attempts=1, due_at=closes.isoformat())
    logout(client)

    login(client, learner)
    link = f"/courses/gpu-101/assignments/{made['id']}/exercises/week-quiz"
    assert f'href="{link}">Week quiz</a> <span class="meta">(quiz)</span>' in client.get("/courses/gpu-101").text
    page = client.get(link).text
    assert f'data-assignment="{made["id"]}"' in page and 'id="quiz-form"' in page
    assert page.index('id="gate-text"') < page.index('id="quiz-form"')
    stamp = f'<time datetime="{closes:%Y-%m-%dT%H:%M}:00Z" data-format="long">{closes:%Y-%m-%d %H:%M} UTC</time>'
    assert f"due on {stamp}; 1 attempt left" in page  # the gate's date is a time element, shown in the viewer's zone
    assert "Your best attempt counts for Quiz week" in page

    partial = client.post("/api/exercises/week-quiz/quiz", json={"answers": {"q1": ["b"]}, "assignment_id": made["id"]})
    assert partial.status_code == 422 and "2 of 3 questions are unanswered" in partial.json()["detail"]
    assert "1 attempt left" in client.get(link).text  # the refusal cost nothing
    whole = {"q1": ["b"], "q2": ["a"], "q3": "one two three four five six"}
    answered = client.post("/api/exercises/week-quiz/quiz", json={"answers": whole, "assignment_id": made["id"]})
    assert answered.status_code == 200, answered.text
    assert "no attempts left (1 used)" in client.get(link).text
    again = client.post("/api/exercises/week-quiz/quiz", json={"answers": whole, "assignment_id": made["id"]})
    assert again.status_code == 403 and "no attempts left" in again.json()["detail"]
