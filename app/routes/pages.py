"""Server-rendered pages: log in, the exercise list, and one exercise with its editor and live result.

Contract: every page but ``/login`` needs a session and redirects there without one. Templates autoescape;
the only markup inserted unescaped is the prompt HTML, which ``app.markdown`` has sanitised. Learner text
reaches the page through autoescaped template variables or through ``textContent`` in ``exercise.js``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import jinja2
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from app.deps import OptionalUser, SessionDep
from app.errors import NotFound
from app.exercises import get_published, list_published
from app.schemas import ExerciseDetail, ExerciseSummary
from app.submissions import latest_for_user

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=True, undefined=jinja2.StrictUndefined
    )
)
router = APIRouter(include_in_schema=False)


def safe_next(path: str) -> str:
    """Return ``path`` if it is a path on this site, else ``/exercises`` (no open redirect via ``?next=``)."""
    if path.startswith("/") and not path.startswith("//") and "\\" not in path and ":" not in path.split("?")[0]:
        return path
    return "/exercises"


def _to_login(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)


def _render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code)


@router.get("/")
def home(user: OptionalUser) -> Response:
    return RedirectResponse("/exercises" if user else "/login", status_code=303)


@router.get("/login")
def login_page(request: Request, user: OptionalUser, next_path: Annotated[str, Query(alias="next")] = "") -> Response:
    target = safe_next(next_path)
    if user:
        return RedirectResponse(target, status_code=303)
    return _render(request, "login.html", user=None, next=target)


@router.get("/exercises")
def exercises_page(request: Request, user: OptionalUser, session: SessionDep) -> Response:
    if user is None:
        return _to_login(request)
    exercises = [ExerciseSummary.of(e) for e in list_published(session=session)]
    return _render(request, "exercises.html", user=user, exercises=exercises)


@router.get("/exercises/{slug}")
def exercise_page(request: Request, slug: str, user: OptionalUser, session: SessionDep) -> Response:
    if user is None:
        return _to_login(request)
    try:
        exercise = get_published(session=session, slug=slug)
    except NotFound as exc:
        return _render(request, "error.html", status_code=404, user=user, message=exc.message)
    detail = ExerciseDetail.of(exercise)
    last = latest_for_user(session=session, user=user, exercise=exercise)
    code = last.code if last is not None else detail.starter_code
    return _render(request, "exercise.html", user=user, ex=detail, code=code, last_id=last.id if last else "")
