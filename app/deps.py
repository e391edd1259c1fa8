"""FastAPI dependencies: settings, database sessions, the current user and roles, load-or-404, dispatcher.

Contract:
- ``SessionDep`` yields one session per request from ``app.state.sessionmaker`` (built by ``create_app`` from
  its settings), rolls back if the route raises and is closed as soon as the route returns (scope
  ``function``), so a long streaming response does not hold a pooled connection. Routes commit.
- ``SessionFactoryDep`` gives code that outlives the route (the SSE poller) a way to open short sessions.
- ``CurrentUser`` is the logged-in active user or ``Unauthorized("log in first")``; ``require_role`` raises
  ``Forbidden``. ``ExerciseDep`` and ``SubmissionDep`` authenticate first, then load or raise ``NotFound``
  (a submission that is not the learner's own is "not found", never "forbidden").
- ``DispatcherDep`` is the process dispatcher from ``app.dispatch``; tests override ``get_dispatcher_dep``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Annotated, Protocol

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.config import Settings
from app.errors import Forbidden, NotFound, Unauthorized
from app.exercises import get_published
from app.models import Exercise, Role, Submission, User
from app.security import LoginLimiter, RevokedSessions, user_from_session
from app.submissions import get_for_user

SessionFactory = Callable[[], AbstractContextManager[Session]]


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_session_factory(request: Request) -> SessionFactory:
    factory: SessionFactory = request.app.state.sessionmaker
    return factory


SessionFactoryDep = Annotated[SessionFactory, Depends(get_session_factory)]


def get_session(factory: SessionFactoryDep) -> Iterator[Session]:
    """Yield a request's session; roll back if the route fails."""
    with factory() as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def get_login_limiter(request: Request) -> LoginLimiter:
    limiter: LoginLimiter = request.app.state.login_limiter
    return limiter


LoginLimiterDep = Annotated[LoginLimiter, Depends(get_login_limiter)]


def get_revoked_sessions(request: Request) -> RevokedSessions:
    revoked: RevokedSessions = request.app.state.revoked_sessions
    return revoked


RevokedSessionsDep = Annotated[RevokedSessions, Depends(get_revoked_sessions)]


def get_optional_user(request: Request, session: SessionDep, revoked: RevokedSessionsDep) -> User | None:
    return user_from_session(request, session=session, revoked=revoked)


OptionalUser = Annotated[User | None, Depends(get_optional_user)]


def get_current_user(user: OptionalUser) -> User:
    if user is None:
        raise Unauthorized("log in first")
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]


def require_role(*roles: Role) -> Callable[[User], User]:
    """Return a dependency that lets only users with one of ``roles`` through."""
    names = " or ".join(r.value for r in roles)

    def dependency(user: CurrentUser) -> User:
        if user.role not in roles:
            raise Forbidden(f"this needs the {names} role")
        return user

    return dependency


InstructorDep = Annotated[User, Depends(require_role(Role.instructor, Role.admin))]
AdminDep = Annotated[User, Depends(require_role(Role.admin))]


def get_exercise(slug: str, session: SessionDep, _user: CurrentUser) -> Exercise:
    return get_published(session=session, slug=slug)


ExerciseDep = Annotated[Exercise, Depends(get_exercise)]


def get_submission(submission_id: str, session: SessionDep, user: CurrentUser) -> Submission:
    submission = get_for_user(session=session, submission_id=submission_id, user=user)
    if submission is None:
        raise NotFound(f"no submission {submission_id!r}")
    return submission


SubmissionDep = Annotated[Submission, Depends(get_submission)]


class Dispatcher(Protocol):
    """What the API needs of ``app.dispatch.Dispatcher`` (kept here so importing the API loads no worker code)."""

    def dispatch(self, submission_id: str, queue: str) -> None: ...

    def shutdown(self) -> None: ...


def get_dispatcher_dep(request: Request) -> Dispatcher:
    """Return the process dispatcher, remembering it so the lifespan can shut it down."""
    dispatcher: Dispatcher | None = getattr(request.app.state, "dispatcher", None)
    if dispatcher is None:
        from app.dispatch import get_dispatcher  # lazily: grading machinery is not needed to serve pages

        dispatcher = request.app.state.dispatcher = get_dispatcher()
    return dispatcher


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher_dep)]
