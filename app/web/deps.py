"""FastAPI dependencies: settings, database sessions, the current user and roles, load-or-404, dispatcher.

Contract:
- ``SessionDep`` yields one session per request from ``app.state.sessionmaker`` (built by ``create_app`` from
  its settings), rolls back if the route raises and is closed as soon as the route returns (scope
  ``function``), so a long streaming response does not hold a pooled connection. Routes commit.
- ``SessionFactoryDep`` gives code that outlives the route (the SSE poller) a way to open short sessions.
- Under ``/api/`` an ``Authorization: Bearer`` access token (``app.domain.accounts.tokens``) authenticates instead of
the
  session cookie (which is then ignored); elsewhere it is ignored. An unknown or revoked token is ``Unauthorized``;
  a token is ``Forbidden`` where ``required_scope`` says it needs a scope it lacks, or on ``TOKENLESS_PATHS``
  (logging in and out, changing the password, managing tokens). The scope comes from the route: ``staff`` for one
  that depends on a staff dependency (``STAFF_DEPENDENCIES``) or checks the role inside (``STAFF_PATHS``), else
  ``read`` for GET, ``submit`` for the learner's own writes (``SUBMIT_PATHS``), ``staff`` for every other write. A
  token without ``staff`` does not carry its user's staff rights to ``SubmissionDep`` (only their own submissions).
- ``CurrentUser`` is the logged-in active user or ``Unauthorized("log in first")``; ``require_role`` raises
  ``Forbidden``. API routes and pages use the same ones: ``app.web.errors`` answers JSON or HTML by path (a
  page's ``Unauthorized`` becomes the log-in redirect). ``request.state.user`` keeps a detached copy of the
  user (``MeOut``) for an error page, which renders after the request's session is rolled back.
- Load-or-404, defined once for the API and the pages: each authenticates (and authorises) first, then loads
  or raises ``NotFound`` (at once, without a query, for a slug no exercise can have or an id with a NUL
  character, which PostgreSQL text cannot hold). Who may see learners' work is ``app.domain.courses.policy``'s
  rule (staff rights per course), asked here and nowhere else in the web side. Learners: ``ExerciseDep``
  (published, and open to them: the practice catalogue or a course of theirs), ``SubmissionDep`` (their own, or
  for staff one of a course they staff: another's is "not found", never "forbidden"). Staff: ``StaffExerciseDep``
  (any state: the bank), ``StaffVersionDep``, ``StaffSubmissionDep`` (a submission of a course they staff),
  ``CheckDep``, ``RegradeDep``, ``GradeDep`` (a staff grade they may grade), ``RegradeRequestDep`` (its learner or
  its course's staff), ``SimilarityRunDep``/``SimilarityPairDep`` (``Forbidden`` for anyone but its course's
  staff), and ``WorkScopeDep``: the courses whose work an exercise-level list may show them. Admins:
  ``UserDep``. Courses: ``CourseDep`` (a member, or an admin; an outsider gets "not found"), ``CourseStaffDep``
  (its instructors and TAs), ``CourseInstructorDep`` (its instructors: invite links), ``AssignmentDep``
  (published, or any for its staff), ``AssignmentStaffDep``, ``ExtensionDep`` (staff of its course). Integer ids are
  ``RowId``: 1..2**31-1 (every id and version number is an ``Integer`` column, 32 bits in PostgreSQL), so an
  id no column can hold is a 422, never a 500.
- ``DispatcherDep`` is the process dispatcher (``app.domain.dispatcher``'s one port; ``app.jobs.dispatch`` makes
  it): it grades, runs examples, starts checks and similarity runs. Tests override ``get_dispatcher_dep``.
- ``SubmitDep`` is the submit use case, written once for every way code arrives (the API, a notebook, the two
  forms without JavaScript): the gate, the stored submission, the commit, then the hand-over to grading.

Cost: FastAPI runs every sync dependency in a threadpool thread (one hand-off each, and behind the GIL a busy
process pays dearly for every hand-off). Dependencies that do no blocking I/O are therefore ``async def`` and
run on the event loop; database work stays in the threadpool, one hand-off per step: the session is opened on
the loop (a ``Session`` connects on its first query) and closed in one hand-off, the user is looked up in one.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Annotated, Any

import anyio
import httpx
from fastapi import Depends, Path, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.domain.accounts.passwords import LoginLimiter
from app.domain.accounts.tokens import Scope, user_for_token
from app.domain.courses import coursework, membership, policy, timing
from app.domain.courses.policy import WorkScope
from app.domain.dispatcher import Dispatcher
from app.domain.exercises.authoring import get_version
from app.domain.exercises.bank import get_published
from app.domain.lti import platforms, scores
from app.domain.models import (
    Assignment,
    Course,
    CourseRole,
    Exercise,
    ExerciseCheck,
    ExerciseVersion,
    Extension,
    LtiPlatform,
    LtiScoreOutbox,
    ManualGrade,
    Regrade,
    RegradeRequest,
    Role,
    SimilarityPair,
    SimilarityRun,
    Submission,
    User,
    utcnow,
)
from app.domain.review import regrade_requests, similarity_runs, staff_grading
from app.domain.submissions.lifecycle import create_submission
from app.settings import Settings
from app.web.schemas.auth import MeOut
from app.web.sessions import SESSION_COOKIE, UNSAFE_METHODS, client_ip, user_from_session
from worker.bank.spec import SLUG_RE
from worker.core.errors import Forbidden, NotFound, PasswordChangeRequired, Unauthorized

log = logging.getLogger(__name__)
SessionFactory = Callable[[], AbstractContextManager[Session]]


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


async def get_session_factory(request: Request) -> SessionFactory:
    factory: SessionFactory = request.app.state.sessionmaker
    return factory


SessionFactoryDep = Annotated[SessionFactory, Depends(get_session_factory)]


def _end_session(
    manager: AbstractContextManager[Session],
    session: Session,
    exc_type: type[BaseException] | None = None,
    exc: BaseException | None = None,
    tb: TracebackType | None = None,
) -> None:
    """Roll back if the route failed, then leave the factory's context (closing the session): one hand-off."""
    try:
        if exc is not None:
            session.rollback()
    finally:
        manager.__exit__(exc_type, exc, tb)


