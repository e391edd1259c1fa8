"""Deep Linking 2.0 from a real loopback platform: the picker, the signed response, refusals, the later launch."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Assignment, Course, CourseMember, CourseRole, LtiLink, LtiUser
from tests.app.domain.lti.conftest import Flow
from tests.app.domain.lti.deep_linking_platform import (
    CONTENT_ITEMS,
    CUSTOM,
    DATA,
    RETURN_URL,
    deep_linking_spec,
    read_response,
    return_form,
)
from tests.app.domain.lti.platform import LEARNER, LTI, LaunchSpec, LoopbackPlatform
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _picker(flow: Flow, spec: LaunchSpec) -> str:
    response = flow.launch(spec)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/lti/deep-link"
    page = flow.client.get("/lti/deep-link")
    assert page.status_code == 200, page.text
    return page.text


def _course(session: Session, spec: LaunchSpec) -> Course:
    member = session.scalar(
        select(CourseMember).join(LtiUser, LtiUser.user_id == CourseMember.user_id).where(LtiUser.sub == spec.sub)
    )
    assert member is not None and member.role is CourseRole.instructor
    return member.course


def _csrf(page: str) -> str:
    found = _CSRF.search(page)
    assert found is not None, page
    return found.group(1)


def test_instructor_picks_two_items_and_gets_a_signed_response_with_line_items(
    flow: Flow,
    client: TestClient,
    registered,
    platform: LoopbackPlatform,
    db_session: Session,
    tiny_exercise: TinyExercise,
) -> None:
    spec = deep_linking_spec()
    _picker(flow, spec)
    course = _course(db_session, spec)
    assignment = Assignment(course_id=course.id, title="Week 1: kernels")
    db_session.add(assignment)
    db_session.commit()

    page = client.get("/lti/deep-link").text
    assert "Week 1: kernels" in page and "Add two numbers" in page
    assert f'value="assignment:{assignment.id}"' in page and f'value="exercise:{tiny_exercise.slug}"' in page

    items = [f"assignment:{assignment.id}", f"exercise:{tiny_exercise.slug}"]
    answer = client.post("/lti/deep-link", data={"csrf_token": _csrf(page), "item": items})
    assert answer.status_code == 200, answer.text
    assert '<script src="/static/lti-return.js"' in answer.text and "<script>" not in answer.text
    action, fields = return_form(answer.text)
    assert action == RETURN_URL and set(fields) == {"JWT"}
    # Browsers enforce form-action: this one page may post to the platform, every other only to gpulab.
    policy = answer.headers["content-security-policy"]
    assert policy.endswith("form-action 'self' http://127.0.0.1:9") and "frame-ancestors 'none'" in policy
    assert client.get("/lti/jwks").headers["content-security-policy"].endswith("form-action 'self'")

    jwks = client.get("/lti/jwks")
    assert jwks.status_code == 200
    claims = read_response(jwks.json(), fields["JWT"])
    assert claims["iss"] == platform.client_id and claims["aud"] == platform.issuer
    assert claims["iat"] <= time.time() < claims["exp"] and claims["nonce"]
    assert claims[LTI + "message_type"] == "LtiDeepLinkingResponse"
    assert claims[LTI + "version"] == "1.3.0"
    assert claims[LTI + "deployment_id"] == platform.deployment_id
    assert claims[DATA] == "opaque-platform-data"
    first, second = claims[CONTENT_ITEMS]
    assert first["type"] == second["type"] == "ltiResourceLink"
    assert first["title"] == "Week 1: kernels" and second["title"] == "Add two numbers"
    assert first["url"] == second["url"] == "http://testserver/lti/launch"
    assert first["custom"] == {"gpulab_assignment": str(assignment.id)}
    assert second["custom"] == {"gpulab_exercise": tiny_exercise.slug}
    assert first["lineItem"] == {"scoreMaximum": 100, "label": "Week 1: kernels", "resourceId": items[0]}
    assert second["lineItem"] == {"scoreMaximum": 100, "label": "Add two numbers", "resourceId": items[1]}

    again = client.post("/lti/deep-link", data={"csrf_token": _csrf(page), "item": items})
    assert again.status_code == 403  # the pending request is spent


def test_the_picker_form_needs_the_session_s_form_token(flow: Flow, registered, tiny_exercise: TinyExercise) -> None:
    _picker(flow, deep_linking_spec())
    answer = flow.client.post("/lti/deep-link", data={"item": [f"exercise:{tiny_exercise.slug}"]})
    assert answer.status_code == 403


def test_a_single_item_platform_refuses_two_and_unknown_items_are_refused(
    flow: Flow, registered, tiny_exercise: TinyExercise
) -> None:
    page = _picker(flow, deep_linking_spec(accept_multiple=False))
    assert 'type="radio"' in page
    two = [f"exercise:{tiny_exercise.slug}", "exercise:nope"]
    assert flow.client.post("/lti/deep-link", data={"csrf_token": _csrf(page), "item": two}).status_code == 400
    unknown = flow.client.post("/lti/deep-link", data={"csrf_token": _csrf(page), "item": ["assignment:999999"]})
    assert unknown.status_code == 400 and "offers no" in unknown.text
    assert flow.client.post("/lti/deep-link", data={"csrf_token": _csrf(page)}).status_code == 400


def test_a_learner_s_deep_linking_launch_is_refused(
    flow: Flow, client: TestClient, registered, db_session: Session
) -> None:
    spec = deep_linking_spec(roles=[LEARNER])
    response = flow.launch(spec)
    assert response.status_code == 403 and "instructors" in response.text
    assert db_session.scalar(select(LtiUser).where(LtiUser.sub == spec.sub)) is None
    assert client.get("/api/auth/me").status_code == 401
    assert client.get("/lti/deep-link").status_code == 403


def test_a_platform_that_does_not_accept_resource_links_is_refused(flow: Flow, registered) -> None:
    response = flow.launch(deep_linking_spec(accept_types=["file", "html"]))
    assert response.status_code == 400 and "ltiResourceLink" in response.text


def test_a_later_resource_link_launch_lands_on_the_chosen_item(
    flow: Flow, client: TestClient, registered, db_session: Session, tiny_exercise: TinyExercise
) -> None:
    instructor = deep_linking_spec()
    _picker(flow, instructor)
    course = _course(db_session, instructor)
    assignment = Assignment(course_id=course.id, title="Week 2")
    db_session.add(assignment)
    db_session.commit()
    assert instructor.context is not None
    context = instructor.context

    exercise_link = LaunchSpec(context=context, claims={CUSTOM: {"gpulab_exercise": tiny_exercise.slug}})
    response = flow.launch(exercise_link)
    assert response.status_code == 303 and response.headers["location"] == f"/exercises/{tiny_exercise.slug}"
    link = db_session.scalar(select(LtiLink).where(LtiLink.resource_link_id == exercise_link.resource_link["id"]))
    assert link is not None and link.exercise_id == tiny_exercise.exercise.id

    assignment_link = LaunchSpec(context=context, claims={CUSTOM: {"gpulab_assignment": str(assignment.id)}})
    response = flow.launch(assignment_link)
    landing = f"/courses/{course.slug}/assignments/{assignment.id}"  # the assignment's own page
    assert response.status_code == 303 and response.headers["location"] == landing
    link = db_session.scalar(select(LtiLink).where(LtiLink.resource_link_id == assignment_link.resource_link["id"]))
    assert link is not None and link.assignment_id == assignment.id
    page = client.get(landing)  # the learner the launch signed in may open it
    assert page.status_code == 200 and "Week 2" in page.text


def test_an_assignment_of_another_course_is_not_mapped(flow: Flow, registered, db_session: Session) -> None:
    other = Course(slug="elsewhere", title="Elsewhere")
    db_session.add(other)
    db_session.flush()
    assignment = Assignment(course_id=other.id, title="Not yours")
    db_session.add(assignment)
    db_session.commit()
    spec = LaunchSpec(claims={CUSTOM: {"gpulab_assignment": str(assignment.id)}})
    assert flow.launch(spec).status_code == 303
    link = db_session.scalar(select(LtiLink).where(LtiLink.resource_link_id == spec.resource_link["id"]))
    assert link is not None and link.assignment_id is None


def test_next_terms_copy_takes_the_place_of_the_course_a_new_lms_course_made(
    flow: Flow, client: TestClient, registered, db_session: Session, tiny_exercise: TinyExercise
) -> None:
    from datetime import timedelta

    from app.domain.courses import lifecycle, membership
    from app.domain.models import AssignmentItem, LtiContext, User

    spec = deep_linking_spec()
    _picker(flow, spec)
    made = _course(db_session, spec)  # what the new LMS course's first launch made: empty
    teacher = db_session.scalars(
        select(User).join(LtiUser, LtiUser.user_id == User.id).where(LtiUser.sub == spec.sub)
    ).one()
    last_term = Course(slug="gpu-fall", title="GPUs")  # last term's course, which an LMS launch made too
    db_session.add(last_term)
    db_session.flush()
    membership.enroll(session=db_session, course=last_term, user=teacher, role=CourseRole.instructor, source="lti")
    week = Assignment(course_id=last_term.id, title="Week 1: kernels")
    week.items.append(AssignmentItem(exercise_id=tiny_exercise.exercise.id, position=0, weight=1.0))
    db_session.add(week)
    db_session.flush()
    db_session.refresh(last_term)
    copy = lifecycle.copy_course(session=db_session, source=last_term, slug="gpu-spring", title="GPUs", term="Spring",
                                 actor=teacher, shift=timedelta(days=180))  # fmt: skip
    db_session.commit()

    page = client.get("/lti/deep-link").text
    assert 'id="lti-link-course"' in page and 'value="gpu-spring"' in page
    refused = client.post("/lti/deep-link/course", data={"csrf_token": _csrf(page), "course": "practice"})
    assert refused.status_code == 403
    moved = client.post("/lti/deep-link/course", data={"csrf_token": _csrf(page), "course": "gpu-spring"},
                        follow_redirects=False)  # fmt: skip
    assert moved.status_code == 303 and moved.headers["location"] == "/lti/deep-link"
    page = client.get("/lti/deep-link").text
    (copied,) = copy.assignments
    assert f'value="assignment:{copied.id}"' in page and "to GPUs" in page
    db_session.expire_all()
    contexts = db_session.scalars(select(LtiContext.course_id).where(LtiContext.course_id.in_([made.id, copy.id])))
    assert list(contexts) == [copy.id]
    assert db_session.get(Course, made.id) is None  # the empty course the launch made is gone
    answer = client.post("/lti/deep-link", data={"csrf_token": _csrf(page), "item": [f"assignment:{copied.id}"]})
    assert answer.status_code == 200, answer.text
