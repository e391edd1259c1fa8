"""NRPS roster sync (``app.domain.lti.roster``, ``POST /api/courses/{slug}/roster/sync`` and the manage page's
button) over real HTTP.

Covers: a launch stores the context's memberships URL; staff sync reads both pages of the loopback platform's
roster with a verified client-credentials token for the NRPS scope, adds a new learner and a TA, updates a role,
keeps the unchanged one and reports an inactive member still enrolled; a second sync changes nothing; a learner
cannot sync (403, the platform never asked); a platform failing on the second page answers 422 and writes
nothing, and the next sync works.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.lti import keys, roster, tokens
from app.domain.models import CourseMember, CourseRole, LtiContext, LtiPlatform, LtiUser, User
from tests.app.domain.lti.conftest import Flow
from tests.app.domain.lti.platform import (
    INSTRUCTOR,
    LEARNER,
    NRPS_MEDIA_TYPE,
    TEACHING_ASSISTANT,
    LaunchSpec,
    LoopbackPlatform,
)
from tests.app.web.test_api_instructor import token as form_token

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

JSON = {"Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def no_cached_tokens() -> Iterator[None]:
    tokens.forget_tokens()
    yield
    tokens.forget_tokens()


@dataclass
class Course:
    context_id: str
    slug: str


def _launch(flow: Flow, platform: LoopbackPlatform, *, context_id: str, sub: str, roles: list[str]) -> None:
    spec = LaunchSpec(
        sub=sub, name=sub.title(), roles=roles, claims=platform.nrps_claim(context_id),
        context={"id": context_id, "title": "GPU Programming 101", "label": "GPU101"},
    )  # fmt: skip
    response = flow.launch(spec)
    assert response.status_code == 303, response.text


def _member(raw_sub: str, roles: list[str], **more: Any) -> dict[str, Any]:
    return {"user_id": raw_sub, "roles": roles, "status": "Active", **more}


def _user(db: Session, platform: LtiPlatform, sub: str) -> User | None:
    row = db.scalar(select(LtiUser).where(LtiUser.platform_id == platform.id, LtiUser.sub == sub))
    return row.user if row is not None else None


def _role(db: Session, platform: LtiPlatform, sub: str) -> CourseRole | None:
    user = _user(db, platform, sub)
    if user is None:
        return None
    return db.scalar(select(CourseMember.role).where(CourseMember.user_id == user.id))


@pytest.fixture
def course(flow: Flow, platform: LoopbackPlatform, registered: LtiPlatform, db_session: Session) -> Course:
    """A course made by launches: bob and carol learners, then prof (instructor; the client is signed in as prof)."""
    context_id = "ctx-nrps-101"
    for sub in ("bob", "carol"):
        _launch(flow, platform, context_id=context_id, sub=sub, roles=[LEARNER])
    _launch(flow, platform, context_id=context_id, sub="prof", roles=[INSTRUCTOR])
    platform.roster_pages = [
        [
            _member("prof", ["http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"], name="Prof"),
            _member("dan", ["Learner"], given_name="Dan", family_name="Brown", email="dan@example.com"),
        ],
        [
            _member("bob", [INSTRUCTOR, TEACHING_ASSISTANT], name="Bob"),
            _member("eve", [TEACHING_ASSISTANT], name="Eve"),
            {**_member("carol", [LEARNER], name="Carol"), "status": "Inactive"},
        ],
    ]
    db_session.expire_all()
    context = db_session.scalar(select(LtiContext).where(LtiContext.context_id == context_id))
    assert context is not None
    published = keys.jwks(session=db_session, grace_s=3600)  # gpulab's keys, as /lti/jwks publishes them
    db_session.commit()
    platform.tool_jwks = lambda: published
    return Course(context_id=context_id, slug=context.course.slug)


def test_staff_sync_adds_updates_and_reports_the_roster(
    client: TestClient, course: Course, platform: LoopbackPlatform, registered: LtiPlatform, db_session: Session
) -> None:
    context = db_session.scalar(select(LtiContext).where(LtiContext.context_id == course.context_id))
    assert context is not None and context.memberships_url == platform.memberships_url(course.context_id)

    response = client.post(f"/api/courses/{course.slug}/roster/sync", headers=JSON)

    assert response.status_code == 200, response.text
    report = response.json()
    assert (report["contexts"], report["pages"]) == (1, 2)
    kinds = ("added", "updated", "unchanged", "skipped")
    by = {kind: {entry["sub"]: entry for entry in report[kind]} for kind in kinds}
    assert set(by["added"]) == {"dan", "eve"} and set(by["updated"]) == {"bob"} and set(by["unchanged"]) == {"prof"}
    assert by["added"]["dan"]["role"] == "learner" and by["added"]["dan"]["name"] == "Dan Brown"
    assert by["added"]["eve"]["role"] == "ta" and by["updated"]["bob"]["role"] == "ta"
    assert set(by["skipped"]) == {"carol"} and by["skipped"]["carol"]["role"] == "learner"
    assert "inactive" in by["skipped"]["carol"]["note"] and "left enrolled" in by["skipped"]["carol"]["note"]

    [token_request] = platform.token_requests
    assert token_request["refused"] is None and token_request["form"]["scope"] == roster.MEMBERSHIPS_SCOPE
    assert [call["query"] for call in platform.roster_calls] == ["", "page=2"]
    assert all(call["accept"] == NRPS_MEDIA_TYPE for call in platform.roster_calls)
    db_session.expire_all()
    dan = _user(db_session, registered, "dan")
    assert dan is not None and dan.email == "dan@example.com"
    assert {sub: _role(db_session, registered, sub) for sub in ("prof", "bob", "carol", "dan", "eve")} == {
        "prof": CourseRole.instructor, "bob": CourseRole.ta, "carol": CourseRole.learner,
        "dan": CourseRole.learner, "eve": CourseRole.ta,
    }  # fmt: skip

    again = client.post(f"/api/courses/{course.slug}/roster/sync", headers=JSON).json()
    assert again["added"] == [] and again["updated"] == [] and len(again["unchanged"]) == 4
    assert len(platform.token_requests) == 1  # the cached token served the second sync


def test_a_learner_cannot_sync(
    client: TestClient, course: Course, flow: Flow, platform: LoopbackPlatform, registered: LtiPlatform
) -> None:
    _launch(flow, platform, context_id=course.context_id, sub="bob", roles=[LEARNER])  # the client is bob now

    response = client.post(f"/api/courses/{course.slug}/roster/sync", headers=JSON)

    assert response.status_code == 403, response.text
    assert platform.roster_calls == [] and platform.token_requests == []


def test_a_platform_error_writes_nothing_and_the_next_sync_works(
    client: TestClient, course: Course, platform: LoopbackPlatform, registered: LtiPlatform, db_session: Session
) -> None:
    platform.roster_down_from = 2  # the first page is served, the second one fails

    response = client.post(f"/api/courses/{course.slug}/roster/sync", headers=JSON)

    assert response.status_code == 422, response.text
    assert "HTTP 503" in response.json()["detail"] and course.context_id in response.json()["detail"]
    db_session.expire_all()
    assert _user(db_session, registered, "dan") is None  # page 1's new learner was not made
    assert _role(db_session, registered, "bob") is CourseRole.learner

    platform.roster_down_from = None
    retried = client.post(f"/api/courses/{course.slug}/roster/sync", headers=JSON)
    assert retried.status_code == 200, retried.text
    assert {entry["sub"] for entry in retried.json()["added"]} == {"dan", "eve"}


def test_the_manage_page_syncs_the_roster_with_a_button(
    client: TestClient, course: Course, platform: LoopbackPlatform, registered: LtiPlatform, db_session: Session
) -> None:
    manage = f"/courses/{course.slug}/manage"
    page = client.get(manage).text
    assert 'id="sync-roster"' in page and "linked to 1 LMS course that shares its roster" in page
    token = form_token(client, manage)
    platform.roster_down_from = 2

    failed = client.post(f"/courses/{course.slug}/roster/sync", data={"csrf_token": token})

    assert failed.status_code == 422 and 'id="lms-error"' in failed.text and "HTTP 503" in failed.text
    db_session.expire_all()
    assert _user(db_session, registered, "dan") is None
    platform.roster_down_from = None

    synced = client.post(f"/courses/{course.slug}/roster/sync", data={"csrf_token": token})

    assert synced.status_code == 200, synced.text
    assert "2 added · 1 updated · 1 unchanged · 1 skipped" in synced.text
    assert '<tr class="outcome-added"><td>Dan Brown</td><td>dan@example.com</td><td>added</td><td>learner</td>' in (
        synced.text
    )
    db_session.expire_all()
    assert _role(db_session, registered, "eve") is CourseRole.ta
    refused = client.post(f"/courses/{course.slug}/roster/sync", data={})
    assert refused.status_code == 403  # the form's CSRF token is required


def test_a_course_without_an_lms_roster_shows_no_sync(client: TestClient, instructor: User, login: Any) -> None:
    login(client, instructor)
    assert client.post("/api/courses", json={"slug": "hand-made", "title": "By hand"}).status_code == 201
    assert 'id="sync-roster"' not in client.get("/courses/hand-made/manage").text
