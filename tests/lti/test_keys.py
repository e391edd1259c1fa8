"""gpulab's own keys: made at first use, published at /lti/jwks, rotated with a grace period; the role mapping."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet
from sqlalchemy.orm import Session

from app.domain.lti import keys
from app.domain.lti.vocabulary import course_role
from app.domain.models import CourseRole, utcnow
from tests.lti.platform import INSTITUTION_INSTRUCTOR, INSTRUCTOR, LEARNER, TEACHING_ASSISTANT

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


def test_platform_keys_refetch_an_unknown_kid_at_most_once_per_gap() -> None:
    from app.domain.lti.platform_keys import PlatformKeys
    from tests.lti.platform import LoopbackPlatform
    from worker.core.errors import Unauthorized

    platform = LoopbackPlatform().start()
    clock = [1000.0]
    try:
        cache = PlatformKeys(timeout_s=5, now=lambda: clock[0])
        assert cache.key_for(platform.jwks_url, platform.keys[0].kid) is not None
        for _ in range(3):  # made-up kids: one refetch, then refused from the cache
            with pytest.raises(Unauthorized, match="does not publish"):
                cache.key_for(platform.jwks_url, "made-up")
        assert platform.jwks_fetches == 2
        clock[0] += cache.refetch_gap_s + 1
        rotated = platform.rotate()
        assert cache.key_for(platform.jwks_url, rotated.kid) is not None
        assert platform.jwks_fetches == 3
        clock[0] += cache.max_age_s + 1  # too old: fetched again even for a known kid
        cache.key_for(platform.jwks_url, rotated.kid)
        assert platform.jwks_fetches == 4
    finally:
        platform.stop()
