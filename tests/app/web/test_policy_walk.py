"""Staff rights are per course: every API operation and every page route, walked as every role with course B's ids.

Two courses, A and B, each with its own instructor, learners and work (submissions, a quiz text answer with a staff
grade, a regrade request, a similarity run with a pair, an extension, a gradebook override); A has a TA; there is
a site instructor who holds no course role (the outsider), and an admin; B's learners also practised (practice
work, whose staff list is empty here). Every route of ``app.openapi()`` and ``app.routes`` must be in ``ROUTES``
(a new route that is not fails ``test_every_route_is_classified``, so it cannot skip the policy):

- ``B``: its path names another course's work. Walked with B's ids as admin's opposite numbers (A's instructor,
  TA and learner, the outsider): each gets 404, or 403 where ``docs/api.md`` documents it (a role refusal of a
  staff-only route, or a similarity run); B's instructor (or, for a learner's own action, B's learner) gets past
  the policy, which shows the ids name real rows.
- ``EXERCISE``: an exercise-level view over every course's work. Walked for both exercises: what it shows holds
  nothing of B's learners or of practice work (the walkers staff no practice), and its writes change nothing of B.
- ``OWN``, ``BANK``, ``ADMIN``, ``OPEN``: the caller's own work, the bank, the admins' (an admin sees everything),
  or open by design (the invite link, LTI, probes). Their GETs are walked and must show nothing of B's learners.

After the walk, B's work is as it was: nothing released, graded, re-run, reverted, revoked or written.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.routing import APIRoute
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import (
    Assignment,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    Extension,
    GradeOverride,
    ManualGrade,
    RegradeMessage,
    RegradeRequest,
    Role,
    SimilarityPair,
    SimilarityRun,
    Submission,
    SubmissionStatus,
    User,
)
from app.domain.review.similarity import Params
from tests.app.domain.courses.test_gradebook import add_assignment, submit
from tests.app.domain.courses.test_leaderboard import board_exercise, measured
from tests.app.domain.review.test_staff_grading import files, quiz_toml
from tests.conftest import PASSWORD, TinyExercise
from worker.bank.spec import ExerciseSpec
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
AT = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)

B, EXERCISE, OWN, BANK, ADMIN, OPEN = "B", "EXERCISE", "OWN", "BANK", "ADMIN", "OPEN"

# Every route, by what it touches. "B" routes load another course's work by a path id; "EXERCISE" routes show or
# change an exercise's work across courses and must narrow it to the caller's courses.
ROUTES: dict[str, str] = {
    # --- the API ---
    "POST /api/auth/login": OPEN,
    "POST /api/auth/logout": OWN,
    "POST /api/auth/password": OWN,
    "GET /api/auth/me": OWN,
    "GET /api/exercises": OWN,
    "GET /api/path": OWN,
    "GET /api/exercises/{slug}": OWN,
    "POST /api/exercises/{slug}/submissions": OWN,
    "POST /api/exercises/{slug}/runs": OWN,
    "GET /api/exercises/{slug}/progress": OWN,
    "GET /api/exercises/{slug}/attempts": OWN,
    "GET /api/exercises/{slug}/notebook": OWN,
    "POST /api/exercises/{slug}/notebook-submissions": OWN,
    "POST /api/exercises/{slug}/quiz": OWN,
    "GET /api/exercises/{slug}/draft": OWN,
    "PUT /api/exercises/{slug}/draft": OWN,
    "DELETE /api/exercises/{slug}/draft": OWN,
    "GET /api/submissions/{submission_id}": B,
    "GET /api/me/submissions": OWN,
    "GET /api/me/progress": OWN,
    "GET /api/submissions/{submission_id}/diff": B,
    "GET /api/submissions/{submission_id}/events": B,
    "GET /api/me/tokens": OWN,
    "POST /api/me/tokens": OWN,
    "POST /api/me/tokens/{token_id}/revoke": OWN,
    "GET /api/courses": OWN,
    "POST /api/courses": BANK,
    "GET /api/courses/{slug}": B,
    "GET /api/courses/{slug}/members": B,
    "POST /api/courses/{slug}/members": B,
    "POST /api/courses/{slug}/invite": B,
    "POST /api/invites/{token}": OPEN,
    "POST /api/courses/{slug}/assignments": B,
    "GET /api/assignments/{assignment_id}": B,
    "PUT /api/assignments/{assignment_id}": B,
    "GET /api/assignments/{assignment_id}/exercises/{slug}/leaderboard": B,
    "GET /api/assignments/{assignment_id}/extensions": B,
    "POST /api/assignments/{assignment_id}/extensions": B,
    "POST /api/assignments/{assignment_id}/start": B,
    "GET /api/assignments/{assignment_id}/drafts": B,
    "POST /api/extensions/{extension_id}/revoke": B,
    "GET /api/courses/{slug}/gradebook": B,
    "GET /api/courses/{slug}/gradebook.csv": B,
    "GET /api/courses/{slug}/grades/me": B,
    "GET /api/courses/{slug}/overrides": B,
    "POST /api/courses/{slug}/overrides": B,
    "POST /api/overrides/{override_id}/revert": B,
    "POST /api/courses/{slug}/roster/sync": B,
    "POST /api/instructor/preview": BANK,
    "GET /api/instructor/exercises": BANK,
    "POST /api/instructor/exercises/{slug}/versions/{number}/publish": BANK,
    "POST /api/instructor/exercises/{slug}/unpublish": BANK,
    "GET /api/instructor/exercises/{slug}/submissions": EXERCISE,
    "GET /api/instructor/submissions/{submission_id}/history": B,
    "GET /api/instructor/checks/{check_id}": BANK,
    "GET /api/instructor/regrades/{regrade_id}": BANK,
    "GET /api/instructor/exercises/{slug}/insights": EXERCISE,
    "GET /api/instructor/exercises/{slug}/insights.csv": EXERCISE,
    "POST /api/submissions/{submission_id}/regrade-request": B,
    "GET /api/regrade-requests": EXERCISE,
    "GET /api/regrade-requests/{request_id}": B,
    "POST /api/regrade-requests/{request_id}/messages": B,
    "POST /api/instructor/exercises/{slug}/similarity": EXERCISE,
    "GET /api/instructor/exercises/{slug}/similarity": EXERCISE,
    "POST /api/assignments/{assignment_id}/similarity": B,
    "GET /api/assignments/{assignment_id}/similarity": B,
    "GET /api/similarity/runs/{run_id}": B,
    "GET /api/similarity/runs/{run_id}/pairs/{rank}": B,
    "GET /api/instructor/exercises/{slug}/grades": EXERCISE,
    "POST /api/instructor/exercises/{slug}/grades/release": EXERCISE,
    "GET /api/grades/{grade_id}": B,
    "PUT /api/grades/{grade_id}": B,
    "GET /api/admin/stats": ADMIN,
    "GET /api/admin/liveness": ADMIN,
    "GET /api/admin/users": ADMIN,
    "POST /api/admin/users/{user_id}/erase": ADMIN,
    "GET /api/admin/audit": ADMIN,
    "GET /api/admin/audit.csv": ADMIN,
    "GET /api/me/export": OWN,
    "POST /api/courses/{slug}/copy": B,
    "POST /api/courses/{slug}/archive": B,
    "DELETE /api/courses/{slug}/archive": ADMIN,  # unarchiving is an admin's, whatever the course
    "GET /api/courses/{slug}/audit": B,
    "GET /api/courses/{slug}/audit.csv": B,
    "POST /api/admin/users": ADMIN,
    "POST /api/admin/users/{user_id}": ADMIN,
    "GET /api/admin/lti/platforms": ADMIN,
    "POST /api/admin/lti/platforms": ADMIN,
    "GET /api/admin/lti/platforms/{platform_id}": ADMIN,
    "DELETE /api/admin/lti/platforms/{platform_id}": ADMIN,
    "POST /api/admin/lti/platforms/{platform_id}/deployments": ADMIN,
    "DELETE /api/admin/lti/platforms/{platform_id}/deployments/{deployment_id}": ADMIN,
    "PATCH /api/admin/lti/platforms/{platform_id}": ADMIN,
    "POST /api/admin/lti/platforms/{platform_id}/refused-deployments/accept": ADMIN,
    "DELETE /api/admin/lti/platforms/{platform_id}/refused-deployments/{deployment_id}": ADMIN,
    "GET /api/admin/lti/keys": ADMIN,
    "POST /api/admin/lti/keys/rotate": ADMIN,
    "GET /api/admin/lti/outbox": ADMIN,
    "POST /api/admin/lti/outbox/{row_id}/retry": ADMIN,
    "GET /healthz": OPEN,
    "GET /readyz": OPEN,
    "GET /metrics": OPEN,
    "GET /lti/jwks": OPEN,
    # --- the pages ---
    "GET /": OWN,
    "GET /login": OPEN,
    "POST /login": OPEN,
    "POST /logout": OWN,
    "GET /exercises": OWN,
    "GET /exercises/{slug}": OWN,
    "POST /exercises/{slug}/submissions": OWN,
    "GET /exercises/{slug}/history": OWN,
    "GET /courses": OWN,
    "POST /courses": BANK,
    "GET /courses/{slug}": B,
    "GET /join/{token}": OPEN,
    "POST /join/{token}": OPEN,
    "GET /courses/{course_slug}/assignments/{assignment_id}": B,
    "POST /courses/{course_slug}/assignments/{assignment_id}/start": B,
    "GET /courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}": B,
    "POST /courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/submissions": B,
    "GET /courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/insights": B,
    "GET /courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/leaderboard": B,
    "GET /courses/{slug}/manage": B,
    "GET /courses/{slug}/members": B,
    "POST /courses/{slug}/members": B,
    "POST /courses/{slug}/roster/sync": B,
    "POST /courses/{slug}/invite": B,
    "GET /courses/{slug}/assignments/new": B,
    "POST /courses/{slug}/assignments": B,
    "GET /courses/{course_slug}/assignments/{assignment_id}/edit": B,
    "POST /courses/{course_slug}/assignments/{assignment_id}/edit": B,
    "GET /courses/{course_slug}/assignments/{assignment_id}/extensions": B,
    "POST /courses/{course_slug}/assignments/{assignment_id}/extensions": B,
    "POST /courses/{course_slug}/assignments/{assignment_id}/extensions/{extension_id}/revoke": B,
    "GET /courses/{slug}/gradebook": B,
    "POST /courses/{slug}/gradebook/overrides": B,
    "POST /courses/{slug}/gradebook/overrides/{override_id}/revert": B,
    "GET /courses/{slug}/grades": B,
    "GET /instructor": BANK,
    "POST /instructor/upload": BANK,
    "GET /instructor/new": BANK,
    "POST /instructor/new": BANK,
    "GET /instructor/exercises/{slug}": BANK,
    "GET /instructor/exercises/{slug}/versions/{number}": BANK,
    "POST /instructor/exercises/{slug}/versions/{number}/check": BANK,
    "POST /instructor/exercises/{slug}/versions/{number}/publish": BANK,
    "POST /instructor/exercises/{slug}/unpublish": BANK,
    "GET /instructor/exercises/{slug}/versions/{number}/preview": BANK,
    "GET /instructor/exercises/{slug}/submissions": EXERCISE,
    "GET /instructor/submissions/{submission_id}": B,
    "GET /instructor/exercises/{slug}/insights": EXERCISE,
    "POST /instructor/exercises/{slug}/regrade": EXERCISE,
    "GET /instructor/regrades/{regrade_id}": BANK,
    "GET /instructor/exercises/{slug}/similarity": EXERCISE,
    "POST /instructor/exercises/{slug}/similarity": EXERCISE,
    "GET /instructor/assignments/{assignment_id}/similarity": B,
    "POST /instructor/assignments/{assignment_id}/similarity": B,
    "GET /instructor/similarity/{run_id}": B,
    "GET /instructor/similarity/{run_id}/pairs/{rank}": B,
    "GET /instructor/exercises/{slug}/grading": EXERCISE,
    "GET /instructor/exercises/{slug}/grading/next": EXERCISE,
    "POST /instructor/exercises/{slug}/grading/release": EXERCISE,
    "GET /courses/{slug}/assignments/{assignment_id}/grading": B,
    "GET /courses/{slug}/assignments/{assignment_id}/grading/next": B,
    "POST /courses/{slug}/assignments/{assignment_id}/grading/release": B,
    "GET /grading/{grade_id}": B,
    "POST /grading/{grade_id}": B,
    "GET /account": OWN,
    "POST /account/tokens": OWN,
    "POST /account/tokens/{token_id}/revoke": OWN,
    "GET /cli/gpulab-submit.py": OPEN,
    "GET /account/password": OWN,
    "POST /account/password": OWN,
    "GET /admin": ADMIN,
    "GET /admin/grades.csv": ADMIN,
    "GET /admin/users": ADMIN,
    "POST /admin/users/{user_id}/erase": ADMIN,
    "GET /admin/audit": ADMIN,
    "GET /courses/{slug}/audit": B,
    "POST /courses/{slug}/copy": B,
    "POST /courses/{slug}/archive": B,
    "POST /courses/{slug}/unarchive": ADMIN,
    "POST /admin/users": ADMIN,
    "POST /admin/users/{user_id}/role": ADMIN,
    "POST /admin/users/{user_id}/active": ADMIN,
    "POST /admin/users/{user_id}/password": ADMIN,
    "POST /admin/users/import": ADMIN,
    "GET /admin/lti": ADMIN,
    "POST /admin/lti/platforms": ADMIN,
    "POST /admin/lti/platforms/{platform_id}/deployments": ADMIN,
    "POST /admin/lti/platforms/{platform_id}/deployments/remove": ADMIN,
    "POST /admin/lti/platforms/{platform_id}/delete": ADMIN,
    "POST /admin/lti/platforms/{platform_id}/accept-new-deployments": ADMIN,
    "POST /admin/lti/platforms/{platform_id}/refused/accept": ADMIN,
    "POST /admin/lti/platforms/{platform_id}/refused/dismiss": ADMIN,
    "POST /admin/lti/keys/rotate": ADMIN,
    "POST /admin/lti/outbox/{row_id}/retry": ADMIN,
    "GET /regrade-requests": EXERCISE,
    "GET /regrade-requests/{request_id}": B,
    "POST /regrade-requests/{request_id}": B,
    "POST /submissions/{submission_id}/regrade-request": B,
    "GET /lti/register": OPEN,
    "GET /lti/close.js": OPEN,
    "GET /lti/cookie-check": OPEN,
    "GET /lti/login": OPEN,
    "POST /lti/login": OPEN,
    "POST /lti/launch": OPEN,
    "GET /lti/deep-link": OPEN,
    "POST /lti/deep-link": OPEN,
    "POST /lti/deep-link/course": OPEN,
    "GET /docs": OPEN,
    "GET /openapi.json": OPEN,
}

# Where the control (who may) is B's learner, acting on their own work; elsewhere it is B's instructor.
LEARNER_CONTROL = {
    "GET /api/courses/{slug}/grades/me",
    "GET /courses/{slug}/grades",
    "POST /api/submissions/{submission_id}/regrade-request",
    "POST /submissions/{submission_id}/regrade-request",
    "POST /courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/submissions",
    "POST /api/assignments/{assignment_id}/start",
    "POST /courses/{course_slug}/assignments/{assignment_id}/start",
}
# Not asked of the control: a stream that stays open while it waits.
NO_CONTROL = {"GET /api/submissions/{submission_id}/events"}
# Where docs/api.md documents 403 for someone who may not see a run (``SimilarityRunDep``).
RUN_403 = {
    "GET /api/similarity/runs/{run_id}",
    "GET /api/similarity/runs/{run_id}/pairs/{rank}",
    "GET /instructor/similarity/{run_id}",
    "GET /instructor/similarity/{run_id}/pairs/{rank}",
}
# Forms whose empty version is refused as "not found" by the route itself: sent filled in, to everyone.
FORMS: dict[str, Callable[[World], dict[str, str]]] = {
    "POST /courses/{slug}/gradebook/overrides": lambda w: {
        "item_id": str(w.assignment_b.items[0].id), "email": w.learner_b.email, "score_pct": "50", "comment": "x",
    },
}  # fmt: skip
PARAM = re.compile(r"{([a-z_]+)(?::[a-z]+)?}")


@dataclass
class World:
    admin: User
    instructor_a: User
    ta_a: User
    learner_a: User
    outsider: User
    instructor_b: User
    learner_b: User
    course_b: Course
    assignment_b: Assignment
    code: Exercise
    quiz: Exercise
    board: Exercise  # opts in to a leaderboard: B's assignment holds it
    submission_b: Submission
    grade_b: ManualGrade
    request_b: RegradeRequest
    run_b: SimilarityRun
    practice_run: SimilarityRun
    extension_b: Extension
    override_b: GradeOverride
    markers: tuple[str, ...]  # text only B's learners' work (or their practice) holds

    def ids(self, key: str) -> dict[str, str]:
        """Return the path values naming B's work for route ``key``."""
        path = key.split(" ", 1)[1]
        course_path = path.startswith(("/api/courses/{slug}", "/courses/{slug}"))
        quiz_path = "grad" in path  # grading queues: the quiz holds the staff-graded answer
        exercise = self.board if path.endswith("/leaderboard") else self.quiz if quiz_path else self.code
        return {
            "slug": self.course_b.slug if course_path else exercise.slug,
            "course_slug": self.course_b.slug,
            "assignment_id": str(self.assignment_b.id),
            "submission_id": self.submission_b.id,
            "grade_id": str(self.grade_b.id),
            "request_id": str(self.request_b.id),
            "run_id": str(self.run_b.id),
            "rank": "1",
            "extension_id": str(self.extension_b.id),
            "override_id": str(self.override_b.id),
            "number": "1",
            "token": "no-such-invite",
            "token_id": "1",
            "user_id": str(self.learner_b.id),
            "platform_id": "1",
            "deployment_id": "1",
            "row_id": "1",
            "check_id": "1",
            "regrade_id": "1",
        }