def _ends_without_io(session: Session) -> bool:
    """Say whether closing ``session`` cannot block: SQLite, whose connection goes back to the pool in memory.

    Returning a pysqlite connection rolls it back, a no-op after reads (pysqlite opens no transaction for a
    SELECT) and a local, lock-free discard after a failed write; a PostgreSQL rollback is a network round trip.
    """
    return session.get_bind().dialect.name == "sqlite"


async def get_session(factory: SessionFactoryDep) -> AsyncIterator[Session]:
    """Yield a request's session; roll back if the route fails.

    Opened on the event loop (no I/O until the first query). Rollback and close run on the loop for SQLite (see
    ``_ends_without_io``), else in the threadpool, shielded from cancellation so the connection always goes back.
    """
    manager = factory()
    session = manager.__enter__()
    try:
        yield session
    except BaseException as exc:
        if _ends_without_io(session):
            _end_session(manager, session, type(exc), exc, exc.__traceback__)
        else:
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(_end_session, manager, session, type(exc), exc, exc.__traceback__)
        raise
    else:
        if _ends_without_io(session):
            _end_session(manager, session)
        else:
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(_end_session, manager, session)


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


async def get_login_limiter(request: Request) -> LoginLimiter:
    limiter: LoginLimiter = request.app.state.login_limiter
    return limiter


LoginLimiterDep = Annotated[LoginLimiter, Depends(get_login_limiter)]


bearer_token = HTTPBearer(
    auto_error=False,
    scheme_name="accessToken",
    description="A personal access token (made on the account page, or POST /api/me/tokens while logged in): "
    "`Authorization: Bearer gpl_...`. API paths only; its scopes decide which calls it may make.",
)
session_cookie = APIKeyCookie(
    name=SESSION_COOKIE, auto_error=False, scheme_name="sessionCookie", description="The cookie a log-in sets"
)
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_token)]
# Declared for the OpenAPI schema only; the session middleware reads the cookie.
SessionCookieDep = Annotated[str | None, Depends(session_cookie)]


# A message, not a secret.
TOKEN_REFUSED = "an access token cannot be used here: log in with your password (tokens are API-only)"  # noqa: S105


def _user_from_token(request: Request, session: Session, token: str) -> User:
    """Return the token's owner for this call, or raise: 401 for an unknown or revoked token, 403 out of scope."""
    needed = required_scope(request)
    if needed is None:
        raise Forbidden(TOKEN_REFUSED)
    found = user_for_token(session=session, token=token)
    if found is None:
        raise Unauthorized("the access token is unknown or was revoked")
    user, api_token, recorded = found
    scopes = frozenset(api_token.scopes)
    if needed not in scopes:
        raise Forbidden(
            f"this call needs an access token with the {needed.value!r} scope (this one has: "
            f"{', '.join(sorted(scopes))})"
        )
    if recorded:
        session.commit()  # its last use; nothing else is pending before the route runs
    request.state.token_scopes = scopes
    return user


