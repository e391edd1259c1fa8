"""Courses on a real database: creating them, roles, enrollment (one by one, CSV, invite links) and visibility."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.domain.accounts import people
from app.domain.accounts.passwords import verify_password
from app.domain.courses import membership
from app.domain.courses.membership import Outcome
from app.domain.models import Assignment, AssignmentItem, Course, CourseMember, CourseRole, Role, User, utcnow
from tests.conftest import TinyExercise
from worker.core.errors import Conflict, Forbidden, InvalidInput, NotFound

pytestmark = pytest.mark.postgres

MakeUser = Callable[..., User]


@pytest.fixture
def no_practice(db_session: Session) -> None:
    """Take away any practice course (inside the test's transaction, so only for this test)."""
    db_session.execute(delete(Course).where(Course.is_practice.is_(True)))
    db_session.flush()


@pytest.fixture
def course(db_session: Session, instructor: User) -> Course:
    made = membership.create_course(session=db_session, slug="gpu-101", title="GPU programming", creator=instructor)
    db_session.commit()
    return made


def member_count(db: Session, course: Course) -> int:
    return db.scalar(select(func.count(CourseMember.id)).where(CourseMember.course_id == course.id)) or 0


def add_assignment(
    db: Session, course: Course, exercise: TinyExercise, *, title: str = "A", position: int = 0, **dates: object
) -> Assignment:
    assignment = Assignment(course_id=course.id, title=title, position=position, **dates)
    db.add(assignment)
    db.flush()
    db.add(AssignmentItem(assignment_id=assignment.id, exercise_id=exercise.exercise.id))
    db.flush()
    return assignment


# --- creating, the practice course ---------------------------------------------------------------------------


def test_the_creator_becomes_instructor_and_slugs_are_unique(db_session: Session, course: Course, admin: User) -> None:
    (only,) = membership.members(session=db_session, course=course)
    assert only.role is CourseRole.instructor and only.source == "manual" and course.title == "GPU programming"
    with pytest.raises(Conflict, match="already exists"):
        membership.create_course(session=db_session, slug="gpu-101", title="Again", creator=admin)
    # The failed attempt left the transaction usable.
    assert membership.create_course(session=db_session, slug="gpu-102", title=" Two ", creator=admin).title == "Two"


@pytest.mark.parametrize("slug", ["ab", "Gpu", "-gpu", "gpu-", "gpu 101", "gpu\n", "g\x00pu", "x" * 65])
def test_bad_slugs_are_refused(db_session: Session, instructor: User, slug: str) -> None:
    with pytest.raises(InvalidInput, match="not a valid course slug"):
        membership.create_course(session=db_session, slug=slug, title="T", creator=instructor)


def test_titles_creators_and_the_practice_slug_are_checked(
    db_session: Session, instructor: User, learner: User
) -> None:
    with pytest.raises(Forbidden, match="only instructors and admins"):
        membership.create_course(session=db_session, slug="mine", title="Mine", creator=learner)
    for title, problem in [("  ", "empty"), ("x" * 201, "longer than 200"), ("a\x00b", "NUL"), ("\ud800", "not valid")]:
        with pytest.raises(InvalidInput, match=problem):
            membership.create_course(session=db_session, slug="mine", title=title, creator=instructor)
    with pytest.raises(Conflict, match="kept for the practice course"):
        membership.create_course(session=db_session, slug="practice", title="Mine", creator=instructor)


def test_practice_course_is_made_once(db_session: Session, no_practice: None) -> None:
    assert membership.find_practice_course(session=db_session) is None
    first = membership.ensure_practice_course(session=db_session)
    assert (first.slug, first.title, first.is_practice) == ("practice", "Practice", True)
    assert membership.practice_course(session=db_session).id == first.id
    assert membership.ensure_practice_course(session=db_session).id == first.id
    assert db_session.scalar(select(func.count(Course.id)).where(Course.is_practice.is_(True))) == 1


def test_get_course_hides_courses_from_outsiders(db_session: Session, course: Course, learner: User) -> None:
    with pytest.raises(NotFound, match="no course called 'gpu-101'"):
        membership.get_course(session=db_session, slug="gpu-101", user=learner)
    with pytest.raises(NotFound):
        membership.get_course(session=db_session, slug="no\x00such", user=learner)
    membership.enroll(session=db_session, course=course, user=learner)
    assert membership.get_course(session=db_session, slug="gpu-101", user=learner) == (course, CourseRole.learner)


# --- roles ---------------------------------------------------------------------------------------------------


def test_role_helpers() -> None:
    assert [membership.is_staff(r) for r in (CourseRole.instructor, CourseRole.ta, CourseRole.learner, None)] == [
        True,
        True,
        False,
        False,
    ]
    assert [membership.can_edit(r) for r in (CourseRole.instructor, CourseRole.ta, CourseRole.learner, None)] == [
        True,
        False,
        False,
        False,
    ]


def test_course_roles(
    db_session: Session, course: Course, instructor: User, admin: User, learner: User, make_user: MakeUser
) -> None:
    other_instructor = make_user(Role.instructor)
    assert membership.course_role(session=db_session, course=course, user=instructor) is CourseRole.instructor
    assert membership.course_role(session=db_session, course=course, user=admin) is CourseRole.instructor  # no row
    assert membership.course_role(session=db_session, course=course, user=learner) is None
    assert membership.course_role(session=db_session, course=course, user=other_instructor) is None  # not theirs
    practice = membership.practice_course(session=db_session)
    assert membership.course_role(session=db_session, course=practice, user=learner) is CourseRole.learner
    # The site role is no course role, in the practice course either: its staff list says who reviews practice.
    assert membership.course_role(session=db_session, course=practice, user=other_instructor) is CourseRole.learner
    membership.enroll(session=db_session, course=practice, user=other_instructor, role=CourseRole.instructor)
    assert membership.course_role(session=db_session, course=practice, user=other_instructor) is CourseRole.instructor
    ta = make_user(Role.learner)
    membership.enroll(session=db_session, course=practice, user=ta, role=CourseRole.ta)
    assert membership.course_role(session=db_session, course=practice, user=ta) is CourseRole.ta


def test_require_course_role_says_not_found_or_forbidden(
    db_session: Session, course: Course, learner: User, other_learner: User, admin: User
) -> None:
    with pytest.raises(NotFound, match="no course called 'gpu-101'"):
        membership.require_course_role(session=db_session, course=course, user=learner, roles=membership.ANY_ROLE)
    membership.enroll(session=db_session, course=course, user=learner)
    with pytest.raises(Forbidden) as info:
        membership.require_course_role(session=db_session, course=course, user=learner, roles=membership.STAFF)
    assert info.value.message == (
        "this needs an instructor or a TA of the course 'GPU programming'; you are a learner there"
    )
    membership.enroll(session=db_session, course=course, user=other_learner, role=CourseRole.ta)
    with pytest.raises(Forbidden, match="needs an instructor of the course"):
        membership.require_course_role(
            session=db_session, course=course, user=other_learner, roles={CourseRole.instructor}
        )
    assert membership.require_course_role(session=db_session, course=course, user=admin, roles={CourseRole.instructor})


# --- membership ----------------------------------------------------------------------------------------------


def test_enroll_is_idempotent_and_never_lowers_a_role(db_session: Session, course: Course, learner: User) -> None:
    member, new = membership.enroll(session=db_session, course=course, user=learner, role=CourseRole.ta, source="csv")
    assert new and member.role is CourseRole.ta
    again, new = membership.enroll(session=db_session, course=course, user=learner, source="invite")
    assert not new and again.id == member.id and again.role is CourseRole.ta and again.source == "csv"
    raised, _ = membership.enroll(session=db_session, course=course, user=learner, role=CourseRole.instructor)
    assert raised.role is CourseRole.instructor
    lowered, _ = membership.enroll(
        session=db_session, course=course, user=learner, role=CourseRole.learner, source="lti", update_role=True
    )
    assert lowered.role is CourseRole.learner and member_count(db_session, course) == 2
    with pytest.raises(InvalidInput, match="unknown enrollment source"):
        membership.enroll(session=db_session, course=course, user=learner, source="carrier-pigeon")


def test_the_last_instructor_stays(db_session: Session, course: Course, instructor: User, learner: User) -> None:
    with pytest.raises(Conflict, match="only instructor"):
        membership.unenroll(session=db_session, course=course, user=instructor)
    with pytest.raises(Conflict, match="only instructor"):
        membership.enroll(session=db_session, course=course, user=instructor, role=CourseRole.ta, update_role=True)
    membership.enroll(session=db_session, course=course, user=learner, role=CourseRole.instructor)
    assert membership.unenroll(session=db_session, course=course, user=instructor) is True
    assert membership.unenroll(session=db_session, course=course, user=instructor) is False
    assert membership.course_role(session=db_session, course=course, user=instructor) is None


def test_members_are_listed_by_role_then_email(db_session: Session, course: Course, make_user: MakeUser) -> None:
    zed = make_user(Role.learner, email="zed@example.com")
    amy = make_user(Role.learner, email="amy@example.com")
    tom = make_user(Role.learner, email="tom@example.com")
    for user, role in [(zed, CourseRole.learner), (amy, CourseRole.learner), (tom, CourseRole.ta)]:
        membership.enroll(session=db_session, course=course, user=user, role=role)
    listed = membership.members(session=db_session, course=course)
    assert [m.role for m in listed] == [CourseRole.instructor, CourseRole.ta, CourseRole.learner, CourseRole.learner]
    assert [m.user.email for m in listed[1:]] == ["tom@example.com", "amy@example.com", "zed@example.com"]
    learners = membership.members(session=db_session, course=course, role=CourseRole.learner)
    assert [m.user.email for m in learners] == ["amy@example.com", "zed@example.com"]


# --- CSV enrollment ------------------------------------------------------------------------------------------


def test_csv_keeps_good_rows_and_says_what_happened_to_each(
    db_session: Session, course: Course, instructor: User, make_user: MakeUser
) -> None:
    known = make_user(Role.learner, email="known@example.com")
    ta = make_user(Role.learner, email="ta@example.com")
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)
    text = (
        "email,role,name\n"
        "Known@Example.com,,\n"  # an account already: added as learner
        "new@example.com,ta,New Person\n"  # no account: made, with a password
        "not-an-email,,\n"
        "bob@school.test,,\n"  # special-use domain
        "odd@example.com,wizard,\n"
        "known@example.com,,\n"  # a second time in the file
        "ta@example.com,learner,\n"  # already a TA: stays one
        "\n"
        "nul@example.com,,A\x00B\n"
        "much@example.com,,,extra\n"
    )
    report = membership.enroll_csv(session=db_session, course=course, text=text, actor=instructor)
    db_session.commit()
    by_line = {r.line: r for r in report.rows}
    assert [r.line for r in report.rows] == [2, 3, 4, 5, 6, 7, 8, 10, 11]
    assert (by_line[2].outcome, by_line[2].email, by_line[2].role) == (Outcome.added, "known@example.com", "learner")
    new = by_line[3]
    assert (new.outcome, new.role) == (Outcome.created, "ta") and len(new.password) >= 12
    assert "not a valid e-mail address" in by_line[4].reason and by_line[4].email == "not-an-email"
    assert "special-use" in by_line[5].reason
    assert by_line[6].reason == "unknown role 'wizard' (learner, ta or instructor)"
    assert by_line[7].reason == "known@example.com is already on line 2"
    assert (by_line[8].outcome, by_line[8].role) == (Outcome.already, "ta")
    assert "never lowers" in by_line[8].reason
    assert "NUL" in by_line[10].reason and "4 columns" in by_line[11].reason
    assert {r.outcome for r in report.rows if r.line in (4, 5, 6, 7, 10, 11)} == {Outcome.refused}
    assert report.count(Outcome.refused) == 6 and report.count(Outcome.created) == 1
    made = db_session.scalars(select(User).where(User.email == "new@example.com")).one()
    assert made.role is Role.learner and made.name == "New Person" and verify_password(new.password, made.password_hash)
    assert membership.course_role(session=db_session, course=course, user=made) is CourseRole.ta
    assert membership.course_role(session=db_session, course=course, user=known) is CourseRole.learner
    member = db_session.scalars(select(CourseMember).where(CourseMember.user_id == known.id)).one()
    assert member.source == "csv"
    assert db_session.scalar(select(User.id).where(User.email == "odd@example.com")) is None


