"""The audit trail: every audited action leaves one entry (who, when, what, before, after), append-only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.domain.accounts import people, tokens
from app.domain.accounts.tokens import Scope
from app.domain.audit import trail
from app.domain.courses import coursework, gradebook, lifecycle, membership
from app.domain.lti import platforms
from app.domain.models import AuditEntry, CourseRole, Exercise, ManualGrade, Role, User, utcnow
from app.domain.privacy import erasure
from app.domain.review import regrade_requests as rr
from app.domain.review import staff_grading as mg
from tests.app.domain.courses.test_gradebook import add_assignment
from tests.app.domain.review.test_regrade_requests import Class, klass  # noqa: F401  (klass: a fixture)
from tests.app.domain.review.test_staff_grading_code import exercise, graded  # noqa: F401  (exercise: a fixture)

pytestmark = pytest.mark.postgres


def _entries(db: Session, course_id: int | None = None) -> list[AuditEntry]:
    stmt = select(AuditEntry).order_by(AuditEntry.id)
    if course_id is not None:
        stmt = stmt.where(AuditEntry.course_id == course_id)
    return list(db.scalars(stmt))


def test_every_audited_action_leaves_its_entry(
    db_session: Session,
    klass: Class,  # noqa: F811
    exercise: Exercise,  # noqa: F811
    instructor: User,
    admin: User,
    make_user: Callable[..., User],
) -> None:
    db = db_session
    course = klass.assignment.course
    start = len(_entries(db))
    seen: list[tuple[str, int | None, int | None]] = []  # (action, actor, subject) in order

    def expect(action: trail.Action, actor: User | None, subject: User | None = None) -> None:
        seen.append((action.value, actor.id if actor else None, subject.id if subject else None))

    newcomer = make_user(Role.learner)
    membership.enroll(session=db, course=course, user=newcomer, actor=instructor)
    expect(trail.Action.enrol, instructor, newcomer)
    membership.enroll(session=db, course=course, user=newcomer, role=CourseRole.ta, actor=instructor)
    expect(trail.Action.role_change, instructor, newcomer)
    membership.unenroll(session=db, course=course, user=newcomer, actor=instructor)
    expect(trail.Action.unenrol, instructor, newcomer)

    ext = coursework.grant_extension(
        session=db, assignment=klass.assignment, learner=klass.learner, due_at=utcnow() + timedelta(days=3),
        late_until=None, extra_attempts=1, reason="flu", actor=klass.ta,
    )  # fmt: skip
    expect(trail.Action.extension_grant, klass.ta, klass.learner)
    coursework.revoke_extension(session=db, extension=ext, actor=instructor)
    expect(trail.Action.extension_revoke, instructor, klass.learner)

    item = klass.assignment.items[0]
    over = gradebook.override(session=db, course=course, item=item, learner=klass.learner, score_pct=80,
                              comment="partial credit", actor=instructor)  # fmt: skip
    expect(trail.Action.override_set, instructor, klass.learner)
    gradebook.revert_override(session=db, override_id=over.id, actor=klass.ta)
    expect(trail.Action.override_revert, klass.ta, klass.learner)

    request = rr.ask(session=db, user=klass.learner, submission=klass.graded, reason="test 2 is right")
    rr.respond(session=db, request=request, user=klass.ta, action=rr.StaffAction.adjust, body="agreed", score_pct=90)
    expect(trail.Action.override_set, klass.ta, klass.learner)  # the adjustment is an override
    expect(trail.Action.regrade_decision, klass.ta, klass.learner)

    coded = add_assignment(db, course, "Code review", 1, [(exercise, 1.0)])
    sub = graded(db, exercise, klass.learner, assignment_id=coded.id)
    grade = db.scalars(select(ManualGrade).where(ManualGrade.submission_id == sub.id)).one()
    mg.save(session=db, grade=grade, user=klass.ta, checked=["clear-names"], comment="good", revision=0)
    expect(trail.Action.manual_grade_save, klass.ta, klass.learner)
    assert mg.release(session=db, user=instructor, assignment=coded) == 1
    expect(trail.Action.manual_grade_release, instructor, klass.learner)

    fields = coursework.AssignmentFields(title="Week 9", is_published=False)
    made = coursework.create_assignment(session=db, course=course, fields=fields, items=[], actor=instructor)
    fields = coursework.AssignmentFields(title="Week 9", is_published=True)
    coursework.update_assignment(session=db, assignment=made, fields=fields, items=[], actor=instructor)
    expect(trail.Action.publish, instructor)
    fields = coursework.AssignmentFields(title="Week 9", is_published=False)
    coursework.update_assignment(session=db, assignment=made, fields=fields, items=[], actor=instructor)
    expect(trail.Action.unpublish, instructor)

    lifecycle.copy_course(session=db, source=course, slug=f"{course.slug}-next", title="GPUs, again", term="Spring",
                          actor=instructor, shift=timedelta(days=182))  # fmt: skip
    expect(trail.Action.course_copy, instructor)
    lifecycle.archive(session=db, course=course, actor=instructor)
    expect(trail.Action.course_archive, instructor)
    lifecycle.unarchive(session=db, course=course, actor=admin)
    expect(trail.Action.course_unarchive, admin)

    row, _ = tokens.create_token(session=db, user=klass.learner, name="laptop", scopes=[Scope.read])
    tokens.revoke_token(session=db, user=klass.learner, token_id=row.id)
    people.set_role(session=db, actor=admin, user=klass.other, role=Role.instructor)
    platform = platforms.register(
        session=db, issuer="https://lms.example.edu", client_id="c1", name="LMS",
        auth_login_url="https://lms.example.edu/auth", auth_token_url="https://lms.example.edu/token",
        jwks_url="https://lms.example.edu/jwks",
    )  # fmt: skip
    db.flush()
    platforms.record_admin(session=db, actor=admin, change="register", platform=platform, issuer=platform.issuer)
    erasure.erase(session=db, person=klass.other, actor=admin, code_policy="delete")
    db.flush()

    found = _entries(db)[start:]
    in_course = [(e.action, e.actor_id, e.subject_id) for e in found if e.course_id == course.id]
    assert in_course == seen  # the copy also has an entry in the new course, counted there
    site = [(e.action, e.actor_id, e.subject_id) for e in found if e.course_id is None]
    assert site == [
        ("token.create", klass.learner.id, klass.learner.id), ("token.revoke", klass.learner.id, klass.learner.id),
        ("member.role", admin.id, klass.other.id), ("lti.admin", admin.id, None),
        ("person.erase", admin.id, klass.other.id),
    ]  # fmt: skip
    by_action = {e.action: e for e in found}
    assert by_action["extension.grant"].after is not None and by_action["extension.grant"].after["extra_attempts"] == 1
    assert by_action["grade.override"].after == {
        "score_pct": 90.0,
        "override": by_action["grade.override"].after["override"],
    }
    assert by_action["course.archive"].before == {"archived": False} and by_action["course.archive"].after == {
        "archived": True
    }
    assert by_action["grade.manual"].after == {"points": 1.0, "checked": ["clear-names"], "released": False}
    # Nothing of a person's own words goes into an entry: reasons and comments stay in their rows.
    words = " ".join(str(e.before) + str(e.after) + e.target for e in found)
    assert "flu" not in words and "partial credit" not in words and "laptop" not in words and "agreed" not in words


def test_entries_cannot_be_changed_or_deleted(db_session: Session, instructor: User) -> None:
    entry = trail.record(session=db_session, action=trail.Action.course_archive, actor=instructor, target="course x")
    db_session.flush()
    for statement in (
        "UPDATE audit_entries SET target = 'forged' WHERE id = :id",
        "DELETE FROM audit_entries WHERE id = :id",
    ):
        with pytest.raises(DBAPIError, match="append-only"), db_session.begin_nested():
            db_session.execute(text(statement), {"id": entry.id})
    assert db_session.get(AuditEntry, entry.id) is not None


def test_entries_filter_by_action_person_and_time_and_name_the_erased(
    db_session: Session, instructor: User, admin: User, learner: User
) -> None:
    db = db_session
    course = membership.create_course(session=db, slug="audit-filters", title="Filters", creator=instructor)
    membership.enroll(session=db, course=course, user=learner, actor=instructor)
    lifecycle.archive(session=db, course=course, actor=instructor)
    db.flush()
    mine = trail.Filters(course_id=course.id)
    assert [r.action for r in trail.entries(session=db, filters=mine)] == [
        "course.archive",
        "member.enrol",
        "member.enrol",  # newest first; the creator's own enrolment too
    ]
    assert [
        r.action for r in trail.entries(session=db, filters=trail.Filters(course_id=course.id, action="member"))
    ] == [
        "member.enrol",
        "member.enrol",
    ]
    about = trail.entries(session=db, filters=trail.Filters(course_id=course.id, subject_id=learner.id))
    assert [(r.action, r.actor, r.subject) for r in about] == [("member.enrol", instructor.email, learner.email)]
    later = trail.Filters(course_id=course.id, since=utcnow() + timedelta(minutes=1))
    assert trail.entries(session=db, filters=later) == []
    erasure.erase(session=db, person=learner, actor=admin, code_policy="delete")
    db.flush()
    again = trail.entries(session=db, filters=trail.Filters(course_id=course.id, subject_id=learner.id))
    assert [r.subject for r in again] == [erasure.ERASED_NAME]
    csv_text = trail.entries_csv(trail.entries(session=db, filters=mine))
    assert csv_text.splitlines()[0] == "id,at_utc,actor,course,action,subject,target,before,after"
    assert "course.archive" in csv_text and '{""archived"": true}' in csv_text
    with pytest.raises(ValueError):
        trail.entries(session=db, filters=trail.Filters())  # neither a course nor site-wide: a programming error
