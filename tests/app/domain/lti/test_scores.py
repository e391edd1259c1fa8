"""AGS scores (``app.domain.lti.scores``) against the loopback platform over real HTTP.

Covers: a graded submission under a linked assignment queues the learner's counted score; delivering gets a
token with a client assertion the platform verified against gpulab's JWKS and posts the score with it (the line
item's query kept); the scores endpoint down keeps the row with attempts, error and back-off; back up, the next
delivery sends it exactly once; a newer score before delivery replaces the payload; no link, no line item or
no LTI account queues nothing; staff see the unsent rows at ``/api/admin/lti/outbox``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.lti import keys, scores
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    LtiLink,
    LtiPlatform,
    LtiScoreOutbox,
    LtiUser,
    Submission,
    SubmissionStatus,
    User,
    utcnow,
)
from tests.app.domain.lti.platform import LoopbackPlatform
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

pytestmark = pytest.mark.postgres


@dataclass
class Linked:
    assignment: Assignment
    link: LtiLink
    learner: User
    sub: str


@pytest.fixture(autouse=True)
def no_cached_tokens() -> Iterator[None]:
    scores.forget_tokens()
    yield
    scores.forget_tokens()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


@pytest.fixture
def linked(
    db_session: Session, registered: LtiPlatform, platform: LoopbackPlatform, tiny_exercise: TinyExercise,
    learner: User,
) -> Linked:  # fmt: skip
    course = Course(slug="gpu101-ags", title="GPU 101")
    db_session.add(course)
    db_session.flush()
    assignment = Assignment(course_id=course.id, title="Week 1", position=0)
    assignment.items.append(AssignmentItem(exercise=tiny_exercise.exercise, position=0, weight=1))
    db_session.add(assignment)
    db_session.flush()
    link = LtiLink(
        platform_id=registered.id, deployment_id=platform.deployment_id, resource_link_id="rl-week1",
        assignment_id=assignment.id, lineitem_url=f"{platform.issuer}/ags/lineitems/rl-week1?type_id=7",
    )  # fmt: skip
    db_session.add_all([link, LtiUser(platform_id=registered.id, sub="sub-ada", user_id=learner.id)])
    db_session.commit()
    published = keys.jwks(session=db_session, grace_s=3600)  # gpulab's current key, as /lti/jwks publishes it
    db_session.commit()
    platform.tool_jwks = lambda: published
    return Linked(assignment=assignment, link=link, learner=learner, sub="sub-ada")


def graded(
    db: Session, *, user: User, exercise: TinyExercise, assignment: Assignment | None, score: float
) -> Submission:
    version = exercise.exercise.current_version
    assert version is not None
    submission = Submission(
        user_id=user.id, exercise_version_id=version.id,
        assignment_id=assignment.id if assignment else None, code="def add(a, b):\n    return a + b\n",
        status=SubmissionStatus.graded, verdict=Verdict.passed if score >= 5 else Verdict.failed, score=score,
        max_score=5.0,
    )  # fmt: skip
    db.add(submission)
    db.flush()
    return submission


def rows(db: Session) -> list[LtiScoreOutbox]:
    return list(db.scalars(select(LtiScoreOutbox).order_by(LtiScoreOutbox.id)))


def test_graded_submission_queues_and_delivers_with_a_verified_token(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client
) -> None:
    submission = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=5)
    queued = scores.queue_score(session=db_session, submission=submission)
    db_session.commit()
    assert [row.id for row in queued] == [row.id for row in rows(db_session)]
    payload = queued[0].payload
    assert payload["scoreGiven"] == 100.0 and payload["scoreMaximum"] == 100.0
    assert payload["userId"] == "sub-ada"
    assert payload["activityProgress"] == "Completed" and payload["gradingProgress"] == "FullyGraded"
    assert payload["timestamp"].endswith("Z")

    delivery = scores.deliver_due(session=db_session, now=utcnow(), http=http)
    db_session.commit()
    assert delivery.sent == [queued[0].id] and delivery.failed == []
    assert [request["refused"] for request in platform.token_requests] == [None]
    form = platform.token_requests[0]["form"]
    assert form["scope"] == scores.SCORE_SCOPE and form["grant_type"] == "client_credentials"
    [posted] = platform.scores
    assert posted["item"] == "rl-week1" and posted["query"] == "type_id=7"
    assert posted["body"] == payload
    assert posted["authorization"].removeprefix("Bearer ") in platform.issued_tokens
    assert rows(db_session)[0].sent_at is not None
    assert scores.deliver_due(session=db_session, now=utcnow(), http=http).sent == []  # nothing twice


def test_platform_down_keeps_the_row_then_sends_it_exactly_once(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client,
    admin: User, client: TestClient, login: Callable[..., None],
) -> None:  # fmt: skip
    submission = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    scores.queue_score(session=db_session, submission=submission)
    db_session.commit()
    platform.scores_down = True
    now = utcnow()
    delivery = scores.deliver_due(session=db_session, now=now, http=http)
    db_session.commit()
    [row] = rows(db_session)
    assert delivery.failed == [row.id] and row.sent_at is None
    assert row.attempts == 1 and "503" in (row.last_error or "")
    assert row.next_attempt_at == now + timedelta(seconds=scores.BACKOFF_BASE_S)

    login(client, admin)
    listed = client.get("/api/admin/lti/outbox")
    assert listed.status_code == 200, listed.text
    [shown] = listed.json()
    assert shown["id"] == row.id and shown["attempts"] == 1 and shown["state"] == "retrying"
    assert "503" in shown["last_error"] and shown["given_up_at"] is None
    page = client.get("/admin/lti").text
    assert f'(attempt 1 failed, next at <time datetime="{row.next_attempt_at.isoformat()}" data-format="long">' in page

    assert scores.deliver_due(session=db_session, now=now + timedelta(seconds=5), http=http).failed == []  # not due
    platform.scores_down = False
    later = now + timedelta(seconds=scores.BACKOFF_BASE_S + 1)
    assert scores.deliver_due(session=db_session, now=later, http=http).sent == [row.id]
    db_session.commit()
    assert scores.deliver_due(session=db_session, now=later + timedelta(hours=2), http=http).sent == []
    assert [call["body"]["scoreGiven"] for call in platform.scores] == [40.0]
    assert client.get("/api/admin/lti/outbox").json() == []


def test_a_score_the_platform_refuses_for_good_is_given_up_until_retried(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client,
    admin: User, instructor: User, client: TestClient, login: Callable[..., None],
) -> None:  # fmt: skip
    from app.domain.courses import membership
    from app.domain.models import CourseRole

    submission = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    scores.queue_score(session=db_session, submission=submission)
    db_session.commit()
    platform.deleted_lineitems.add("rl-week1")  # the teacher deleted the gradebook column
    now = utcnow()
    delivery = scores.deliver_due(session=db_session, now=now, http=http)
    db_session.commit()
    [row] = rows(db_session)
    assert (delivery.given_up, delivery.failed, delivery.sent) == ([row.id], [], [])
    assert row.given_up_at == now and row.attempts == 1 and "404" in (row.last_error or "")
    assert scores.state_of(row) == "failed"
    calls = len(platform.score_calls)
    assert scores.deliver_due(session=db_session, now=now + timedelta(days=2), http=http) == scores.Delivery()
    assert len(platform.score_calls) == calls  # given up: not posted again, however long we wait

    login(client, admin)
    [shown] = client.get("/api/admin/lti/outbox").json()
    assert (shown["state"], shown["attempts"]) == ("failed", 1) and shown["given_up_at"] is not None
    membership.enroll(session=db_session, course=linked.assignment.course, user=instructor, role=CourseRole.instructor,
                   source="manual")  # fmt: skip
    db_session.commit()
    login(client, instructor)
    book = client.get(f"/courses/{linked.assignment.course.slug}/gradebook").text
    assert '<tr class="owed-failed">' in book and '<span class="badge check-failed">failed</span>' in book
    assert "given up <time " in book and "none: given up" in book

    # A newer score of the pair is worth one more try: the platform may take it (here it still refuses).
    better = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=4)
    [again] = scores.queue_score(session=db_session, submission=better)
    db_session.commit()
    assert again.id == row.id and again.given_up_at is None and scores.state_of(again) == "retrying"
    later = utcnow()
    assert scores.deliver_due(session=db_session, now=later, http=http).given_up == [row.id]
    db_session.commit()

    platform.deleted_lineitems.clear()  # fixed in the platform; an admin retries
    login(client, admin)
    retried = client.post(f"/api/admin/lti/outbox/{row.id}/retry", headers={"Content-Type": "application/json"})
    assert retried.status_code == 200 and retried.json()["state"] == "retrying"
    db_session.expire_all()
    assert scores.deliver_due(session=db_session, now=utcnow(), http=http).sent == [row.id]
    db_session.commit()
    assert [call["body"]["scoreGiven"] for call in platform.scores] == [80.0]
    assert client.get("/api/admin/lti/outbox").json() == []


@pytest.mark.parametrize(("status", "given_up"), [(429, False), (408, False), (400, True), (403, True)])
def test_a_4xx_gives_up_unless_it_may_pass_later(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client,
    status: int, given_up: bool,
) -> None:  # fmt: skip
    submission = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    scores.queue_score(session=db_session, submission=submission)
    db_session.commit()
    platform.scores_status = status
    delivery = scores.deliver_due(session=db_session, now=utcnow(), http=http)
    [row] = rows(db_session)
    assert (delivery.given_up, delivery.failed) == (([row.id], []) if given_up else ([], [row.id]))
    assert scores.state_of(row) == ("failed" if given_up else "retrying") and str(status) in (row.last_error or "")


def test_a_newer_score_replaces_the_unsent_payload(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client
) -> None:
    first = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    scores.queue_score(session=db_session, submission=first)
    db_session.commit()
    second = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=5)
    scores.queue_score(session=db_session, submission=second)
    db_session.commit()
    [row] = rows(db_session)
    assert row.payload["scoreGiven"] == 100.0
    scores.deliver_due(session=db_session, now=utcnow(), http=http)
    db_session.commit()
    assert [call["body"]["scoreGiven"] for call in platform.scores] == [100.0]
    # The counted score did not change (best counts): nothing new to post.
    worse = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=1)
    assert scores.queue_score(session=db_session, submission=worse) == []


def test_the_database_holds_one_unsent_row_per_link_and_learner(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise
) -> None:
    first = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    [row] = scores.queue_score(session=db_session, submission=first)
    twin = LtiScoreOutbox(
        platform_id=row.platform_id, link_id=row.link_id, user_id=row.user_id, lineitem_url=row.lineitem_url,
        payload=dict(row.payload),
    )  # fmt: skip
    with pytest.raises(IntegrityError), db_session.begin_nested():
        db_session.add(twin)
    row.sent_at = utcnow()  # once sent, the next score may queue a new row
    db_session.flush()
    with db_session.begin_nested():
        db_session.add(twin)
    assert len(rows(db_session)) == 2


def test_a_score_queued_at_the_same_time_joins_the_other_gradings_row(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    [pending] = scores.queue_score(session=db_session, submission=first)
    db_session.commit()
    second = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=5)
    real_newest = scores._newest
    reads: list[int] = []

    def raced(**kwargs: Any) -> LtiScoreOutbox | None:
        reads.append(1)  # the first read missed the other grading's row, which had not committed yet
        return None if len(reads) == 1 else real_newest(**kwargs)

    monkeypatch.setattr(scores, "_newest", raced)
    [queued] = scores.queue_score(session=db_session, submission=second)
    db_session.commit()

    assert queued.id == pending.id and len(reads) == 2  # the index refused a second row; the first one carries it
    [row] = rows(db_session)
    assert row.payload["scoreGiven"] == 100.0 and row.sent_at is None


def test_nothing_is_queued_without_a_link_or_an_lti_account(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, make_user: Callable[..., User]
) -> None:
    practice = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=None, score=5)
    assert scores.queue_score(session=db_session, submission=practice) == []
    stranger = make_user()  # no LtiUser on the link's platform
    theirs = graded(db_session, user=stranger, exercise=tiny_exercise, assignment=linked.assignment, score=5)
    assert scores.queue_score(session=db_session, submission=theirs) == []
    linked.link.lineitem_url = None  # the platform gave no gradebook column
    mine = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=5)
    assert scores.queue_score(session=db_session, submission=mine) == []
    assert rows(db_session) == []


def test_scores_url_keeps_the_query() -> None:
    assert scores.scores_url("https://lms.example/li/7?type=a&b=1") == "https://lms.example/li/7/scores?type=a&b=1"
    assert scores.scores_url("https://lms.example/li/7/") == "https://lms.example/li/7/scores"
    assert [scores.backoff_s(n) for n in (1, 2, 3, 8, 30)] == [30, 60, 120, 3600, 3600]


def test_a_quiz_attempt_under_a_linked_assignment_queues_its_score(
    db_session: Session, registered: LtiPlatform, platform: LoopbackPlatform, learner_client: TestClient,
    learner: User,
) -> None:  # fmt: skip
    from app.domain.courses import membership
    from app.domain.exercises.bank import upsert_exercise
    from app.domain.models import CourseRole
    from worker.bank.spec import ExerciseSpec

    quiz_toml = (
        '[[question]]\nid = "q1"\ntype = "single"\nprompt = "Two?"\n'
        'options = [{ id = "a", text = "2" }, { id = "b", text = "3" }]\nanswer = ["a"]\nexplanation = "2."\n'
    )
    files = {"exercise.toml": 'title = "Q"\nkind = "quiz"\ntopic = "Q"\n', "prompt.md": "Q", "quiz.toml": quiz_toml}
    exercise, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files("quiz-ags-wiring", files))
    course = Course(slug="gpu101-quiz", title="GPU 101")
    db_session.add(course)
    db_session.flush()
    membership.enroll(session=db_session, course=course, user=learner, role=CourseRole.learner, source="manual")
    assignment = Assignment(course_id=course.id, title="Quiz week", position=0)
    assignment.items.append(AssignmentItem(exercise=exercise, position=0, weight=1))
    db_session.add(assignment)
    db_session.flush()
    db_session.add_all([
        LtiLink(
            platform_id=registered.id, deployment_id=platform.deployment_id, resource_link_id="rl-quiz",
            assignment_id=assignment.id, lineitem_url=f"{platform.issuer}/ags/lineitems/rl-quiz",
        ),
        LtiUser(platform_id=registered.id, sub="sub-quiz", user_id=learner.id),
    ])  # fmt: skip
    db_session.commit()
    answered = learner_client.post(
        f"/api/exercises/{exercise.slug}/quiz", json={"answers": {"q1": ["a"]}, "assignment_id": assignment.id}
    )
    assert answered.status_code == 200, answered.text
    [row] = rows(db_session)
    assert row.user_id == learner.id and row.payload["userId"] == "sub-quiz"
    assert row.payload["scoreGiven"] == 100.0


def test_the_sweeper_delivers_and_survives_a_failure(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from contextlib import contextmanager

    from app.jobs import sweeper

    @contextmanager
    def the_test_session() -> Iterator[Session]:
        yield db_session
        db_session.commit()

    submission = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=5)
    scores.queue_score(session=db_session, submission=submission)
    db_session.commit()
    monkeypatch.setattr(sweeper, "session_scope", the_test_session)
    assert sweeper.deliver_scores() == 1
    assert [call["body"]["scoreGiven"] for call in platform.scores] == [100.0]

    def away() -> Iterator[Session]:
        raise ConnectionError("database away")

    monkeypatch.setattr(sweeper, "session_scope", contextmanager(away))
    assert sweeper.deliver_scores() == 0  # logged, never raised: the rows wait for the next sweep


def test_the_course_gradebook_shows_the_scores_its_lms_still_owes(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client,
    instructor: User, client: TestClient, login: Callable[..., None],
) -> None:  # fmt: skip
    from app.domain.courses import membership
    from app.domain.models import CourseRole

    course = linked.assignment.course
    other = Course(slug="gpu102-ags", title="GPU 102")
    db_session.add(other)
    db_session.flush()
    for each in (course, other):
        membership.enroll(session=db_session, course=each, user=instructor, role=CourseRole.instructor, source="manual")
    submission = graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=2)
    scores.queue_score(session=db_session, submission=submission)
    db_session.commit()
    platform.scores_down = True
    scores.deliver_due(session=db_session, now=utcnow(), http=http)
    db_session.commit()

    login(client, instructor)
    page = client.get(f"/courses/{course.slug}/gradebook")
    assert page.status_code == 200 and 'id="lms-owed"' in page.text
    assert 'Scores waiting for the LMS <span class="meta">(1)</span>' in page.text
    assert f'<td>{linked.learner.email}</td><td class="num">40%</td>' in page.text
    assert '<span class="badge">retrying</span>' in page.text and "(attempt 1 failed, next at <time " in page.text
    assert "503" in page.text and "check-failed" not in page.text
    assert 'id="lms-owed"' not in client.get(f"/courses/{other.slug}/gradebook").text  # not another course's

    platform.scores_down = False
    scores.deliver_due(session=db_session, now=utcnow() + timedelta(hours=2), http=http)
    db_session.commit()
    assert 'id="lms-owed"' not in client.get(f"/courses/{course.slug}/gradebook").text  # delivered: nothing owed


def test_an_override_and_its_revert_reach_the_lms(
    db_session: Session, linked: Linked, tiny_exercise: TinyExercise, platform: LoopbackPlatform, http: httpx.Client,
    client: TestClient, instructor: User, login: Callable[..., None],
) -> None:  # fmt: skip
    """Issue 22: a gradebook override (API) and its revert (page) each queue the learner's score, and it arrives."""
    import re

    from app.domain.courses import membership
    from app.domain.models import CourseRole

    course = linked.assignment.course
    membership.enroll(session=db_session, course=course, user=instructor, role=CourseRole.instructor, source="manual")
    membership.enroll(session=db_session, course=course, user=linked.learner, role=CourseRole.learner, source="manual")
    graded(db_session, user=linked.learner, exercise=tiny_exercise, assignment=linked.assignment, score=1)
    db_session.commit()
    [item] = linked.assignment.items
    login(client, instructor)

    answer = client.post(
        f"/api/courses/{course.slug}/overrides",
        json={"item_id": item.id, "email": linked.learner.email, "score_pct": 90, "comment": "re-marked by hand"},
    )
    assert answer.status_code == 201, answer.text
    override_id = answer.json()[0]["id"]
    scores.deliver_due(session=db_session, now=utcnow(), http=http)
    db_session.commit()
    assert [p["body"]["scoreGiven"] for p in platform.scores] == [90.0]  # the override is what the LMS shows

    page = client.get(f"/courses/{course.slug}/gradebook")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token, "the gradebook page has no form token"
    reverted = client.post(
        f"/courses/{course.slug}/gradebook/overrides/{override_id}/revert",
        data={"csrf_token": token.group(1)}, follow_redirects=False,
    )  # fmt: skip
    assert reverted.status_code == 303, reverted.text
    scores.deliver_due(session=db_session, now=utcnow(), http=http)
    db_session.commit()
    # Back to the submission's own 1 of 5 points: 20 %.
    assert [p["body"]["scoreGiven"] for p in platform.scores] == [90.0, 20.0]
    assert all(p["body"]["userId"] == linked.sub for p in platform.scores)
