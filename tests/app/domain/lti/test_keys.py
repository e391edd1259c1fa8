"""gpulab's own keys: made at first use, published at /lti/jwks, rotated with a grace period; the role mapping;
the platforms' keys (``PlatformKeys``) against a real JWKS server on the loopback: one refetch per unseen kid,
bounded per platform."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet
from sqlalchemy.orm import Session

from app.domain.lti import keys
from app.domain.lti.platform_keys import MAX_KID_CHARS, PlatformKeys
from app.domain.lti.vocabulary import course_role
from app.domain.models import CourseRole, utcnow
from tests.app.domain.lti.platform import (
    INSTITUTION_INSTRUCTOR,
    INSTRUCTOR,
    LEARNER,
    TEACHING_ASSISTANT,
    LoopbackPlatform,
    new_key,
)
from worker.core.errors import Unauthorized

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi"}


def _published(client: TestClient) -> list[dict[str, Any]]:
    response = client.get("/lti/jwks")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    published: list[dict[str, Any]] = response.json()["keys"]
    for key in published:
        assert key["kty"] == "RSA" and key["alg"] == "RS256" and key["use"] == "sig" and key["kid"]
        assert not PRIVATE_MEMBERS & set(key)
    return published


def test_jwks_before_and_after_rotation(client: TestClient, db_session: Session) -> None:
    [first] = _published(client)
    assert _published(client) == [first]  # made once, then the same

    new = keys.rotate(session=db_session)
    db_session.commit()
    after = _published(client)
    assert [key["kid"] for key in after] == [new.kid, first["kid"]]  # the old one stays for in-flight launches

    token = keys.sign(session=db_session, claims={"iss": "gpulab"})
    verified = jwt.decode(token, KeySet.import_key_set({"keys": after}), algorithms=["RS256"])
    assert verified.header["kid"] == new.kid and verified.claims == {"iss": "gpulab"}


def test_a_key_retired_longer_than_the_grace_period_is_no_longer_published(
    client: TestClient, db_session: Session, settings
) -> None:
    old = keys.current(session=db_session)
    new = keys.rotate(session=db_session)
    old.retired_at = utcnow() - timedelta(seconds=settings.lti_key_grace_s + 60)
    db_session.commit()
    assert [key["kid"] for key in _published(client)] == [new.kid]


def test_signing_uses_the_current_key(db_session: Session) -> None:
    key = keys.signing_key(session=db_session)
    assert key.kid == keys.current(session=db_session).kid and key.is_private


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ([LEARNER], CourseRole.learner),
        ([INSTRUCTOR], CourseRole.instructor),
        (["Instructor"], CourseRole.instructor),  # the short form
        ([INSTRUCTOR, TEACHING_ASSISTANT], CourseRole.ta),
        ([TEACHING_ASSISTANT], CourseRole.ta),
        (["http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#Grader"], CourseRole.ta),
        (["http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#Lecturer"], CourseRole.instructor),
        ([LEARNER, INSTRUCTOR], CourseRole.instructor),
        ([INSTITUTION_INSTRUCTOR], CourseRole.learner),
        (["http://purl.imsglobal.org/vocab/lis/v2/system/person#Administrator"], CourseRole.learner),
        (["http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor"], CourseRole.learner),
        ([], CourseRole.learner),
        ([42, None], CourseRole.learner),
    ],
)
def test_course_role(roles: list[object], expected: CourseRole) -> None:
    assert course_role(roles) is expected


@pytest.fixture
def jwks_server() -> Iterator[LoopbackPlatform]:
    running = LoopbackPlatform().start()  # a real JWKS endpoint on the loopback; jwks_fetches counts its calls
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Clock:
    now_s: float = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _cache(clock: Clock) -> PlatformKeys:
    return PlatformKeys(timeout_s=5, now=clock)


def test_an_unknown_kid_is_refetched_once_then_refused_from_the_cache(jwks_server: LoopbackPlatform) -> None:
    clock = Clock()
    cache = _cache(clock)
    assert cache.key_for(jwks_server.jwks_url, jwks_server.keys[0].kid) is not None
    for _ in range(3):  # the same made-up kid: one refetch, then refused from the cache
        with pytest.raises(Unauthorized, match="does not publish"):
            cache.key_for(jwks_server.jwks_url, "made-up")
    assert jwks_server.jwks_fetches == 2
    clock.now_s += cache.max_age_s + 1  # too old: fetched again even for a known kid
    cache.key_for(jwks_server.jwks_url, jwks_server.keys[0].kid)
    assert jwks_server.jwks_fetches == 3


def test_a_made_up_kid_just_before_a_rotation_does_not_refuse_the_rotated_key(jwks_server: LoopbackPlatform) -> None:
    cache = _cache(Clock())  # the clock stands still: everything below happens within one refetch gap
    cache.key_for(jwks_server.jwks_url, jwks_server.keys[0].kid)
    with pytest.raises(Unauthorized, match="does not publish"):
        cache.key_for(jwks_server.jwks_url, "made-up")
    rotated = jwks_server.rotate()
    assert cache.key_for(jwks_server.jwks_url, rotated.kid) is not None  # its own refetch
    assert jwks_server.jwks_fetches == 3


def test_a_key_published_late_is_found_after_the_gap(jwks_server: LoopbackPlatform) -> None:
    clock = Clock()
    cache = _cache(clock)
    cache.key_for(jwks_server.jwks_url, jwks_server.keys[0].kid)
    early = new_key()  # the platform signs with it before its JWKS shows it
    for _ in range(2):
        with pytest.raises(Unauthorized):
            cache.key_for(jwks_server.jwks_url, early.kid)
    assert jwks_server.jwks_fetches == 2
    jwks_server.keys = [early, *jwks_server.keys]
    clock.now_s += cache.refetch_gap_s
    assert cache.key_for(jwks_server.jwks_url, early.kid) is not None
    assert jwks_server.jwks_fetches == 3


def test_made_up_kids_make_at_most_max_forced_fetches_per_window(jwks_server: LoopbackPlatform) -> None:
    clock = Clock()
    cache = _cache(clock)
    cache.key_for(jwks_server.jwks_url, jwks_server.keys[0].kid)
    for n in range(cache.max_forced + 3):
        with pytest.raises(Unauthorized):
            cache.key_for(jwks_server.jwks_url, f"made-up-{n}")
        clock.now_s += 1
    assert jwks_server.jwks_fetches == 1 + cache.max_forced  # the bound: the rest were refused from the cache
    rotated = jwks_server.rotate()
    with pytest.raises(Unauthorized):  # the documented cost of a flood: a rotation waits for the window
        cache.key_for(jwks_server.jwks_url, rotated.kid)
    assert jwks_server.jwks_fetches == 1 + cache.max_forced
    clock.now_s += cache.forced_window_s
    assert cache.key_for(jwks_server.jwks_url, rotated.kid) is not None
    assert jwks_server.jwks_fetches == 2 + cache.max_forced
    with pytest.raises(Unauthorized):
        cache.key_for(jwks_server.jwks_url, "k" * (MAX_KID_CHARS + 1))  # too long to be remembered: no fetch
    assert jwks_server.jwks_fetches == 2 + cache.max_forced


def test_each_platform_has_its_own_bound(jwks_server: LoopbackPlatform) -> None:
    other = LoopbackPlatform().start()
    try:
        cache = _cache(Clock())
        for server in (jwks_server, other):
            cache.key_for(server.jwks_url, server.keys[0].kid)
        for n in range(cache.max_forced):
            with pytest.raises(Unauthorized):
                cache.key_for(jwks_server.jwks_url, f"made-up-{n}")
        rotated = other.rotate()
        assert cache.key_for(other.jwks_url, rotated.kid) is not None  # a flood at one platform spares the other
        assert (jwks_server.jwks_fetches, other.jwks_fetches) == (1 + cache.max_forced, 2)
    finally:
        other.stop()
