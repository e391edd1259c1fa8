"""Data requests: a person's export holds all their data and nobody else's; an erasure leaves nothing of them."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import MetaData, String, Text, select
from sqlalchemy.orm import Session

from app.domain.accounts import tokens
from app.domain.accounts.tokens import Scope
from app.domain.courses import coursework, drafts, gradebook
from app.domain.models import (
    ApiToken,
    LtiPlatform,
    LtiUser,
    Role,
    Submission,
    TimedAttempt,
    User,
    utcnow,
)
from app.domain.privacy import erasure
from app.domain.privacy.export import export_zip
from app.domain.review import regrade_requests as rr
from tests.app.domain.review.test_regrade_requests import Class, klass  # noqa: F401  (klass: a fixture)
from worker.core.errors import Conflict, Forbidden, InvalidInput

pytestmark = pytest.mark.postgres
SECRET_CODE = "def add(a, b):\n    # KESTREL-7731 my own words\n    return a + b\n"


def _populate(db: Session, klass: Class, instructor: User) -> dict[str, str]:  # noqa: F811
    """Give ``klass.learner`` one of everything gpulab keeps about a person; return strings only they own."""
    learner = klass.learner
    learner.name = "Ada Quillfeather"
    klass.graded.code = SECRET_CODE
    klass.graded.stdout = "KESTREL printed this"
    request = rr.ask(session=db, user=learner, submission=klass.graded, reason="FALCON-2218 test two is right")
    rr.respond(session=db, request=request, user=klass.ta, action=rr.StaffAction.comment, body="looking")
    coursework.grant_extension(
        session=db, assignment=klass.assignment, learner=learner, due_at=None, late_until=None, extra_attempts=1,
        reason="OSPREY-5 surgery", actor=instructor,
    )  # fmt: skip
    gradebook.override(session=db, course=klass.assignment.course, item=klass.assignment.items[0], learner=learner,
                       score_pct=70, comment="HERON-9 partial", actor=instructor)  # fmt: skip
    tokens.create_token(session=db, user=learner, name="WREN-laptop", scopes=[Scope.read])
    drafts.save(session=db, exercise=klass.exercise.exercise, user=learner, assignment=None, base_revision=0,
                code="# PLOVER-41 draft\n", max_code_bytes=65536)  # fmt: skip
    platform = LtiPlatform(
        issuer="https://lms.example", client_id="c", name="LMS", auth_login_url="https://lms.example/a",
        auth_token_url="https://lms.example/t", jwks_url="https://lms.example/j",
    )  # fmt: skip
    db.add(platform)
    db.flush()
    db.add(LtiUser(platform_id=platform.id, sub="lms-sub-ROBIN-88", user_id=learner.id))
    db.add(TimedAttempt(assignment_id=klass.assignment.id, user_id=learner.id, ends_at=utcnow() + timedelta(hours=1),
                        started_from="203.0.113.77"))  # fmt: skip
    # Someone else's work, which must never reach the learner's export.
    other = Submission(user_id=klass.other.id, exercise_version_id=klass.graded.exercise_version_id,
                       code="# OTHER-LEARNER-CODE\n", status=klass.graded.status, verdict=klass.graded.verdict,
                       score=1.0, max_score=5.0, assignment_id=klass.assignment.id)  # fmt: skip
    db.add(other)
    db.flush()
    return {
        "email": learner.email, "name": "Ada Quillfeather", "code": "KESTREL-7731", "stdout": "KESTREL printed",
        "regrade": "FALCON-2218", "extension": "OSPREY-5", "override": "HERON-9", "token": "WREN-laptop",
        "draft": "PLOVER-41", "lms": "lms-sub-ROBIN-88", "address": "203.0.113.77",
    }  # fmt: skip


def test_an_export_holds_all_of_a_persons_data_and_nobody_elses(
    db_session: Session,
    klass: Class,  # noqa: F811
    instructor: User,
) -> None:
    owned = _populate(db_session, klass, instructor)
    data = export_zip(session=db_session, user=klass.learner)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = set(z.namelist())
        everything = "\n".join(z.read(n).decode("utf-8") for n in names)
        account = json.loads(z.read("account.json"))
        submissions = json.loads(z.read("submissions.json"))
        grades = json.loads(z.read("grades.json"))
        assert z.read(f"code/{klass.graded.id}.py").decode() == SECRET_CODE
    assert {"README.txt", "account.json", "memberships.json", "grades.json", "extensions.json", "submissions.json",
            "staff_grades.json", "regrade_requests.json", "drafts.json", "timed_attempts.json", "tokens.json",
            "lms_accounts.json", "audit.json"} <= names  # fmt: skip
    assert (account["email"], account["name"]) == (klass.learner.email, "Ada Quillfeather")
    for what, text in owned.items():
        assert text in everything, f"the export lacks the {what}"
    assert {s["id"] for s in submissions} == {klass.graded.id, klass.practice.id}
    assert grades["courses"][0]["items"][0]["override"]["reason"] == "HERON-9 partial"
    # Nobody else's data: no other learner's code or address, no staff member's address.
    for someone in (klass.other, klass.ta, klass.outsider_ta, instructor):
        assert someone.email not in everything
    assert "OTHER-LEARNER-CODE" not in everything and '"by": "staff"' in everything


def _all_text(db: Session) -> str:
    """Return every text value in every table of the database, one per line."""
    meta = MetaData()
    meta.reflect(db.connection())
    found = []
    for table in meta.tables.values():
        columns = [c for c in table.columns if isinstance(c.type, String | Text) or c.type.__class__.__name__ == "JSON"]
        if columns:
            for row in db.execute(select(*columns)):
                found.extend(str(v) for v in row if v is not None)
    return "\n".join(found)


@pytest.mark.parametrize("policy", ["delete", "pseudonymize"])
def test_an_erasure_leaves_no_personal_data_and_others_pages_keep_their_numbers(
    db_session: Session,
    klass: Class,  # noqa: F811
    instructor: User,
    admin: User,
    policy: erasure.CodePolicy,
) -> None:
    db = db_session
    owned = _populate(db, klass, instructor)
    course = klass.assignment.course
    book_before = gradebook.gradebook(session=db, course=course, viewer=instructor)
    learner_id = klass.learner.id
    erasure.erase(session=db, person=klass.learner, actor=admin, code_policy=policy)
    db.flush()
    text = _all_text(db)
    kept = {"code", "stdout"} if policy == "pseudonymize" else set()
    for what, value in owned.items():
        if what in kept:
            assert value in text, f"pseudonymize keeps the {what}"
        else:
            assert value not in text, f"the {what} of the erased person is still in the database"
    erased = db.get(User, learner_id)
    assert erased is not None and erased.name == erasure.ERASED_NAME
    assert erased.email == erasure.erased_email(learner_id)
    assert not erased.is_active and erased.erased_at is not None
    assert db.scalars(select(ApiToken).where(ApiToken.user_id == learner_id)).all() == []
    # Others' pages keep working, with the same numbers, the erased learner shown as such.
    book = gradebook.gradebook(session=db, course=course, viewer=instructor)
    assert {r.user_id: r.total_pct for r in book.rows} == {r.user_id: r.total_pct for r in book_before.rows}
    assert erasure.ERASED_NAME in [r.name for r in book.rows]
    with pytest.raises(Conflict, match="erased already"):
        erasure.erase(session=db, person=erased, actor=admin, code_policy=policy)


def test_only_an_admin_erases_and_never_themselves(
    db_session: Session,
    klass: Class,  # noqa: F811
    instructor: User,
    admin: User,
    make_user: Callable[..., User],
) -> None:
    with pytest.raises(Forbidden, match="only an admin"):
        erasure.erase(session=db_session, person=klass.learner, actor=instructor, code_policy="delete")
    with pytest.raises(InvalidInput, match="your own"):
        erasure.erase(session=db_session, person=admin, actor=admin, code_policy="delete")
    other_admin = make_user(Role.admin)
    erasure.erase(session=db_session, person=other_admin, actor=admin, code_policy="delete")
    assert other_admin.role is Role.learner  # an erased account holds no rights either