def test_csv_raises_a_role_and_runs_twice_without_change(
    db_session: Session, course: Course, instructor: User, learner: User
) -> None:
    membership.enroll(session=db_session, course=course, user=learner)
    text = f"email,role\n{learner.email},ta\nfresh@example.com,\n"
    first = membership.enroll_csv(session=db_session, course=course, text=text, actor=instructor)
    assert [(r.outcome, r.role, r.reason) for r in first.rows] == [
        (Outcome.updated, "ta", "was a learner"),
        (Outcome.created, "learner", ""),
    ]
    again = membership.enroll_csv(session=db_session, course=course, text=text, actor=instructor)
    assert [(r.outcome, r.password) for r in again.rows] == [(Outcome.already, ""), (Outcome.already, "")]
    assert member_count(db_session, course) == 3


def test_a_ta_adds_learners_but_no_staff(
    db_session: Session, course: Course, make_user: MakeUser, learner: User
) -> None:
    ta = make_user(Role.learner)
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)
    text = "email,role\nboss@example.com,instructor\nhelper@example.com,TA\npupil@example.com,Learner\n"
    report = membership.enroll_csv(session=db_session, course=course, text=text, actor=ta)
    assert [r.outcome for r in report.rows] == [Outcome.refused, Outcome.refused, Outcome.created]
    assert report.rows[0].reason == "only an instructor of the course may add instructors"
    assert report.rows[1].reason == "only an instructor of the course may add TAs"
    assert db_session.scalar(select(User.id).where(User.email == "boss@example.com")) is None
    membership.enroll(session=db_session, course=course, user=learner)
    with pytest.raises(Forbidden):
        membership.enroll_csv(session=db_session, course=course, text="email\nx@example.com\n", actor=learner)
    with pytest.raises(NotFound):
        membership.enroll_csv(session=db_session, course=course, text="email\nx@example.com\n", actor=make_user())