async def get_optional_user(
    request: Request, session: SessionDep, credentials: BearerDep, _cookie: SessionCookieDep
) -> User | None:
    """Return the user of the session cookie, or under ``/api/`` of a bearer token (which then wins)."""
    request.state.token_scopes = None  # None: a session, with its user's whole role
    if credentials is not None and request.url.path.startswith("/api/"):
        user: User | None = await run_in_threadpool(_user_from_token, request, session, credentials.credentials)
    else:
        user = await run_in_threadpool(user_from_session, request, session=session)
    request.state.user = MeOut.of(user) if user else None  # a copy: the row cannot load once the session is gone
    return user


OptionalUser = Annotated[User | None, Depends(get_optional_user)]


async def refuse_token(credentials: BearerDep) -> None:
    """Refuse a bearer token on a route that asks for no user (logging in and out): a token never starts or ends a
    session, and a request with one ignores the session cookie it carries (``TOKENLESS_PATHS``)."""
    if credentials is not None:
        raise Forbidden(TOKEN_REFUSED)


NoTokenDep = Depends(refuse_token)


async def get_logged_in_user(user: OptionalUser) -> User:
    """Return the logged-in user, also one who must still change a one-time password (who am I, the change)."""
    if user is None:
        raise Unauthorized("log in first")
    return user


LoggedInUser = Annotated[User, Depends(get_logged_in_user)]


async def get_current_user(user: LoggedInUser) -> User:
    """Return the logged-in user, once any one-time password is changed (``PasswordChangeRequired`` before)."""
    if user.must_change_password:
        raise PasswordChangeRequired(
            "your password is a one-time password: choose your own first (POST /api/auth/password, or the page "
            "/account/password)"
        )
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]


def require_role(*roles: Role) -> Callable[[User], Coroutine[Any, Any, User]]:
    """Return an (async) dependency that lets only users with one of ``roles`` through."""
    names = " or ".join(r.value for r in roles)

    async def dependency(user: CurrentUser) -> User:
        if user.role not in roles:
            raise Forbidden(f"this needs the {names} role")
        return user

    return dependency


InstructorDep = Annotated[User, Depends(require_role(Role.instructor, Role.admin))]
AdminDep = Annotated[User, Depends(require_role(Role.admin))]


def _no_such_exercise(slug: str) -> bool:
    return SLUG_RE.match(slug) is None


def _no_such_submission(submission_id: str) -> bool:
    return "\x00" in submission_id


def _page_assignment(request: Request) -> int | None:
    """Return the assignment an exercise is read under: its path's, or ``?assignment_id=`` (``?assignment=``)."""
    raw = request.path_params.get("assignment_id") or request.query_params.get("assignment_id") or (
        request.query_params.get("assignment")
    )  # fmt: skip
    return int(raw) if isinstance(raw, str | int) and str(raw).isdigit() and len(str(raw)) < 12 else None


def get_exercise(slug: str, session: SessionDep, user: CurrentUser, request: Request) -> Exercise:
    if _no_such_exercise(slug):
        raise NotFound(f"no exercise called {slug!r}")
    exercise = get_published(session=session, slug=slug)
    membership.require_exercise_access(session=session, user=user, exercise=exercise)  # practice, or a course of theirs
    if request.method not in UNSAFE_METHODS:
        # A learner in an exam reads exercises only under it; their writes meet the same rule in the domain's gates
        # (submissions, drafts, example runs), which know the assignment a body names.
        timing.lockout(session=session, user=user, assignment_id=_page_assignment(request), now=utcnow())
    return exercise


ExerciseDep = Annotated[Exercise, Depends(get_exercise)]


def get_submission(request: Request, submission_id: str, session: SessionDep, user: CurrentUser) -> Submission:
    if _no_such_submission(submission_id):
        raise NotFound(f"no submission {submission_id!r}")
    submission = session.get(Submission, submission_id)
    if submission is None or not (
        submission.user_id == user.id
        or (_acts_as_staff(request) and policy.may_view_work(session=session, user=user, work=submission))
    ):
        raise NotFound(f"no submission {submission_id!r}")  # another's is "not found", never "forbidden"
    return submission


SubmissionDep = Annotated[Submission, Depends(get_submission)]

