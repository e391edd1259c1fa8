"""Regrade requests: once per item, who sees and answers what, the actions and what follows them, the pages."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import assignments, membership
from app.domain.models import (
    Assignment,
    CourseRole,
    GradeOverride,
    LtiLink,
    LtiPlatform,
    LtiScoreOutbox,
    LtiUser,
    RegradeRequestStatus,
    Role,
    Submission,
    SubmissionStatus,
    User,
)
from app.domain.review import regrade_requests as rr
from tests.app.domain.courses.test_gradebook import add_assignment, submit
from tests.app.web.test_api_instructor import token as csrf_token
from tests.conftest import RecordingDispatcher, TinyExercise
from worker.core.errors import Conflict, InvalidInput, NotFound
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
AT = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


@dataclass
class Class:
    learner: User
    other: User
    ta: User
    outsider_ta: User
    assignment: Assignment
    graded: Submission  # the learner's, under the assignment: 2/5
    practice: Submission  # the learner's, practice: 2/5
    exercise: TinyExercise


@pytest.fixture
def klass(db_session: Session, make_user: Callable[..., User], instructor: User, tiny_exercise: TinyExercise) -> Class:
    db = db_session
    course = membership.create_course(session=db, slug=f"c-{uuid.uuid4().hex[:8]}", title="GPUs", creator=instructor)
    other_course = membership.create_course(
        session=db, slug=f"o-{uuid.uuid4().hex[:8]}", title="Other", creator=instructor
    )
    learner, other, ta, outsider_ta = (make_user(Role.learner) for _ in range(4))
    membership.enroll(session=db, course=course, user=learner)
    membership.enroll(session=db, course=course, user=other)
    membership.enroll(session=db, course=course, user=ta, role=CourseRole.ta)
    membership.enroll(session=db, course=other_course, user=outsider_ta, role=CourseRole.ta)
    db.commit()
    assignment = add_assignment(db, course, "Week 1", 0, [(tiny_exercise.exercise, 1.0)])
    graded = submit(db, assignment, learner, tiny_exercise.exercise, AT, 2.0, verdict=Verdict.failed)
    practice = Submission(
        user_id=learner.id, exercise_version_id=graded.exercise_version_id, code="x", status=SubmissionStatus.graded,
        verdict=Verdict.failed, score=2.0, max_score=5.0, created_at=AT,
    )  # fmt: skip
    db.add(practice)
    db.commit()
    return Class(learner, other, ta, outsider_ta, assignment, graded, practice, tiny_exercise)


def test_a_learner_asks_once_per_item_and_replies_in_the_thread(db_session: Session, klass: Class) -> None:
    request = rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="  test 2 is right  ")
    assert (request.status, request.assignment_key, [m.body for m in request.messages]) == (
        RegradeRequestStatus.open, klass.assignment.id, ["test 2 is right"],
    )  # fmt: skip
    again = submit(db_session, klass.assignment, klass.learner, klass.exercise.exercise, AT, 1.0)
    with pytest.raises(Conflict, match="write in its thread"):
        rr.ask(session=db_session, user=klass.learner, submission=again, reason="again")
    # The practice item is another item: one request there too.
    practice = rr.ask(session=db_session, user=klass.learner, submission=klass.practice, reason="practice")
    assert practice.id != request.id and practice.assignment_key == 0
    rr.reply(session=db_session, request=request, user=klass.learner, body="see line 3")
    assert [m.action for m in request.messages] == ["ask", "reply"]


def test_bad_asks_are_refused_with_a_reason(db_session: Session, klass: Class) -> None:
    with pytest.raises(NotFound):
        rr.ask(session=db_session, user=klass.other, submission=klass.graded, reason="mine now")
    with pytest.raises(InvalidInput, match="may not be empty"):
        rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="   ")
    with pytest.raises(InvalidInput, match="longer than"):
        rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="x" * (rr.MAX_BODY_CHARS + 1))
    with pytest.raises(InvalidInput, match="NUL"):
        rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="a\x00b")
    klass.graded.status = SubmissionStatus.queued
    with pytest.raises(InvalidInput, match="only a graded submission"):
        rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="please")


def test_only_the_learner_and_the_staff_who_may_answer_see_a_request(
    db_session: Session, klass: Class, instructor: User, admin: User
) -> None:
    course_req = rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="why")
    practice_req = rr.ask(session=db_session, user=klass.learner, submission=klass.practice, reason="why")
    db_session.commit()
    for viewer in (klass.learner, klass.ta, instructor, admin):
        assert rr.get_request(session=db_session, request_id=course_req.id, user=viewer) is course_req
    for stranger in (klass.other, klass.outsider_ta):
        with pytest.raises(NotFound):
            rr.get_request(session=db_session, request_id=course_req.id, user=stranger)
    # A practice submission belongs to no course: instructors and admins answer it, a course's TA does not.
    assert rr.can_answer(session=db_session, request=practice_req, user=instructor)
    assert not rr.can_answer(session=db_session, request=practice_req, user=klass.ta)
    assert {r.id for r in rr.visible_to(session=db_session, user=klass.ta)} == {course_req.id}
    assert {r.id for r in rr.visible_to(session=db_session, user=klass.learner)} == {course_req.id, practice_req.id}
    assert rr.visible_to(session=db_session, user=klass.outsider_ta) == []
    with pytest.raises(NotFound):
        rr.respond(session=db_session, request=course_req, user=klass.other, action=rr.StaffAction.comment, body="x")


def _linked(db: Session, klass: Class) -> LtiLink:
    platform = LtiPlatform(issuer="https://lms.example.edu", client_id="c1", name="LMS", deployment_ids=["1"],
                           auth_login_url="https://lms.example.edu/auth", auth_token_url="https://lms.example.edu/token",
                           jwks_url="https://lms.example.edu/jwks")  # fmt: skip
    db.add(platform)
    db.flush()
    link = LtiLink(platform_id=platform.id, deployment_id="1", resource_link_id="rl-1", title="Week 1",
                   lineitem_url="https://lms.example.edu/lineitems/1", assignment_id=klass.assignment.id)  # fmt: skip
    db.add_all([link, LtiUser(platform_id=platform.id, sub="sub-learner", user_id=klass.learner.id)])
    db.commit()
    return link


def test_adjust_overrides_the_gradebook_cell_and_queues_the_lms_score(db_session: Session, klass: Class) -> None:
    link = _linked(db_session, klass)
    request = rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="test 2 is right")
    assert assignments.assignment_pct(session=db_session, assignment=klass.assignment, user=klass.learner) == 40.0
    jobs = rr.respond(session=db_session, request=request, user=klass.ta, action=rr.StaffAction.adjust,
                      body="You are right about test 2.", score_pct=90)  # fmt: skip
    db_session.commit()
    assert jobs == [] and request.status is RegradeRequestStatus.answered
    assert assignments.assignment_pct(session=db_session, assignment=klass.assignment, user=klass.learner) == 90.0
    override = db_session.scalar(select(GradeOverride).where(GradeOverride.user_id == klass.learner.id))
    assert override is not None and override.created_by_id == klass.ta.id and "test 2" in override.comment
    outbox = db_session.scalar(select(LtiScoreOutbox).where(LtiScoreOutbox.link_id == link.id))
    assert outbox is not None and outbox.payload["scoreGiven"] == 90.0 and outbox.sent_at is None
    assert (request.messages[-1].action, request.messages[-1].score_pct) == ("adjust", 90.0)


def test_adjust_needs_a_score_in_range_and_an_assignment(db_session: Session, klass: Class, instructor: User) -> None:
    request = rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="why")
    for bad in (None, -1.0, 100.5, float("nan")):
        with pytest.raises(InvalidInput, match="percentage"):
            rr.respond(session=db_session, request=request, user=instructor, action=rr.StaffAction.adjust,
                       body="x", score_pct=bad)  # fmt: skip
    practice = rr.ask(session=db_session, user=klass.learner, submission=klass.practice, reason="why")
    with pytest.raises(InvalidInput, match="no grade book"):
        rr.respond(session=db_session, request=practice, user=instructor, action=rr.StaffAction.adjust, body="x",
                   score_pct=50)  # fmt: skip
    assert db_session.scalar(select(GradeOverride).where(GradeOverride.user_id == klass.learner.id)) is None


def test_rerun_requeues_the_submission_and_close_then_reopen_gate_the_learner(
    db_session: Session, klass: Class, instructor: User
) -> None:
    request = rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="flaky?")
    jobs = rr.respond(session=db_session, request=request, user=instructor, action=rr.StaffAction.rerun,
                      body="Grading it again.")  # fmt: skip
    assert jobs == [klass.graded] and klass.graded.status is SubmissionStatus.queued
    rr.respond(session=db_session, request=request, user=instructor, action=rr.StaffAction.close, body="Done.")
    assert request.status is RegradeRequestStatus.closed
    with pytest.raises(Conflict, match="closed"):
        rr.reply(session=db_session, request=request, user=klass.learner, body="but")
    with pytest.raises(Conflict, match="reopen it first"):
        rr.respond(session=db_session, request=request, user=instructor, action=rr.StaffAction.comment, body="x")
    rr.respond(session=db_session, request=request, user=instructor, action=rr.StaffAction.reopen, body="Go on.")
    rr.reply(session=db_session, request=request, user=klass.learner, body="thanks, one more thing")
    assert request.status is RegradeRequestStatus.open
    assert [m.action for m in request.messages] == ["ask", "rerun", "close", "reopen", "reply"]
    with pytest.raises(Conflict, match="nothing to reopen"):
        rr.respond(session=db_session, request=request, user=instructor, action=rr.StaffAction.reopen, body="x")


def test_the_api_round_trip_and_its_errors(
    client: TestClient, login: Callable[..., None], klass: Class, dispatcher: RecordingDispatcher,
) -> None:  # fmt: skip
    login(client, klass.learner)
    asked = client.post(f"/api/submissions/{klass.graded.id}/regrade-request", json={"reason": "test 2 is right"})
    assert asked.status_code == 201, asked.text
    rid = asked.json()["id"]
    assert asked.json()["status"] == "open" and asked.json()["can_answer"] is False
    twice = client.post(f"/api/submissions/{klass.graded.id}/regrade-request", json={"reason": "again"})
    assert twice.status_code == 409 and twice.headers["content-type"].startswith("application/problem+json")
    assert client.post(f"/api/submissions/{klass.graded.id}/regrade-request", json={"reason": ""}).status_code == 422
    act = client.post(f"/api/regrade-requests/{rid}/messages", json={"body": "x", "action": "adjust"})
    assert act.status_code == 422 and "only staff" in act.json()["detail"]
    login(client, klass.other)
    assert client.get(f"/api/regrade-requests/{rid}").status_code == 404
    assert client.post(f"/api/submissions/{klass.graded.id}/regrade-request", json={"reason": "x"}).status_code == 404
    login(client, klass.ta)
    listed = client.get("/api/regrade-requests").json()
    assert [r["id"] for r in listed] == [rid] and listed[0]["can_answer"] is True
    answered = client.post(f"/api/regrade-requests/{rid}/messages",
                           json={"body": "Grading it again.", "action": "rerun"})  # fmt: skip
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "answered" and dispatcher.calls == [(klass.graded.id, "cpu")]
    assert client.post(f"/api/regrade-requests/{rid}/messages",
                       json={"body": "x", "action": "adjust", "score_pct": 101}).status_code == 422  # fmt: skip
    login(client, klass.learner)
    thread = client.get(f"/api/regrade-requests/{rid}").json()
    assert [(m["action"], m["author"]) for m in thread["messages"]] == [
        ("ask", klass.learner.email), ("rerun", klass.ta.email),
    ]  # fmt: skip


def test_the_pages_ask_answer_and_show_the_thread(
    client: TestClient, login: Callable[..., None], klass: Class, db_session: Session
) -> None:
    slug = klass.exercise.slug
    login(client, klass.learner)
    history = client.get(f"/exercises/{slug}/history?attempt={klass.graded.id}")
    assert history.status_code == 200 and 'id="regrade-form"' in history.text
    token = csrf_token(client, f"/exercises/{slug}/history?attempt={klass.graded.id}")
    form = {"csrf_token": token, "reason": "<b>test 2</b> is right"}
    sent = client.post(f"/submissions/{klass.graded.id}/regrade-request", data=form, follow_redirects=False)
    assert sent.status_code == 303
    thread_url = sent.headers["location"]
    page = client.get(thread_url)
    assert "&lt;b&gt;test 2&lt;/b&gt; is right" in page.text and 'id="reply-form"' in page.text
    assert "answer-form" not in page.text
    assert "regrade-form" not in client.get(f"/exercises/{slug}/history?attempt={klass.graded.id}").text
    login(client, klass.ta)
    token = csrf_token(client, thread_url)
    refused = client.post(thread_url, data={"csrf_token": token, "body": "x", "action": "adjust", "score_pct": "abc"})
    assert refused.status_code == 422 and "0 to 100" in refused.text
    done = client.post(thread_url, data={"csrf_token": token, "body": "Fair point.", "action": "adjust",
                                         "score_pct": "80"}, follow_redirects=False)  # fmt: skip
    assert done.status_code == 303
    assert assignments.assignment_pct(session=db_session, assignment=klass.assignment, user=klass.learner) == 80.0
    login(client, klass.learner)
    page = client.get(thread_url)
    assert "Fair point." in page.text and "80 %" in page.text and "answered" in page.text
    assert client.get("/regrade-requests").status_code == 200
    login(client, klass.other)
    assert client.get(thread_url).status_code == 404


def test_waiting_requests_come_first_even_when_a_closed_one_is_newer(
    db_session: Session, klass: Class, instructor: User
) -> None:
    older = rr.ask(session=db_session, user=klass.learner, submission=klass.graded, reason="first")
    newer = rr.ask(session=db_session, user=klass.learner, submission=klass.practice, reason="second")
    rr.respond(session=db_session, request=newer, user=instructor, action=rr.StaffAction.close, body="No.")
    db_session.commit()
    assert [r.id for r in rr.visible_to(session=db_session, user=klass.learner, limit=1)] == [older.id]