def test_an_admin_may_add_instructors_by_csv(db_session: Session, course: Course, admin: User) -> None:
    report = membership.enroll_csv(session=db_session, course=course, text="co@example.com,Co Teacher,instructor\n",
                                actor=admin)  # fmt: skip
    assert [(r.outcome, r.role) for r in report.rows] == [(Outcome.created, "instructor")]


def test_csv_headers_bytes_and_disabled_accounts(
    db_session: Session, course: Course, instructor: User, make_user: MakeUser
) -> None:
    gone = make_user(Role.learner, email="gone@example.com")
    gone.is_active = False
    db_session.flush()
    report = membership.enroll_csv(
        session=db_session, course=course, text="\ufeffname,email\nGone,gone@example.com\n".encode(), actor=instructor
    )
    (row,) = report.rows
    assert row.outcome is Outcome.added and "disabled" in row.reason
    # Without a header the admin import's order holds: email, name, role.
    (row,) = membership.enroll_csv(
        session=db_session, course=course, text="h@example.com,Hal,ta\n", actor=instructor
    ).rows
    assert (row.outcome, row.role) == (Outcome.created, "ta")
    assert db_session.scalars(select(User).where(User.email == "h@example.com")).one().name == "Hal"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "holds no people"),
        ("email,role\n\n", "holds no people"),
        ("email,team\na@example.com,x\n", "unknown column"),
        ("email\n" + "".join(f"p{i}@example.com\n" for i in range(people.MAX_IMPORT_ROWS + 1)), "enroll at most"),
        ("email\n" + "x" * (people.MAX_IMPORT_BYTES + 1), "the limit is 256 KB"),
        (b"email\n\xff\xfe@example.com\n", "not UTF-8"),
        ("email\n\ud800@example.com\n", "not valid text"),
        ("email\n" + "x" * 140_000, "not a readable CSV"),  # a field over the csv module's limit
    ],
)
def test_csv_files_out_of_bounds_are_refused_whole(
    db_session: Session, course: Course, instructor: User, text: str | bytes, problem: str
) -> None:
    with pytest.raises(InvalidInput, match=problem):
        membership.enroll_csv(session=db_session, course=course, text=text, actor=instructor)
    assert member_count(db_session, course) == 1