MAX_ROW_ID = 2**31 - 1  # the id columns are Integer: PostgreSQL's int4 (a larger bind is a DataError, a 500)
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a row id: 1 to 2**31-1")]


async def get_work_scope(session: SessionDep, user: CurrentUser) -> WorkScope:
    """Return the courses whose learners' work the current user sees (``app.domain.courses.policy``)."""
    return await run_in_threadpool(policy.work_scope, session=session, user=user)


WorkScopeDep = Annotated[WorkScope, Depends(get_work_scope)]


def get_staff_exercise(slug: str, session: SessionDep, _staff: InstructorDep) -> Exercise:
    if _no_such_exercise(slug):
        raise NotFound(f"no exercise called {slug!r}")
    exercise = session.scalar(select(Exercise).where(Exercise.slug == slug))
    if exercise is None:
        raise NotFound(f"no exercise called {slug!r}")
    return exercise


StaffExerciseDep = Annotated[Exercise, Depends(get_staff_exercise)]


def get_staff_version(number: RowId, exercise: StaffExerciseDep, session: SessionDep) -> ExerciseVersion:
    version = get_version(session=session, exercise=exercise, number=number)
    if version is None:
        raise NotFound(f"{exercise.slug} has no version {number}")
    return version


StaffVersionDep = Annotated[ExerciseVersion, Depends(get_staff_version)]


def get_staff_submission(submission_id: str, session: SessionDep, staff: InstructorDep) -> Submission:
    if _no_such_submission(submission_id):
        raise NotFound(f"no submission {submission_id!r}")
    submission = session.get(Submission, submission_id)
    if submission is None or not policy.may_view_work(session=session, user=staff, work=submission):
        raise NotFound(f"no submission {submission_id!r}")
    return submission


StaffSubmissionDep = Annotated[Submission, Depends(get_staff_submission)]


def get_check(check_id: RowId, session: SessionDep, _staff: InstructorDep) -> ExerciseCheck:
    session.expire_all()  # checks run in another thread or process: never answer from this session's cache
    check = session.get(ExerciseCheck, check_id)
    if check is None:
        raise NotFound(f"no check {check_id}")
    return check


CheckDep = Annotated[ExerciseCheck, Depends(get_check)]


def get_regrade(regrade_id: RowId, session: SessionDep, _staff: InstructorDep) -> Regrade:
    job = session.get(Regrade, regrade_id)
    if job is None:
        raise NotFound(f"no regrade {regrade_id}")
    return job


RegradeDep = Annotated[Regrade, Depends(get_regrade)]


def get_grade(grade_id: RowId, session: SessionDep, user: CurrentUser) -> ManualGrade:
    return staff_grading.get_grade(session=session, grade_id=grade_id, user=user)  # NotFound unless they may grade it


GradeDep = Annotated[ManualGrade, Depends(get_grade)]


def get_regrade_request(request_id: RowId, session: SessionDep, user: CurrentUser) -> RegradeRequest:
    return regrade_requests.get_request(session=session, request_id=request_id, user=user)  # its learner or staff


RegradeRequestDep = Annotated[RegradeRequest, Depends(get_regrade_request)]


def get_similarity_run(run_id: RowId, session: SessionDep, user: CurrentUser) -> SimilarityRun:
    session.expire_all()  # runs are carried out in another thread or process: never answer from the cache
    run = session.get(SimilarityRun, run_id)
    if run is None:
        raise NotFound(f"no similarity run {run_id}")
    similarity_runs.require_viewer(session=session, run=run, user=user)  # Forbidden: see docs/api.md
    return run


SimilarityRunDep = Annotated[SimilarityRun, Depends(get_similarity_run)]
Rank = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a pair's rank in its run: 1 is the most similar")]


def get_similarity_pair(run: SimilarityRunDep, rank: Rank, session: SessionDep) -> SimilarityPair:
    pair = session.scalar(select(SimilarityPair).where(SimilarityPair.run_id == run.id, SimilarityPair.rank == rank))
    if pair is None:
        raise NotFound(f"similarity run {run.id} has no pair ranked {rank}")
    return pair


SimilarityPairDep = Annotated[SimilarityPair, Depends(get_similarity_pair)]


def get_user(user_id: RowId, session: SessionDep, _admin: AdminDep) -> User:
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"no user {user_id}")
    return user


UserDep = Annotated[User, Depends(get_user)]


@dataclass(frozen=True)
class CourseAccess:
    """A course and the role the current user has in it (an admin counts as its instructor)."""

    course: Course
    role: CourseRole
    user: User

    @property
    def is_staff(self) -> bool:
        return membership.is_staff(self.role)


