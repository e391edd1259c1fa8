"""Staff grading of quiz text answers: pending at attempt time, rubric points, conflicts, release, re-scoring, pages."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.courses.policy import WorkScope
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import CourseRole, Exercise, ManualGrade, Role, Submission, TestResult, User
from app.domain.results import settle
from app.domain.review import staff_grading as mg
from app.domain.submissions.quiz import answer_quiz
from tests.app.domain.courses.test_gradebook import add_assignment
from tests.app.web.test_api_instructor import token as csrf_token
from worker.bank.quiz.grading import QuizResult
from worker.bank.spec import ExerciseSpec
from worker.core.errors import Conflict, InvalidInput, NotFound
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


EVERYWHERE = WorkScope(course_ids=None, practice=True)  # an admin's view: every course's work and practice


def answer_and_land(*, session: Session, exercise: Exercise, **kwargs: Any) -> tuple[Submission, QuizResult]:
    """Answer as the quiz route does: the attempt, then its landing (``settle`` opens the staff grades)."""
    submission, result = answer_quiz(session=session, exercise=exercise, **kwargs)
    settle.quiz_answered(session=session, submission=submission, exercise=exercise, results=result.questions)
    return submission, result


def quiz_toml(*, names_points: float = 2, drop: str = "") -> str:
    items = [
        ("names", names_points, "Names the replica count."),
        ("reason", 2, "Says why the gradients are averaged."),
        ("wrong-claim", -1, "Claims the model is split across devices."),
    ]
    rubric = ", ".join(f'{{ id = "{i}", points = {p}, text = "{t}" }}' for i, p, t in items if i != drop)
    return f"""pass_percent = 75

[[question]]
id = "pick"
type = "single"
prompt = "Which one?"
options = [{{ id = "a", text = "A" }}, {{ id = "b", text = "B" }}]
answer = ["b"]
explanation = "B."