def test_the_report_is_safe_to_open_in_a_spreadsheet(db_session: Session, course: Course, instructor: User) -> None:
    text = 'email\n=cmd@example.com\n"=HYPERLINK(""http://x"")"\n@SUM(1)\n'
    report = membership.enroll_csv(session=db_session, course=course, text=text, actor=instructor)
    rows = list(csv.DictReader(io.StringIO(report.as_csv())))
    assert list(rows[0]) == list(membership.REPORT_COLUMNS)
    assert [r["email"] for r in rows] == ["'=cmd@example.com", '\'=HYPERLINK("http://x")', "'@SUM(1)"]
    assert rows[0]["outcome"] == "created" and rows[0]["password"] == report.rows[0].password
    assert all(not r[c].startswith(("=", "+", "-", "@")) for r in rows for c in r)


def test_the_admin_import_reads_a_header_that_starts_with_name(db_session: Session) -> None:
    # The admin import reads a header that starts with another column now that the rule is shared.
    report = people.import_csv(session=db_session, data=b"name,email\nAda,ada@example.com\n")
    assert report.errors == [] and [(a.email, a.name) for a in report.created] == [("ada@example.com", "Ada")]


# --- invite links --------------------------------------------------------------------------------------------


def test_invite_links_rotate_and_join_idempotently(
    db_session: Session, course: Course, learner: User, other_learner: User
) -> None:
    token = membership.invite_token_for(session=db_session, course=course)
    assert len(token) >= 32 and membership.invite_token_for(session=db_session, course=course) == token
    assert membership.join_by_invite(session=db_session, token=token, user=learner).id == course.id
    assert membership.join_by_invite(session=db_session, token=token, user=learner).id == course.id
    member = db_session.scalars(select(CourseMember).where(CourseMember.user_id == learner.id)).one()
    assert (member.role, member.source) == (CourseRole.learner, "invite")
    fresh = membership.invite_token_for(session=db_session, course=course, rotate=True)
    assert fresh != token
    with pytest.raises(NotFound, match="no longer valid"):
        membership.join_by_invite(session=db_session, token=token, user=other_learner)
    membership.join_by_invite(session=db_session, token=fresh, user=other_learner)
    assert member_count(db_session, course) == 3
    membership.close_invite(session=db_session, course=course)
    with pytest.raises(NotFound):
        membership.join_by_invite(session=db_session, token=fresh, user=other_learner)