def get_course_access(slug: str, session: SessionDep, user: CurrentUser) -> CourseAccess:
    if _no_such_exercise(slug):  # the same slug rules: a NUL or an overlong slug names nothing
        raise NotFound(f"no course called {slug!r}")
    course, role = membership.get_course(session=session, slug=slug, user=user)
    return CourseAccess(course=course, role=role, user=user)


CourseDep = Annotated[CourseAccess, Depends(get_course_access)]


def get_course_staff(access: CourseDep, session: SessionDep) -> CourseAccess:
    membership.require_course_role(session=session, course=access.course, user=access.user, roles=membership.STAFF)
    return access


CourseStaffDep = Annotated[CourseAccess, Depends(get_course_staff)]


def get_course_instructor(access: CourseDep, session: SessionDep) -> CourseAccess:
    membership.require_course_role(
        session=session, course=access.course, user=access.user, roles=(CourseRole.instructor,)
    )
    return access


CourseInstructorDep = Annotated[CourseAccess, Depends(get_course_instructor)]  # what TAs may not: invite links


@dataclass(frozen=True)
class AssignmentAccess(CourseAccess):
    """An assignment the current user may see, with its course and their role there."""

    assignment: Assignment


def get_assignment_access(assignment_id: RowId, session: SessionDep, user: CurrentUser) -> AssignmentAccess:
    assignment = session.get(Assignment, assignment_id)
    role = policy.assignment_role(session=session, user=user, assignment=assignment) if assignment else None
    if assignment is None or role is None:
        raise NotFound(f"no assignment {assignment_id}")  # what an outsider cannot see does not exist for them
    return AssignmentAccess(assignment=assignment, course=assignment.course, role=role, user=user)


AssignmentDep = Annotated[AssignmentAccess, Depends(get_assignment_access)]


def get_assignment_staff(access: AssignmentDep) -> AssignmentAccess:
    if not access.is_staff:
        raise Forbidden("this needs an instructor or a TA of the course")
    return access


AssignmentStaffDep = Annotated[AssignmentAccess, Depends(get_assignment_staff)]


def get_extension(extension_id: RowId, session: SessionDep, user: CurrentUser) -> Extension:
    extension = session.get(Extension, extension_id)
    assignment = session.get(Assignment, extension.assignment_id) if extension else None
    if extension is None or assignment is None or not policy.may_grade(session=session, user=user, work=assignment):
        raise NotFound(f"no extension {extension_id}")
    return extension


ExtensionDep = Annotated[Extension, Depends(get_extension)]


def _start_dispatcher(request: Request) -> Dispatcher:
    from app.jobs.dispatch import get_dispatcher  # lazily: grading machinery is not needed to serve pages

    dispatcher: Dispatcher = get_dispatcher()  # process-wide and locked: concurrent first calls share one
    request.app.state.dispatcher = dispatcher
    return dispatcher


async def get_dispatcher_dep(request: Request) -> Dispatcher:
    """Return the process dispatcher, remembering it so the lifespan can shut it down."""
    dispatcher: Dispatcher | None = getattr(request.app.state, "dispatcher", None)
    if dispatcher is None:  # first use without the lifespan: imports and starts grading, off the event loop
        dispatcher = await run_in_threadpool(_start_dispatcher, request)
    return dispatcher


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher_dep)]


def dispatch_committed(dispatcher: Dispatcher, submission: Submission) -> None:
    """Hand a committed submission to grading; a failed hand-over leaves it queued for recovery."""
    queue = submission.exercise_version.queue
    try:
        dispatcher.dispatch(submission.id, queue)
    except Exception:
        # The row is committed and queued: the sweeper sends it once the broker is back, so accept it anyway.
        log.exception("could not dispatch submission %s to %s; it stays queued", submission.id, queue)


@dataclass
class Submitter:
    """The submit use case: gate, store, commit, then hand to grading (the commit is the use case's own)."""

    session: Session
    settings: Settings
    dispatcher: Dispatcher
    client_ip: str | None = None  # the request's address: a timed assignment's networks are checked against it

    def __call__(self, *, user: User, exercise: Exercise, code: str, assignment_id: int | None) -> Submission:
        """Pass ``code`` through the gate of ``assignment_id`` (or practice), store it queued and dispatch it."""
        under = coursework.gate_submission(
            session=self.session, assignment_id=assignment_id, exercise=exercise, user=user, client_ip=self.client_ip
        )
        submission = create_submission(
            session=self.session, user=user, exercise=exercise, code=code, max_bytes=self.settings.max_code_bytes,
            assignment_id=under,
        )  # fmt: skip
        self.session.commit()
        dispatch_committed(self.dispatcher, submission)
        return submission


