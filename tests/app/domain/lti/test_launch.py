"""Launches from a real loopback platform: accounts, courses, enrollments, links, the session afterwards."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.models import CourseMember, CourseRole, LtiContext, LtiLink, LtiNonce, LtiUser, Role, User
from tests.app.domain.lti.conftest import Flow, Started
from tests.app.domain.lti.platform import (
    INSTITUTION_INSTRUCTOR,
    INSTRUCTOR,
    LEARNER,
    TEACHING_ASSISTANT,
    LaunchSpec,
    LoopbackPlatform,
)
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient


def _user_of(session: Session, platform_id: int, sub: str) -> User:
    row = session.scalar(select(LtiUser).where(LtiUser.platform_id == platform_id, LtiUser.sub == sub))
    assert row is not None
    return row.user


def _member(session: Session, user: User) -> CourseMember:
    member = session.scalar(select(CourseMember).where(CourseMember.user_id == user.id))
    assert member is not None
    return member


def test_learner_launch_makes_account_course_and_enrollment_and_signs_in(
    flow: Flow, client: TestClient, registered, platform: LoopbackPlatform, db_session: Session
) -> None:
    spec = LaunchSpec(email="Ada@Example.com", name="Ada Lovelace", roles=[LEARNER])
    started = flow.login(spec)
    assert started.url.startswith(platform.auth_url + "?")
    assert started.params["response_type"] == "id_token"
    assert started.params["response_mode"] == "form_post"
    assert started.params["scope"] == "openid"
    assert started.params["prompt"] == "none"
    assert started.params["redirect_uri"] == "http://testserver/lti/launch"
    assert started.params["client_id"] == platform.client_id
    assert started.params["lti_message_hint"] == "message-hint"
    cookie = started.response.headers["set-cookie"]
    assert f"gpulab_lti_{started.state}=" in cookie
    assert "HttpOnly" in cookie and "Path=/lti/launch" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")

    response = flow.post(flow.authorise(started))

    assert response.status_code == 303, response.text
    user = _user_of(db_session, registered.id, spec.sub)
    assert (user.email, user.name, user.role) == ("ada@example.com", "Ada Lovelace", Role.learner)
    member = _member(db_session, user)
    assert (member.role, member.source) == (CourseRole.learner, "lti")
    assert member.course.title == "GPU Programming 101"
    assert member.course.slug.startswith("gpu101-")
    assert response.headers["location"] == f"/courses/{member.course.slug}"  # the launched course's page
    context = db_session.scalar(select(LtiContext).where(LtiContext.course_id == member.course.id))
    assert context is not None and spec.context is not None and context.context_id == spec.context["id"]
    link = db_session.scalar(select(LtiLink).where(LtiLink.resource_link_id == spec.resource_link["id"]))
    assert link is not None and link.title == "Week 1"
    assert link.lineitem_url == f"{platform.issuer}/ags/lineitems/{spec.resource_link['id']}"
    assert db_session.scalar(select(func.count()).select_from(LtiNonce)) == 1
    assert f"gpulab_lti_{started.state}=" in response.headers["set-cookie"]  # the state cookie is deleted

    me = client.get("/api/auth/me")
    assert me.status_code == 200 and me.json()["email"] == "ada@example.com"
    assert client.get("/exercises").status_code == 200
    assert client.get(f"/courses/{member.course.slug}").status_code == 200  # the landing page opens for them


def test_instructor_launch_gives_the_instructor_role_in_the_course_only(
    flow: Flow, registered, db_session: Session
) -> None:
    spec = LaunchSpec(roles=[INSTRUCTOR, INSTITUTION_INSTRUCTOR])
    assert flow.launch(spec).status_code == 303
    user = _user_of(db_session, registered.id, spec.sub)
    assert _member(db_session, user).role is CourseRole.instructor
    assert user.role is Role.learner  # a course role, never a site role
    assert user.email.endswith("@lti.invalid")  # no e-mail claim: a placeholder address


def test_teaching_assistant_launch_gives_ta(flow: Flow, registered, db_session: Session) -> None:
    spec = LaunchSpec(roles=[INSTRUCTOR, TEACHING_ASSISTANT])
    assert flow.launch(spec).status_code == 303
    assert _member(db_session, _user_of(db_session, registered.id, spec.sub)).role is CourseRole.ta


def test_institution_role_alone_makes_a_learner(flow: Flow, registered, db_session: Session) -> None:
    spec = LaunchSpec(roles=[INSTITUTION_INSTRUCTOR])
    assert flow.launch(spec).status_code == 303
    assert _member(db_session, _user_of(db_session, registered.id, spec.sub)).role is CourseRole.learner


def test_a_second_launch_finds_the_same_account_and_course_and_follows_the_role(
    flow: Flow, registered, db_session: Session
) -> None:
    spec = LaunchSpec(roles=[LEARNER], name="Ada")
    assert flow.launch(spec).status_code == 303
    spec.roles, spec.name = [INSTRUCTOR], "Ada King"
    spec.resource_link = {"id": "another-link", "title": "Week 2"}
    assert flow.launch(spec).status_code == 303

    user = _user_of(db_session, registered.id, spec.sub)
    assert user.name == "Ada King"
    members = list(db_session.scalars(select(CourseMember).where(CourseMember.user_id == user.id)))
    assert [m.role for m in members] == [CourseRole.instructor]
    contexts = select(func.count()).select_from(LtiContext).where(LtiContext.platform_id == registered.id)
    assert db_session.scalar(contexts) == 1
    assert db_session.scalar(select(func.count()).select_from(LtiNonce)) == 2


def test_a_hand_made_membership_keeps_its_role(flow: Flow, registered, db_session: Session) -> None:
    spec = LaunchSpec(roles=[LEARNER])
    assert flow.launch(spec).status_code == 303
    member = _member(db_session, _user_of(db_session, registered.id, spec.sub))
    member.source, member.role = "manual", CourseRole.ta
    db_session.commit()
    assert flow.launch(spec).status_code == 303
    db_session.refresh(member)
    assert (member.role, member.source) == (CourseRole.ta, "manual")


def test_a_hand_made_learner_is_raised_to_the_platform_s_instructor(
    flow: Flow, registered, db_session: Session
) -> None:
    spec = LaunchSpec(roles=[LEARNER])
    assert flow.launch(spec).status_code == 303
    member = _member(db_session, _user_of(db_session, registered.id, spec.sub))
    member.source = "manual"
    db_session.commit()
    spec.roles = [INSTRUCTOR]
    assert flow.launch(spec).status_code == 303
    db_session.refresh(member)
    assert (member.role, member.source) == (CourseRole.instructor, "manual")


def test_the_last_instructor_is_not_demoted_until_there_is_another(flow: Flow, registered, db_session: Session) -> None:
    teacher = LaunchSpec(roles=[INSTRUCTOR])
    assert flow.launch(teacher).status_code == 303
    teacher.roles = [LEARNER]
    assert flow.launch(teacher).status_code == 303  # the launch goes on, the role stays
    member = _member(db_session, _user_of(db_session, registered.id, teacher.sub))
    assert member.role is CourseRole.instructor

    colleague = LaunchSpec(roles=[INSTRUCTOR], context=teacher.context)
    assert flow.launch(colleague).status_code == 303
    assert flow.launch(teacher).status_code == 303
    db_session.refresh(member)
    assert member.role is CourseRole.learner


def test_an_email_another_account_has_gets_a_placeholder_and_leaves_that_account_alone(
    flow: Flow, registered, db_session: Session, make_user: Callable[..., User]
) -> None:
    existing = make_user(Role.admin, email="taken@example.com")
    spec = LaunchSpec(email="taken@example.com")
    assert flow.launch(spec).status_code == 303
    user = _user_of(db_session, registered.id, spec.sub)
    assert user.id != existing.id and user.email.endswith("@lti.invalid")


def test_a_launch_targeting_an_exercise_lands_there_and_links_it(
    flow: Flow, registered, db_session: Session, tiny_exercise: TinyExercise
) -> None:
    spec = LaunchSpec(target_link_uri=f"http://testserver/exercises/{tiny_exercise.slug}")
    response = flow.launch(spec)
    assert response.status_code == 303
    assert response.headers["location"] == f"/exercises/{tiny_exercise.slug}"
    link = db_session.scalar(select(LtiLink).where(LtiLink.resource_link_id == spec.resource_link["id"]))
    assert link is not None and link.exercise_id == tiny_exercise.exercise.id

    # The link remembers its exercise: a later launch lands there whatever its target says.
    spec.target_link_uri = "http://testserver/lti/launch"
    assert flow.launch(spec).headers["location"] == f"/exercises/{tiny_exercise.slug}"


def test_a_launch_without_context_enrolls_nowhere(flow: Flow, registered, db_session: Session) -> None:
    spec = LaunchSpec(context=None)
    assert flow.launch(spec).status_code == 303
    user = _user_of(db_session, registered.id, spec.sub)
    assert db_session.scalar(select(CourseMember).where(CourseMember.user_id == user.id)) is None


def test_login_initiation_by_form_post_and_without_client_id(flow: Flow, registered) -> None:
    spec = LaunchSpec()
    started = flow.login(spec, method="POST", client_id="")
    assert started.params["client_id"] == registered.client_id
    assert flow.post(flow.authorise(started)).status_code == 303


def test_platform_key_rotation_is_followed_by_one_refetch(flow: Flow, registered, platform: LoopbackPlatform) -> None:
    assert flow.launch(LaunchSpec()).status_code == 303
    assert flow.launch(LaunchSpec()).status_code == 303
    assert platform.jwks_fetches == 1  # cached

    platform.rotate()  # the old key is gone at once
    assert flow.launch(LaunchSpec()).status_code == 303
    assert platform.jwks_fetches == 2


def test_a_made_up_kid_just_before_a_rotation_leaves_the_rotated_launch_alone(
    flow: Flow, registered, platform: LoopbackPlatform
) -> None:
    assert flow.launch(LaunchSpec()).status_code == 303
    flow.client.cookies.clear()
    spec = LaunchSpec()
    started = flow.login(spec)
    made_up = platform.id_token(nonce=started.nonce, spec=spec, header={"kid": "made-up"})
    refused = flow.post({"id_token": made_up, "state": started.state})
    assert refused.status_code == 401 and "does not publish" in html.unescape(refused.text)
    assert platform.jwks_fetches == 2

    platform.rotate()  # right after: a launch signed with the new key gets its own refetch
    assert flow.launch(LaunchSpec()).status_code == 303
    assert platform.jwks_fetches == 3


def test_a_client_that_accepts_new_deployments_adds_each_at_its_first_launch(
    flow: Flow, registered, db_session: Session
) -> None:
    from app.domain.lti import platforms

    platforms.set_accept_new_deployments(platform=registered, accept=True)
    db_session.commit()
    spec = LaunchSpec(deployment_id="course-7-install")
    assert flow.launch(spec).status_code == 303
    assert flow.launch(spec).status_code == 303
    db_session.expire_all()
    assert registered.deployment_ids == [flow.platform.deployment_id, "course-7-install"]
    context = db_session.scalar(select(LtiContext).where(LtiContext.platform_id == registered.id))
    assert context is not None and context.deployment_id == "course-7-install"

    platforms.set_accept_new_deployments(platform=registered, accept=False)
    db_session.commit()
    flow.client.cookies.clear()
    refused = flow.launch(LaunchSpec(deployment_id="course-8-install"))
    assert refused.status_code == 403 and "course-8-install" in html.unescape(refused.text)
    assert flow.launch(LaunchSpec(deployment_id="course-7-install")).status_code == 303  # added for good
    db_session.expire_all()
    assert [r.deployment_id for r in platforms.refused_deployments(registered)] == ["course-8-install"]
    assert "course-8-install" not in registered.deployment_ids


def test_over_https_the_state_cookie_is_samesite_none_and_secure(
    flow: Flow, registered, settings, platform: LoopbackPlatform
) -> None:
    settings.public_url = "https://gpulab.example.edu"
    started = flow.login(LaunchSpec(target_link_uri="https://gpulab.example.edu/exercises"))
    assert started.params["redirect_uri"] == "https://gpulab.example.edu/lti/launch"
    cookie = started.response.headers["set-cookie"].lower()
    assert "samesite=none" in cookie and "secure" in cookie
    assert "partitioned" in cookie  # CHIPS: kept in an LMS frame where third-party cookies are blocked


FRAMED = {"Sec-Fetch-Dest": "iframe"}


def _hidden_probe(response: Any) -> str:
    cookies = response.headers.get_list("set-cookie")
    [probe] = [c for c in cookies if c.startswith("gpulab_lti_probe=")]
    return str(probe)


def test_a_login_inside_a_frame_checks_the_cookies_before_going_to_the_platform(
    flow: Flow, client: TestClient, registered, platform: LoopbackPlatform
) -> None:
    params = flow.login_params(LaunchSpec())
    page = client.get("/lti/login", params=params, headers=FRAMED, follow_redirects=False)

    assert page.status_code == 200 and 'id="lti-login"' in page.text and "/static/lti-login.js" in page.text
    auth_url = html.unescape(re.search(r'data-auth-url="([^"]+)"', page.text).group(1))  # type: ignore[union-attr]
    assert auth_url.startswith(platform.auth_url + "?")
    window = html.unescape(re.search(r'id="lti-login-blocked".*?href="([^"]+)"', page.text, re.S).group(1))  # type: ignore[union-attr]
    assert window.startswith("/lti/login?") and parse_qs(urlsplit(window).query)["login_hint"] == [params["login_hint"]]
    assert "Path=/lti/cookie-check" in _hidden_probe(page)
    state = parse_qs(urlsplit(auth_url).query)["state"][0]
    assert any(c.startswith(f"gpulab_lti_{state}=") for c in page.headers.get_list("set-cookie"))

    assert client.get("/lti/cookie-check").json() == {"cookies": True}  # this client kept the probe
    client.cookies.delete("gpulab_lti_probe", path="/lti/cookie-check")
    blocked = client.get("/lti/cookie-check")
    assert blocked.json() == {"cookies": False} and blocked.headers["cache-control"] == "no-store"

    # The page goes on to the platform with the state its cookie holds: the launch works as an unframed one.
    started = Started(page, auth_url, {k: v[0] for k, v in parse_qs(urlsplit(auth_url).query).items()})
    assert flow.post(flow.authorise(started)).status_code == 303


def test_the_new_window_login_redirects_at_once(flow: Flow, client: TestClient, registered) -> None:
    framed = client.get("/lti/login", params=flow.login_params(LaunchSpec()), headers=FRAMED, follow_redirects=False)
    window = html.unescape(re.search(r'id="lti-login-blocked".*?href="([^"]+)"', framed.text, re.S).group(1))  # type: ignore[union-attr]
    again = client.get(window, headers={"Sec-Fetch-Dest": "document"}, follow_redirects=False)
    assert again.status_code == 302 and "gpulab_lti_probe" not in again.headers.get("set-cookie", "")


def test_a_refused_login_in_a_frame_is_the_refusal_page(flow: Flow, client: TestClient) -> None:
    response = client.get("/lti/login", params={"iss": "https://nobody.example"}, headers=FRAMED)
    assert response.status_code == 400 and "lacks login_hint" in response.text


def test_framed_sessions_are_partitioned_over_https(monkeypatch: Any, database_url: str, tmp_path: Any) -> None:
    from fastapi.testclient import TestClient as Client

    from app.main import create_app
    from tests.support import configure

    configure(
        monkeypatch, mode="dev", database_url=database_url, data_dir=str(tmp_path), secret_key="s" * 48,
        frame_ancestors="https://lms.example.edu", cookie_secure="true",
    )  # fmt: skip
    with Client(create_app(), base_url="https://testserver") as https_client:
        page = https_client.get("/login")  # its form token starts the session
        session_cookie = [c for c in page.headers.get_list("set-cookie") if c.startswith("gpulab_session=")]
        assert session_cookie and "partitioned" in session_cookie[0].lower()
        assert "samesite=none" in session_cookie[0].lower() and "secure" in session_cookie[0].lower()