def test_joining_by_invite_keeps_a_staff_role(db_session: Session, course: Course, instructor: User) -> None:
    token = membership.invite_token_for(session=db_session, course=course)
    membership.join_by_invite(session=db_session, token=token, user=instructor)
    assert membership.course_role(session=db_session, course=course, user=instructor) is CourseRole.instructor


@pytest.mark.parametrize("token", ["", "x", "a\x00b", "y" * 65, "../../etc"])
def test_tokens_no_course_has_are_not_found(db_session: Session, course: Course, learner: User, token: str) -> None:
    membership.invite_token_for(session=db_session, course=course)
    with pytest.raises(NotFound):
        membership.join_by_invite(session=db_session, token=token, user=learner)


def test_the_practice_course_has_no_invite_link(db_session: Session) -> None:
    with pytest.raises(InvalidInput, match="open to everyone"):
        membership.invite_token_for(session=db_session, course=membership.practice_course(session=db_session))


# --- visibility ----------------------------------------------------------------------------------------------


def test_courses_of_lists_practice_first_and_admins_see_all(
    db_session: Session, course: Course, make_user: MakeUser, learner: User, admin: User, no_practice: None
) -> None:
    other = membership.create_course(
        session=db_session, slug="art-200", title="Art", creator=make_user(Role.instructor)
    )
    assert membership.courses_of(session=db_session, user=learner) == []
    membership.enroll(session=db_session, course=course, user=learner)
    assert membership.courses_of(session=db_session, user=learner) == [(course, CourseRole.learner)]
    practice = membership.ensure_practice_course(session=db_session)
    assert membership.courses_of(session=db_session, user=learner) == [
        (practice, CourseRole.learner),
        (course, CourseRole.learner),
    ]
    assert membership.courses_of(session=db_session, user=admin) == [
        (practice, CourseRole.instructor),
        (other, CourseRole.instructor),
        (course, CourseRole.instructor),
    ]