def _work(
    db: Session, assignment: Assignment, learner: User, code: Exercise, quiz: Exercise, tag: str
) -> tuple[Submission, Submission, ManualGrade]:
    """Add ``learner``'s code submission and quiz answer under ``assignment``, and the answer's staff grade."""
    graded = submit(db, assignment, learner, code, AT, 2.0, verdict=Verdict.failed)
    graded.code = f"def add(a, b):\n    return a - b  # {tag}-CODE\n"
    assert quiz.current_version is not None
    answer = Submission(
        user_id=learner.id, exercise_version_id=quiz.current_version.id, assignment_id=assignment.id,
        code=json.dumps({"pick": ["b"], "explain": f"{tag}-ANSWER"}), status=SubmissionStatus.graded,
        verdict=Verdict.failed, score=1.0, max_score=4.0, created_at=AT,
    )  # fmt: skip
    db.add(answer)
    db.flush()
    grade = ManualGrade(submission_id=answer.id, exercise_id=quiz.id, question="explain", max_points=3.0,
                        checked=[], comment=f"{tag}-COMMENT", points=1.0, graded_at=AT, revision=1)  # fmt: skip
    db.add(grade)
    db.commit()
    return graded, answer, grade


@pytest.fixture
def world(db_session: Session, make_user: Callable[..., User], tiny_exercise: TinyExercise) -> World:
    db = db_session
    tag = uuid.uuid4().hex[:8]
    admin = make_user(Role.admin)
    instructor_a, instructor_b, outsider = (make_user(Role.instructor) for _ in range(3))
    ta_a, learner_a = make_user(Role.learner), make_user(Role.learner)
    learner_b, learner_b2 = (make_user(Role.learner, email=f"b{i}-{tag}@example.com") for i in (1, 2))
    spec = ExerciseSpec.from_files(f"walkquiz-{tag}", files(quiz_toml()))
    quiz, _ = upsert_exercise(session=db, spec=spec)
    code = tiny_exercise.exercise
    membership.practice_course(session=db)  # practice work belongs to it; its staff list is empty here
    course_a = membership.create_course(session=db, slug=f"a-{tag}", title="Course A", creator=instructor_a)
    course_b = membership.create_course(session=db, slug=f"b-{tag}", title="Course B", creator=instructor_b)
    membership.enroll(session=db, course=course_a, user=ta_a, role=CourseRole.ta)
    membership.enroll(session=db, course=course_a, user=learner_a)
    for learner in (learner_b, learner_b2):
        membership.enroll(session=db, course=course_b, user=learner)
    db.commit()
    window = {"is_published": True, "due_at": AT + timedelta(days=30)}
    assignment_a = add_assignment(db, course_a, "A week", 0, [(code, 1.0), (quiz, 1.0)], **window)
    board = board_exercise(db)
    assignment_b = add_assignment(db, course_b, "B week", 0, [(code, 1.0), (quiz, 1.0), (board, 0.0)], **window)
    measured(db, assignment_b, learner_b, board, 1.0, AT)  # a row whose learner only B's staff may name
    _work(db, assignment_a, learner_a, code, quiz, f"A{tag}")
    submission_b, _, grade_b = _work(db, assignment_b, learner_b, code, quiz, f"B{tag}")
    other_b, _, _ = _work(db, assignment_b, learner_b2, code, quiz, f"B{tag}")
    practice = submit(db, assignment_b, learner_b, code, AT, 1.0, verdict=Verdict.failed)
    practice.assignment_id, practice.code = None, f"# P{tag}-PRACTICE\n"
    request_b = RegradeRequest(user_id=learner_b.id, exercise_id=code.id, assignment_id=assignment_b.id,
                               assignment_key=assignment_b.id, submission_id=submission_b.id)  # fmt: skip
    request_b.messages.append(RegradeMessage(author_id=learner_b.id, action="ask", body=f"B{tag}-REASON"))
    db.add(request_b)
    runs = []
    for where in ({"assignment_id": assignment_b.id}, {"exercise_id": code.id}):
        run = SimilarityRun(
            status="done", params=Params().as_dict(), clusters=[], submissions=2, pairs_found=1, **where
        )
        run.pairs.append(SimilarityPair(rank=1, exercise_id=code.id, submission_a_id=submission_b.id,
                                        submission_b_id=other_b.id, score=0.9, share_a=0.9, share_b=0.9, tokens=40,
                                        fragments={"a": [[0, 10]], "b": [[0, 10]]}))  # fmt: skip
        db.add(run)
        runs.append(run)
    extension_b = Extension(assignment_id=assignment_b.id, user_id=learner_b.id, due_at=AT + timedelta(days=40),
                            reason=f"B{tag}-EXTENSION", granted_by_id=instructor_b.id)  # fmt: skip
    db.add(extension_b)
    override_b = GradeOverride(item_id=assignment_b.items[0].id, user_id=learner_b.id, score_pct=90.0,
                               comment=f"B{tag}-OVERRIDE", created_by_id=instructor_b.id)  # fmt: skip
    db.add(override_b)
    db.commit()
    markers = (learner_b.email, learner_b2.email, f"B{tag}-", f"P{tag}-")
    return World(admin, instructor_a, ta_a, learner_a, outsider, instructor_b, learner_b, course_b, assignment_b,
                 code, quiz, board, submission_b, grade_b, request_b, runs[0], runs[1], extension_b, override_b,
                 markers)  # fmt: skip