async def get_submitter(
    session: SessionDep, settings: SettingsDep, dispatcher: DispatcherDep, request: Request
) -> Submitter:
    return Submitter(session, settings, dispatcher, client_ip(request))


SubmitDep = Annotated[Submitter, Depends(get_submitter)]


# --- which calls an access token may make ----------------------------------------------------------------------

# Paths where a token is never accepted: logging in and out, changing the password, and managing tokens (a token
# cannot make tokens, nor choose a password).
TOKENLESS_PATHS = ("/api/auth/login", "/api/auth/logout", "/api/auth/password", "/api/me/tokens")
# The learner's own writes, allowed by the ``submit`` scope; every other state-changing call needs ``staff``.
SUBMIT_PATHS = frozenset({
    "/api/exercises/{slug}/submissions",
    "/api/exercises/{slug}/notebook-submissions",
    "/api/exercises/{slug}/runs",
    "/api/exercises/{slug}/quiz",
    "/api/exercises/{slug}/draft",
    "/api/assignments/{assignment_id}/start",
    "/api/submissions/{submission_id}/regrade-request",
})  # fmt: skip
# Staff's routes that check the role inside (a grading, a similarity run): ``staff``, whatever the method.
STAFF_PATHS = frozenset({
    "/api/grades/{grade_id}",
    "/api/similarity/runs/{run_id}",
    "/api/similarity/runs/{run_id}/pairs/{rank}",
})  # fmt: skip
# A route that depends on one of these is staff's: a token needs ``staff`` for it, whatever its method.
STAFF_DEPENDENCIES: frozenset[Callable[..., object]] = frozenset({
    typing.get_args(InstructorDep)[1].dependency,
    typing.get_args(AdminDep)[1].dependency,
    get_staff_exercise, get_staff_version, get_staff_submission, get_check, get_regrade, get_user,
    get_course_staff, get_assignment_staff, get_extension, get_grade, get_similarity_run, get_work_scope,
})  # fmt: skip
_staff_routes: dict[int, bool] = {}


def _depends_on_staff(dependant: Dependant) -> bool:
    return any(sub.call in STAFF_DEPENDENCIES or _depends_on_staff(sub) for sub in dependant.dependencies)


def required_scope(request: Request) -> Scope | None:
    """Return the scope a token needs for this request's route, or None where no token is accepted."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    if path.startswith(TOKENLESS_PATHS):
        return None
    if path in STAFF_PATHS:
        return Scope.staff
    dependant = getattr(route, "dependant", None)
    if dependant is not None:
        staff = _staff_routes.get(id(route))
        if staff is None:
            staff = _staff_routes[id(route)] = _depends_on_staff(dependant)
        if staff:
            return Scope.staff
    if request.method in ("GET", "HEAD"):
        return Scope.read
    return Scope.submit if path in SUBMIT_PATHS else Scope.staff


def _acts_as_staff(request: Request) -> bool:
    """Say whether this request may use its user's staff rights: a session, or a token with the staff scope."""
    scopes = getattr(request.state, "token_scopes", None)
    return scopes is None or Scope.staff in scopes


# --- the LTI admin's rows ---------------------------------------------------------------------------------------


def get_platform(platform_id: RowId, session: SessionDep, _admin: AdminDep) -> LtiPlatform:
    return platforms.get(session=session, platform_id=platform_id)


PlatformDep = Annotated[LtiPlatform, Depends(get_platform)]


def get_outbox_row(row_id: RowId, session: SessionDep, _admin: AdminDep) -> LtiScoreOutbox:
    return scores.unsent(session=session, row_id=row_id)


OutboxRowDep = Annotated[LtiScoreOutbox, Depends(get_outbox_row)]


# --- the LMS roster's HTTP client ------------------------------------------------------------------------------

ROSTER_HTTP_TIMEOUT_S = 15.0


def get_roster_http() -> Iterator[httpx.Client]:
    """The HTTP client the sync reads the platforms with, closed after the request."""
    with httpx.Client(timeout=ROSTER_HTTP_TIMEOUT_S, follow_redirects=False) as client:
        yield client


RosterHttpDep = Annotated[httpx.Client, Depends(get_roster_http)]