[[question]]
id = "explain"
type = "text"
points = 3
prompt = "Explain **data parallelism**."
model_answer = "MODEL-ANSWER"
rubric = [{rubric}]
comments = ["Say how many replicas there are."]
"""


def files(toml: str) -> dict[str, str]:
    return {"exercise.toml": 'title = "Graded quiz"\nkind = "quiz"\ntopic = "Quizzes"\n', "prompt.md": "Answer.",
            "quiz.toml": toml}  # fmt: skip


@pytest.fixture
def quiz(db_session: Session) -> Exercise:
    spec = ExerciseSpec.from_files(f"graded-{uuid.uuid4().hex[:8]}", files(quiz_toml()))
    exercise, _ = upsert_exercise(session=db_session, spec=spec)
    db_session.commit()
    return exercise


def attempt(db: Session, exercise: Exercise, user: User, text: str = "Two replicas, averaged gradients.") -> Submission:
    submission, _ = answer_and_land(session=db, user=user, exercise=exercise, answers={"pick": ["b"], "explain": text})
    db.commit()
    return submission


def grade_of(db: Session, submission: Submission) -> ManualGrade:
    return db.scalars(select(ManualGrade).where(ManualGrade.submission_id == submission.id)).one()


def test_an_answer_waits_for_staff_and_counts_nothing_until_released(
    db_session: Session, quiz: Exercise, learner: User
) -> None:
    sub = attempt(db_session, quiz, learner)
    outcomes = {t.name: (t.outcome, t.points) for t in sub.tests}
    assert outcomes == {"pick": ("passed", 1.0), "explain": ("pending", 0.0)}
    assert (sub.score, sub.max_score, sub.verdict) == (1.0, 4.0, Verdict.failed)  # 1 of 4 < the 75 % pass mark
    grade = grade_of(db_session, sub)
    assert (grade.question, grade.points, grade.graded_at, grade.max_points) == ("explain", None, None, 3.0)
    assert mg.counts(session=db_session, scope=EVERYWHERE, exercise=quiz) == mg.Counts(ungraded=1, graded=0, released=0)


def test_points_are_the_checked_items_clamped_and_bad_saves_are_refused(
    db_session: Session, quiz: Exercise, learner: User, instructor: User
) -> None:
    grade = grade_of(db_session, attempt(db_session, quiz, learner))
    mg.save(session=db_session, grade=grade, user=instructor, checked=["names", "reason"], comment="", revision=0)
    assert (grade.points, grade.revision, grade.graded_by_id) == (3.0, 1, instructor.id)  # 4 clamped to 3
    mg.save(session=db_session, grade=grade, user=instructor, checked=["wrong-claim"], comment=" no ", revision=1)
    assert (grade.points, grade.checked, grade.comment) == (0.0, ["wrong-claim"], "no")  # -1 clamped to 0
    mg.save(session=db_session, grade=grade, user=instructor, checked=["reason", "names", "wrong-claim"], comment="",
            revision=2)  # fmt: skip
    assert grade.points == 3.0 and grade.checked == ["names", "reason", "wrong-claim"]  # the rubric's order
    with pytest.raises(InvalidInput, match="no rubric item 'nope'"):
        mg.save(session=db_session, grade=grade, user=instructor, checked=["nope"], comment="", revision=3)
    with pytest.raises(InvalidInput, match="longer than"):
        mg.save(session=db_session, grade=grade, user=instructor, checked=[], comment="x" * 5000, revision=3)
    with pytest.raises(Conflict, match=f"{instructor.email} saved this grade"):
        mg.save(session=db_session, grade=grade, user=instructor, checked=[], comment="", revision=1)
    assert grade.revision == 3 and grade.points == 3.0  # the refused saves changed nothing


def test_release_puts_the_points_into_the_attempt(
    db_session: Session, quiz: Exercise, learner: User, instructor: User
) -> None:
    sub = attempt(db_session, quiz, learner)
    grade = grade_of(db_session, sub)
    mg.save(session=db_session, grade=grade, user=instructor, checked=["reason"], comment="Count the replicas.",
            revision=0)  # fmt: skip
    assert sub.score == 1.0  # graded but not released: the learner's score has not moved
    assert mg.release(session=db_session, exercise=quiz, user=instructor) == 1
    db_session.commit()
    db_session.refresh(sub)
    assert (sub.score, sub.verdict) == (3.0, Verdict.passed)  # 1 + 2 of 4 = 75 %: the pass mark
    test = db_session.scalars(select(TestResult).where(TestResult.submission_id == sub.id,
                                                       TestResult.name == "explain")).one()  # fmt: skip
    assert (test.outcome, test.points, test.max_points) == ("failed", 2.0, 3.0)
    assert "✓ +2 Says why the gradients are averaged." in test.message
    assert "✗ missed +2: Names the replica count." in test.message and "Comment: Count the replicas." in test.message
    assert "wrong-claim" not in test.message and "MODEL-ANSWER" in test.message
    assert mg.release(session=db_session, exercise=quiz, user=instructor) == 0
    # A released grade saved again applies at once.
    mg.save(session=db_session, grade=grade, user=instructor, checked=["reason", "names"], comment="", revision=1)
    assert sub.score == 4.0


def test_changing_an_items_points_rescores_and_dropping_a_used_item_is_refused(
    db_session: Session, quiz: Exercise, learner: User, instructor: User
) -> None:
    sub = attempt(db_session, quiz, learner)
    grade = grade_of(db_session, sub)
    mg.save(session=db_session, grade=grade, user=instructor, checked=["names"], comment="", revision=0)
    mg.release(session=db_session, exercise=quiz, user=instructor)
    db_session.commit()
    assert sub.score == 3.0
    upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(quiz.slug, files(quiz_toml(names_points=1))))
    assert (grade.points, sub.score) == (1.0, 2.0)  # re-scored: 1 + 1
    db_session.commit()
    with pytest.raises(Conflict, match="drops what staff grades use: item 'names'"):
        upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(quiz.slug, files(quiz_toml(drop="names"))))
    db_session.rollback()
    # An item no grade checked may go.
    upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(quiz.slug, files(quiz_toml(drop="wrong-claim"))))


def test_who_may_grade(
    db_session: Session, quiz: Exercise, learner: User, make_user: Callable[..., User], instructor: User
) -> None:
    practice = grade_of(db_session, attempt(db_session, quiz, learner))
    ta = make_user(Role.learner)
    course = membership.create_course(
        session=db_session, slug=f"g-{uuid.uuid4().hex[:6]}", title="G", creator=instructor
    )
    membership.enroll(session=db_session, course=course, user=learner)
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)
    db_session.commit()
    assignment = add_assignment(db_session, course, "W1", 0, [(quiz, 1.0)])
    sub, _ = answer_and_land(session=db_session, user=learner, exercise=quiz, answers={"explain": "Two replicas."},
                         assignment_id=assignment.id)  # fmt: skip
    db_session.commit()
    in_course = grade_of(db_session, sub)
    assert mg.get_grade(session=db_session, grade_id=in_course.id, user=ta) is in_course
    for grade, stranger in ((practice, ta), (in_course, learner)):
        with pytest.raises(NotFound):
            mg.get_grade(session=db_session, grade_id=grade.id, user=stranger)
    # An exercise-level release reaches only the courses the caller instructs: a TA's releases nothing.
    assert mg.release(session=db_session, exercise=quiz, user=ta) == 0
    assert in_course.released_at is None


def test_the_queue_the_form_a_conflict_and_the_learners_view(
    client: TestClient, login: Callable[..., None], db_session: Session, quiz: Exercise, learner: User,
    make_user: Callable[..., User], instructor: User,
) -> None:  # fmt: skip
    first = attempt(db_session, quiz, learner, "<script>alert(1)</script> two replicas")
    second = attempt(db_session, quiz, make_user(Role.learner))
    login(client, learner)
    assert client.get(f"/instructor/exercises/{quiz.slug}/grading").status_code == 403
    assert client.get(f"/grading/{grade_of(db_session, first).id}").status_code == 404
    login(client, instructor)
    queue = client.get(f"/instructor/exercises/{quiz.slug}/grading")
    assert queue.status_code == 200 and "<strong>2</strong> to grade" in queue.text
    nxt = client.get(f"/instructor/exercises/{quiz.slug}/grading/next", follow_redirects=False)
    url = nxt.headers["location"]
    assert url == f"/grading/{grade_of(db_session, first).id}"
    page = client.get(url)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; two replicas" in page.text and "<script>alert(1)" not in page.text
    assert "Say how many replicas there are." in page.text and "<strong>data parallelism</strong>" in page.text
    token = csrf_token(client, url)
    saved = client.post(url, data={"csrf_token": token, "item": ["names", "reason"], "comment": "Good.",
                                   "revision": "0", "then": "next"}, follow_redirects=False)  # fmt: skip
    assert saved.status_code == 303 and saved.headers["location"].endswith(f"/grading/next?after={url.split('/')[-1]}")
    assert client.get(saved.headers["location"], follow_redirects=False).headers["location"] == (
        f"/grading/{grade_of(db_session, second).id}"
    )
    # A second grader who loaded revision 0 sees the first grader's save instead of overwriting it.
    stale = client.post(url, data={"csrf_token": token, "item": ["wrong-claim"], "comment": "Mine.", "revision": "0"})
    assert stale.status_code == 409 and "Saved meanwhile by" in stale.text and "Mine." in stale.text
    db_session.expire_all()
    assert grade_of(db_session, first).checked == ["names", "reason"]
    bad = client.post(url, data={"csrf_token": token, "item": ["nope"], "revision": "1"})
    assert bad.status_code == 422 and "no rubric item" in bad.text
    released = client.post(f"/instructor/exercises/{quiz.slug}/grading/release", data={"csrf_token": token},
                           follow_redirects=False)  # fmt: skip
    assert released.status_code == 303
    login(client, learner)
    history = client.get(f"/exercises/{quiz.slug}/history?attempt={first.id}")
    assert "Graded by staff: 3 of 3 points." in history.text and "Comment: Good." in history.text


def test_the_api_lists_saves_with_revisions_and_releases(
    client: TestClient, login: Callable[..., None], db_session: Session, quiz: Exercise, learner: User,
    instructor: User,
) -> None:  # fmt: skip
    sub = attempt(db_session, quiz, learner)
    login(client, instructor)
    (listed,) = client.get(f"/api/instructor/exercises/{quiz.slug}/grades").json()
    assert (listed["question"], listed["answer"], listed["points"], listed["revision"]) == (
        "explain", "Two replicas, averaged gradients.", None, 0,
    )  # fmt: skip
    url = f"/api/grades/{listed['id']}"
    saved = client.put(url, json={"checked": ["names"], "comment": "ok", "revision": 0})
    assert saved.status_code == 200 and saved.json()["points"] == 2.0 and saved.json()["revision"] == 1
    stale = client.put(url, json={"checked": [], "revision": 0})
    assert stale.status_code == 409 and stale.headers["content-type"].startswith("application/problem+json")
    assert client.put(url, json={"checked": ["nope"], "revision": 1}).status_code == 422
    assert client.post(f"/api/instructor/exercises/{quiz.slug}/grades/release", json={}).json() == {"released": 1}
    db_session.refresh(sub)
    assert sub.score == 3.0
    login(client, learner)
    assert client.get(url).status_code == 404
    assert client.get(f"/api/instructor/exercises/{quiz.slug}/grades").status_code == 403


def test_a_ta_works_through_the_assignments_queue_but_only_instructors_release(
    client: TestClient, login: Callable[..., None], db_session: Session, quiz: Exercise, learner: User,
    make_user: Callable[..., User], instructor: User,
) -> None:  # fmt: skip
    ta = make_user(Role.learner)
    course = membership.create_course(
        session=db_session, slug=f"q-{uuid.uuid4().hex[:6]}", title="Q", creator=instructor
    )
    membership.enroll(session=db_session, course=course, user=learner)
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)
    db_session.commit()
    assignment = add_assignment(db_session, course, "Week 1", 0, [(quiz, 1.0)])
    attempt(db_session, quiz, learner)  # practice: not in the assignment's queue
    sub, _ = answer_and_land(session=db_session, user=learner, exercise=quiz, answers={"explain": "Two replicas."},
                         assignment_id=assignment.id)  # fmt: skip
    db_session.commit()
    queue_url = f"/courses/{course.slug}/assignments/{assignment.id}/grading"
    login(client, ta)
    page = client.get(queue_url)
    assert page.status_code == 200 and "<strong>1</strong> to grade" in page.text and 'id="release"' not in page.text
    assert client.get(f"/courses/nope/assignments/{assignment.id}/grading").status_code == 404
    first = client.get(f"{queue_url}/next", follow_redirects=False).headers["location"]
    grade = grade_of(db_session, sub)
    assert first == f"/grading/{grade.id}?queue=a{assignment.id}"
    form = client.get(first).text
    assert f'href="{queue_url}"' in form
    token = csrf_token(client, first)
    saved = client.post(f"/grading/{grade.id}", data={"csrf_token": token, "item": ["names"], "revision": "0",
                                                     "then": "next", "queue": f"a{assignment.id}"},
                        follow_redirects=False)  # fmt: skip
    assert saved.headers["location"] == f"{queue_url}/next?after={grade.id}"
    assert client.post(f"{queue_url}/release", data={"csrf_token": token}).status_code == 404
    login(client, learner)
    assert client.get(queue_url).status_code == 403
    login(client, instructor)
    token = csrf_token(client, queue_url)
    assert client.post(f"{queue_url}/release", data={"csrf_token": token}, follow_redirects=False).status_code == 303
    db_session.refresh(sub)
    assert sub.score == 2.0  # only the assignment's answer was released
    assert mg.counts(session=db_session, scope=EVERYWHERE, exercise=quiz) == mg.Counts(ungraded=1, graded=0, released=1)