def test_learners_see_published_assignments_staff_see_all(
    db_session: Session, course: Course, tiny_exercise: TinyExercise, learner: User, make_user: MakeUser, admin: User
) -> None:
    second = add_assignment(db_session, course, tiny_exercise, title="Second", position=2)
    draft = add_assignment(db_session, course, tiny_exercise, title="Draft", position=1, is_published=False)
    first = add_assignment(db_session, course, tiny_exercise, title="First", position=0)
    with pytest.raises(NotFound):
        membership.visible_assignments(session=db_session, course=course, user=learner)
    membership.enroll(session=db_session, course=course, user=learner)
    ta = make_user(Role.learner)
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)
    assert membership.visible_assignments(session=db_session, course=course, user=learner) == [first, second]
    assert membership.visible_assignments(session=db_session, course=course, user=ta) == [first, draft, second]
    assert membership.visible_assignments(session=db_session, course=course, user=admin) == [first, draft, second]


def test_exercise_access_without_the_practice_course(
    db_session: Session,
    course: Course,
    make_exercise: Callable[..., TinyExercise],
    learner: User,
    other_learner: User,
    make_user: MakeUser,
    admin: User,
    no_practice: None,
) -> None:
    open_ex, later_ex, draft_ex, loose_ex = (make_exercise() for _ in range(4))
    soon = utcnow() + timedelta(days=1)
    add_assignment(db_session, course, open_ex, opens_at=utcnow() - timedelta(hours=1))
    add_assignment(db_session, course, later_ex, title="Later", opens_at=soon)
    add_assignment(db_session, course, draft_ex, title="Draft", is_published=False)
    membership.enroll(session=db_session, course=course, user=learner)
    ta = make_user(Role.learner)
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)

    def may(user: User, ex: TinyExercise, now: datetime | None = None) -> bool:
        return membership.may_open_exercise(session=db_session, user=user, exercise=ex.exercise, now=now)

    assert [may(learner, e) for e in (open_ex, later_ex, draft_ex, loose_ex)] == [True, False, False, False]
    assert may(learner, later_ex, now=soon + timedelta(seconds=1))
    assert [may(other_learner, e) for e in (open_ex, later_ex, draft_ex, loose_ex)] == [False] * 4
    assert [may(ta, e) for e in (open_ex, later_ex, draft_ex, loose_ex)] == [True, True, True, False]
    for site_staff in (admin, make_user(Role.instructor)):
        assert all(may(site_staff, e) for e in (open_ex, later_ex, draft_ex, loose_ex))
    with pytest.raises(NotFound, match=f"no exercise called '{loose_ex.slug}'"):
        membership.require_exercise_access(session=db_session, user=learner, exercise=loose_ex.exercise)
    membership.require_exercise_access(session=db_session, user=learner, exercise=open_ex.exercise)


def test_the_practice_course_opens_every_published_exercise(
    db_session: Session, tiny_exercise: TinyExercise, learner: User, admin: User, no_practice: None
) -> None:
    assert not membership.may_open_exercise(session=db_session, user=learner, exercise=tiny_exercise.exercise)
    membership.ensure_practice_course(session=db_session)
    assert membership.may_open_exercise(session=db_session, user=learner, exercise=tiny_exercise.exercise)
    tiny_exercise.exercise.is_published = False
    db_session.flush()
    for user in (learner, admin):
        assert not membership.may_open_exercise(session=db_session, user=user, exercise=tiny_exercise.exercise)
        with pytest.raises(NotFound):
            membership.require_exercise_access(session=db_session, user=user, exercise=tiny_exercise.exercise)