def _routes(app: FastAPI) -> Iterator[tuple[str, APIRoute | Any]]:
    from fastapi.routing import iter_route_contexts

    for context in iter_route_contexts(app.routes):
        route = context.route
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                yield f"{method} {PARAM.sub(lambda m: '{' + m.group(1) + '}', route.path)}", route


def _api_operations(app: FastAPI) -> set[str]:
    found = set()
    for path, item in app.openapi()["paths"].items():
        for method in item:
            found.add(f"{method.upper()} {path}")
    return found


def _needs_instructor(route: Any) -> bool:
    """Say whether the route needs a site role (``InstructorDep``/``AdminDep``): a role refusal is its 403."""
    from app.web.deps import AdminDep, InstructorDep

    roles = {typing_args(InstructorDep), typing_args(AdminDep)}

    def walk(dependant: Any) -> bool:
        return any(sub.call in roles or walk(sub) for sub in dependant.dependencies)

    return walk(route.dependant) if hasattr(route, "dependant") else False


def typing_args(annotated: Any) -> Any:
    import typing

    return typing.get_args(annotated)[1].dependency


def _login(client: TestClient, user: User) -> str:
    client.cookies.clear()
    response = client.post("/api/auth/login", json={"email": user.email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/account").text)
    assert match, "no CSRF token on the account page"
    return match.group(1)


def _call(client: TestClient, key: str, values: dict[str, str], csrf: str, form: dict[str, str] | None = None) -> Any:
    method, template = key.split(" ", 1)
    path = PARAM.sub(lambda m: values[m.group(1)], template)
    if method == "GET":
        return client.get(path, follow_redirects=False)
    if template.startswith("/api/"):
        return client.request(method, path, json={}, follow_redirects=False)
    return client.request(method, path, data={"csrf_token": csrf, **(form or {})}, follow_redirects=False)


def _leaks(world: World, text: str) -> list[str]:
    return [m for m in world.markers if m in text]


def test_every_route_is_classified(app: FastAPI) -> None:
    keys = {key for key, _ in _routes(app)}
    api = _api_operations(app)
    assert api <= keys, f"operations of the schema not found among the routes: {sorted(api - keys)}"
    missing = sorted(keys - set(ROUTES))
    assert not missing, f"classify these routes in ROUTES (who may see whose work): {missing}"
    gone = sorted(set(ROUTES) - keys)
    assert not gone, f"ROUTES names routes that no longer exist: {gone}"


def test_another_courses_work_is_not_found_for_anyone_but_its_staff(
    app: FastAPI, client: TestClient, world: World, db_session: Session
) -> None:
    routes = dict(_routes(app))
    walked = [key for key in ROUTES if ROUTES[key] == B]
    assert len(walked) > 40  # the walk covers B's work, not a corner of it
    failures: list[str] = []
    for actor in (world.instructor_a, world.ta_a, world.learner_a, world.outsider):
        csrf = _login(client, actor)
        for key in walked:
            values = world.ids(key)
            response = _call(client, key, values, csrf, FORMS[key](world) if key in FORMS else None)
            allowed = {404}
            if key in RUN_403 or (actor.role is Role.learner and _needs_instructor(routes[key])):
                allowed.add(403)
            if response.status_code not in allowed:
                failures.append(f"{actor.email} {key}: {response.status_code} (wanted {sorted(allowed)})")
            elif _leaks(world, response.text):
                failures.append(f"{actor.email} {key}: the refusal names {_leaks(world, response.text)}")
    assert not failures, "\n".join(failures)
    _b_is_untouched(db_session, world)  # every write above was refused before it changed anything
    # The ids name real rows: B's own staff (or the learner, for their own work) and an admin get past the policy.
    # Archiving closes B for good: the learner's own actions first, and the archive last of its instructor's.
    staff_keys = sorted(
        (k for k in walked if k not in LEARNER_CONTROL | NO_CONTROL), key=lambda k: k.endswith("/archive")
    )
    for control, keys in (
        (world.learner_b, [k for k in walked if k in LEARNER_CONTROL]),
        (world.instructor_b, staff_keys),
        (world.admin, [k for k in walked if k.startswith("GET ") and k not in LEARNER_CONTROL | NO_CONTROL]),
    ):
        csrf = _login(client, control)
        for key in keys:
            response = _call(client, key, world.ids(key), csrf, FORMS[key](world) if key in FORMS else None)
            if response.status_code in (401, 403, 404):
                failures.append(f"control {control.email} {key}: {response.status_code} {response.text[:200]}")
    assert not failures, "\n".join(failures)


def test_exercise_views_show_only_the_callers_courses_and_change_nothing_of_b(
    app: FastAPI, client: TestClient, world: World, db_session: Session
) -> None:
    walked = [key for key in ROUTES if ROUTES[key] == EXERCISE]
    failures: list[str] = []
    for actor in (world.instructor_a, world.ta_a, world.learner_a, world.outsider):
        csrf = _login(client, actor)
        for key in walked:
            for exercise in (world.code, world.quiz):
                values = {**world.ids(key), "slug": exercise.slug}
                form = {"submission_id": world.submission_b.id} if key.endswith("/regrade") else None
                response = _call(client, key, values, csrf, form)
                if response.status_code >= 500:
                    failures.append(f"{actor.email} {key} {exercise.slug}: {response.status_code}")
                if _leaks(world, response.text) or _leaks(world, response.headers.get("location", "")):
                    failures.append(f"{actor.email} {key} {exercise.slug}: shows {_leaks(world, response.text)}")
                if key.endswith("/regrade") and response.status_code not in (403, 404):
                    failures.append(f"{actor.email} re-ran B's submission: {response.status_code}")
                starts = key == "POST /api/instructor/exercises/{slug}/similarity"
                if starts and response.status_code != 403:  # an exercise's check compares practice work: not theirs
                    failures.append(f"{actor.email} started a check of practice work: {response.status_code}")
    assert not failures, "\n".join(failures)
    _b_is_untouched(db_session, world)


def test_other_routes_show_nothing_of_b(app: FastAPI, client: TestClient, world: World, db_session: Session) -> None:
    walked = [key for key in ROUTES if ROUTES[key] in (OWN, BANK, ADMIN, OPEN) and key.startswith("GET ")]
    failures: list[str] = []
    for actor in (world.instructor_a, world.ta_a, world.learner_a, world.outsider):
        _login(client, actor)
        for key in walked:
            if key in ("GET /lti/login",):
                continue  # an OIDC step that redirects to a platform: nothing of ours to show
            response = _call(client, key, world.ids(key), "")
            if ROUTES[key] == ADMIN and response.status_code != 403:
                failures.append(f"{actor.email} {key}: {response.status_code}, not the admins' 403")
            if _leaks(world, response.text):
                failures.append(f"{actor.email} {key}: shows {_leaks(world, response.text)}")
    assert not failures, "\n".join(failures)


def _b_is_untouched(db: Session, world: World) -> None:
    db.expire_all()
    grade = db.get(ManualGrade, world.grade_b.id)
    assert grade is not None and grade.released_at is None and grade.revision == 1
    submission = db.get(Submission, world.submission_b.id)
    assert submission is not None and submission.status is SubmissionStatus.graded
    messages = db.scalar(select(func.count()).where(RegradeMessage.request_id == world.request_b.id))
    assert messages == 1
    of_b = (SimilarityRun.assignment_id == world.assignment_b.id) | (SimilarityRun.exercise_id == world.code.id)
    runs = db.scalar(select(func.count()).select_from(SimilarityRun).where(of_b))
    assert runs == 2
    extension = db.get(Extension, world.extension_b.id)
    override = db.get(GradeOverride, world.override_b.id)
    assert extension is not None and extension.revoked_at is None
    assert override is not None and override.reverted_at is None
    members = db.scalar(select(func.count()).where(CourseMember.course_id == world.course_b.id))
    assert members == 3  # its instructor and two learners


def test_each_instructor_sees_their_own_courses_work_at_exercise_level(client: TestClient, world: World) -> None:
    url = f"/api/instructor/exercises/{world.code.slug}/submissions"
    seen = {}
    for who in (world.instructor_a, world.instructor_b, world.admin):
        _login(client, who)
        seen[who.id] = [(row["user"], row["assignment_id"]) for row in client.get(url).json()]
    a, b = world.learner_a.email, world.learner_b.email
    assert [user for user, _ in seen[world.instructor_a.id]] == [a]  # A's learner's one code submission
    # B's two learners under B's assignment; B's learner's practice is the practice course's work, not B's.
    assert len(seen[world.instructor_b.id]) == 2
    assert all(at == world.assignment_b.id for _, at in seen[world.instructor_b.id])
    assert len(seen[world.admin.id]) == 4 and (b, None) in seen[world.admin.id]


def test_an_admin_puts_an_instructor_on_the_practice_staff_list_to_review_practice_work(
    client: TestClient, world: World
) -> None:
    url = f"/api/instructor/exercises/{world.code.slug}/submissions"
    _login(client, world.outsider)
    assert client.get(url).json() == []  # the site role alone: no course, no practice
    _login(client, world.admin)
    added = client.post(
        f"/api/courses/{membership.PRACTICE_SLUG}/members", json={"csv": f"email,role\n{world.outsider.email},ta\n"}
    )
    assert added.status_code == 200, added.text
    _login(client, world.outsider)
    rows = client.get(url).json()
    assert [(row["user"], row["assignment_id"]) for row in rows] == [(world.learner_b.email, None)]
    run = client.get(f"/api/similarity/runs/{world.practice_run.id}")
    assert run.status_code == 200  # an exercise's run is practice work: theirs to read now
    assert client.get(f"/api/similarity/runs/{world.run_b.id}").status_code == 403  # B's stays B's
