"""What the instructor and admin pages share: templates, page guards, form CSRF, flash messages, load-or-404.

Contract:
- ``InstructorPage``/``AdminPage`` let staff through; anyone else gets ``PageError``: a logged-out visitor is
  sent to ``/login?next=...``, a learner gets an HTML 403 page. ``install(app)`` registers that handler.
- ``CsrfForm`` reads the submitted form once and refuses it (403) unless its ``csrf_token`` field is the
  session's token (``app.domain.security.verify_csrf``); every staff template puts ``csrf`` in its forms.
- Templates autoescape with ``StrictUndefined``; learner text (code, e-mails, messages) is never marked safe.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any
from urllib.parse import quote

import jinja2
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import select

from app.domain.authoring import get_version
from app.domain.checks import CheckStarter
from app.domain.models import Exercise, ExerciseVersion, Role, User
from app.domain.schemas import as_utc
from app.domain.security import csrf_token, verify_csrf
from app.web.deps import DispatcherDep, OptionalUser, SessionDep

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=True, undefined=jinja2.StrictUndefined
    )
)


def _when(value: Any) -> str:
    return as_utc(value).strftime("%Y-%m-%d %H:%M UTC") if value else ""


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


templates.env.filters["when"] = _when
templates.env.filters["num"] = _num
templates.env.globals["csrf_token"] = csrf_token


class PageError(Exception):
    """A staff page refused: ``status`` 401 (send to login), 403 or 404, with a message for the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def page_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PageError)
    if exc.status == 401:
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
    title = "Not allowed" if exc.status == 403 else "Not found"
    user = getattr(request.state, "page_user", None)
    return render(request, "instructor/error.html", status_code=exc.status, user=user, title=title, message=exc.message)


def install(app: FastAPI) -> None:
    """Answer ``PageError`` with a redirect to the login page or an HTML error page."""
    app.add_exception_handler(PageError, page_error)


def _page_guard(*roles: Role) -> Any:
    names = " or ".join(r.value for r in roles)

    async def dependency(request: Request, user: OptionalUser) -> User:
        if user is None:
            raise PageError(401, "log in first")
        # A detached copy for the error page: the request's session is rolled back and closed before it renders.
        request.state.page_user = SimpleNamespace(email=user.email, role=user.role)
        if user.role not in roles:
            raise PageError(403, f"This page needs the {names} role.")
        return user

    return dependency


InstructorPage = Annotated[User, Depends(_page_guard(Role.instructor, Role.admin))]
AdminPage = Annotated[User, Depends(_page_guard(Role.admin))]


async def _csrf_form(request: Request) -> None:
    form = await request.form()
    token = form.get("csrf_token")
    verify_csrf(request, token if isinstance(token, str) else None)


CsrfForm = Depends(_csrf_form)


def flash(request: Request, text: str, kind: str = "ok") -> None:
    """Show ``text`` once on the next staff page."""
    request.session.setdefault("flash", [])
    request.session["flash"] = [*request.session["flash"], [kind, text]][-5:]


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a staff template with the CSRF token and pending flash messages."""
    flashes = request.session.pop("flash", []) if "session" in request.scope else []
    context.setdefault("csrf", csrf_token(request))
    return templates.TemplateResponse(request, name, {"flashes": flashes, **context}, status_code=status_code)


def redirect(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def page_exercise(slug: str, session: SessionDep, _staff: InstructorPage) -> Exercise:
    exercise = session.scalar(select(Exercise).where(Exercise.slug == slug))
    if exercise is None:
        raise PageError(404, f"No exercise called {slug!r}.")
    return exercise


PageExercise = Annotated[Exercise, Depends(page_exercise)]


def page_version(number: int, exercise: PageExercise, session: SessionDep) -> ExerciseVersion:
    version = get_version(session=session, exercise=exercise, number=number)
    if version is None:
        raise PageError(404, f"{exercise.slug} has no version {number}.")
    return version


PageVersion = Annotated[ExerciseVersion, Depends(page_version)]


async def get_check_starter(dispatcher: DispatcherDep) -> CheckStarter:
    """Return the process dispatcher as what starts checks (a worker in Celery mode, a thread here otherwise)."""
    if not isinstance(dispatcher, CheckStarter):
        raise TypeError(f"{type(dispatcher).__name__} cannot start checks")
    return dispatcher


CheckStarterDep = Annotated[CheckStarter, Depends(get_check_starter)]
