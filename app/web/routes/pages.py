"""Server-rendered pages for learners: log in/out, the catalogue, an exercise with its editor, attempt history.

Contract:
- Every page but ``/login`` needs a session: ``PageUser`` raises ``Unauthorized``, which ``install_page_errors``
  turns into a redirect to ``/login?next=…``; ``NotFound``/``Forbidden`` and unknown paths get the HTML error
  page with their status. Paths under ``/api``, ``/static`` and the API docs keep their JSON errors.
- Every state-changing form on this router (log in, log out, the no-JavaScript submit) carries the session's
  form token (``csrf_token(request)``, a Jinja global); the router-level dependency ``verify_form_csrf`` checks
  it on every unsafe method before the route runs (403 otherwise). Other page routers should add
  ``FORM_CSRF`` to their dependencies and render through ``templates`` here so ``base.html`` gets its token.
- Templates autoescape. Markup inserted unescaped is only the prompt HTML (sanitised by ``app.domain.markdown``) and
  Pygments output (``app.domain.highlight``, which escapes the source). Learner text reaches the page through
  autoescaped variables or through ``textContent`` in the static scripts.
- Submitting without JavaScript posts the form to ``/exercises/{slug}/submissions`` and lands on the history
  page of that attempt; with JavaScript the exercise page submits through the JSON API and follows SSE.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.domain.exercises import get_published, list_published
from app.domain.highlight import highlight_blocks, highlight_python
from app.domain.models import Exercise, Submission, User
from app.domain.progress import (
    Progress,
    attempts_for,
    diff_lines,
    previous_attempt,
    progress_by_exercise,
    progress_for,
    summarize,
)
from app.domain.schemas import ExerciseDetail, ExerciseSummary, MeOut, SubmissionOut, as_utc
from app.domain.security import (
    UNSAFE_METHODS,
    authenticate,
    client_ip,
    csrf_token,
    end_session,
    start_session,
    user_from_session,
    verify_csrf,
)
from app.domain.submissions import create_submission, get_for_user
from app.web.deps import (
    DispatcherDep,
    LoginLimiterDep,
    OptionalUser,
    SessionDep,
    SettingsDep,
    get_session_factory,
)
from app.web.errors import http_status
from app.web.routes.api_exercises import dispatch_committed
from app.web.routes.preload import with_current_versions, with_submission_details
from worker.core.errors import Forbidden, GpulabError, NotFound, RateLimited, Unauthorized

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
EDITOR_BUNDLE = Path(__file__).resolve().parents[2] / "static" / "build" / "editor.js"
JSON_ERROR_PREFIXES = ("/api/", "/static/", "/docs", "/redoc", "/openapi.json", "/healthz", "/readyz", "/metrics")
DIFFICULTY_ORDER = {"beginner": 0, "intermediate": 1, "advanced": 2}


async def verify_form_csrf(request: Request) -> None:
    """Refuse an unsafe request whose form lacks this session's token (403)."""
    if request.method in UNSAFE_METHODS:
        form = await request.form()  # Starlette caches it, so Form(...) parameters still read it
        token = form.get("csrf_token")
        verify_csrf(request, token if isinstance(token, str) else None)


FORM_CSRF = Depends(verify_form_csrf)

templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=True, undefined=jinja2.StrictUndefined
    )
)
templates.env.globals["csrf_token"] = csrf_token


def utc_text(value: Any) -> str:
    """Format a datetime as ``YYYY-MM-DD HH:MM UTC`` (the page script rewrites ``time`` elements to local time)."""
    return as_utc(value).strftime("%Y-%m-%d %H:%M UTC") if value else ""


templates.env.filters["utc"] = utc_text
router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])


def safe_next(path: str) -> str:
    """Return ``path`` if it is a path on this site, else ``/exercises`` (no open redirect via ``?next=``)."""
    if path.startswith("/") and not path.startswith("//") and "\\" not in path and ":" not in path.split("?")[0]:
        return path
    return "/exercises"


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a page template; ``user`` defaults to the one ``PageUser`` found (or none)."""
    context.setdefault("user", getattr(request.state, "user", None))
    return templates.TemplateResponse(request, name, context, status_code=status_code)


async def get_page_user(request: Request, user: OptionalUser) -> User:
    """Return the logged-in user for a page or raise ``Unauthorized``; error pages get a detached copy."""
    # A copy, not the row: when the route fails, its session rolls back and the row can no longer load.
    request.state.user = MeOut.of(user) if user else None
    if user is None:
        raise Unauthorized("log in first")
    return user


PageUser = Annotated[User, Depends(get_page_user)]


def get_page_exercise(slug: str, session: SessionDep, _user: PageUser) -> Exercise:
    return get_published(session=session, slug=slug)


PageExercise = Annotated[Exercise, Depends(get_page_exercise)]


# --- log in and out ----------------------------------------------------------------------------------------


@router.get("/")
async def home(user: OptionalUser) -> Response:
    return RedirectResponse("/exercises" if user else "/login", status_code=303)


@router.get("/login")
def login_page(request: Request, user: OptionalUser, next_path: Annotated[str, Query(alias="next")] = "") -> Response:
    target = safe_next(next_path)
    if user:
        return RedirectResponse(target, status_code=303)
    return render(request, "login.html", user=None, next=target, email="", error="")


@router.post("/login")
def login_form(
    request: Request,
    session: SessionDep,
    limiter: LoginLimiterDep,
    email: Annotated[str, Form(max_length=320)] = "",
    password: Annotated[str, Form(max_length=1024)] = "",
    next_path: Annotated[str, Form(alias="next")] = "",
) -> Response:
    """Log in from the HTML form (the same rules as ``POST /api/auth/login``); errors re-render the form."""
    target, ip = safe_next(next_path), client_ip(request)
    try:
        limiter.check(email=email, ip=ip)
        user = authenticate(session=session, email=email, password=password)
        if user is None:
            limiter.record_failure(email=email, ip=ip)
            raise Unauthorized("Wrong e-mail or password.")
    except (RateLimited, Unauthorized) as exc:
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RateLimited) else None
        response = render(
            request, "login.html", http_status(exc), user=None, next=target, email=email, error=exc.message
        )
        response.headers.update(headers or {})
        return response
    limiter.record_success(email=email)
    start_session(request, user)
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
def logout_form(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """End this session and go to the log-in page."""
    end_session(request, session=session, max_age_s=settings.session_max_age_s)
    session.commit()
    return RedirectResponse("/login", status_code=303)


# --- the catalogue -------------------------------------------------------------------------------------------


@router.get("/exercises")
def exercises_page(request: Request, user: PageUser, session: SessionDep) -> Response:
    exercises = list(with_current_versions(session, list_published(session=session)))
    progress = progress_by_exercise(session=session, user=user)
    topics: dict[str, list[tuple[ExerciseSummary, Progress]]] = defaultdict(list)
    for exercise in exercises:
        summary = ExerciseSummary.of(exercise)
        topics[summary.topic].append((summary, progress.get(exercise.id, Progress())))
    for rows in topics.values():
        rows.sort(key=lambda row: (DIFFICULTY_ORDER.get(row[0].difficulty, 9), row[0].title))
    return render(
        request,
        "exercises.html",
        topics=sorted(topics.items(), key=lambda item: item[0].lower()),
        summary=summarize(progress, exercises),
    )


# --- one exercise --------------------------------------------------------------------------------------------


@router.get("/exercises/{slug}")
def exercise_page(request: Request, exercise: PageExercise, user: PageUser, session: SessionDep) -> Response:
    detail = ExerciseDetail.of(exercise)
    if detail.kind == "quiz":  # answered through quiz.js and POST /api/exercises/{slug}/quiz
        progress = progress_for(session=session, user=user, exercise=exercise)
        return render(request, "quiz.html", ex=detail, prompt=highlight_blocks(detail.prompt_html), progress=progress)
    attempts = attempts_for(session=session, user=user, exercise=exercise, limit=None)
    last = attempts[0] if attempts else None
    return render(
        request,
        "exercise.html",
        ex=detail,
        prompt=highlight_blocks(detail.prompt_html),
        examples={name: highlight_python(source) for name, source in detail.examples.items()},
        code=last.code if last is not None else detail.starter_code,
        last_id=last.id if last else "",
        progress=progress_for(session=session, user=user, exercise=exercise),
        has_editor=EDITOR_BUNDLE.is_file(),
    )


@router.post("/exercises/{slug}/submissions")
def submit_form(
    exercise: PageExercise,
    user: PageUser,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    code: Annotated[str, Form()] = "",
) -> Response:
    """Submit from the form without JavaScript; show the attempt on the history page."""
    submission = create_submission(
        session=session, user=user, exercise=exercise, code=code, max_bytes=settings.max_code_bytes
    )
    session.commit()
    dispatch_committed(dispatcher, submission)
    return RedirectResponse(
        f"/exercises/{quote(exercise.slug)}/history?attempt={submission.id}#attempt", status_code=303
    )


# --- attempt history -----------------------------------------------------------------------------------------


def _chosen(attempts: list[Submission], attempt_id: str, *, session: Session, user: User) -> Submission | None:
    if not attempt_id:
        return attempts[0] if attempts else None
    chosen = get_for_user(session=session, submission_id=attempt_id, user=user)
    if chosen is None or chosen not in attempts:
        raise NotFound(f"no attempt {attempt_id!r} on this exercise")
    return chosen


@router.get("/exercises/{slug}/history")
def history_page(
    request: Request,
    exercise: PageExercise,
    user: PageUser,
    session: SessionDep,
    attempt: Annotated[str, Query(max_length=64)] = "",
) -> Response:
    attempts = list(with_submission_details(session, attempts_for(session=session, user=user, exercise=exercise)))
    chosen = _chosen(attempts, attempt, session=session, user=user)
    previous = previous_attempt(session=session, submission=chosen) if chosen else None
    numbers = {s.id: len(attempts) - i for i, s in enumerate(attempts)}
    return render(
        request,
        "history.html",
        ex=ExerciseSummary.of(exercise),
        attempts=[SubmissionOut.of(s) for s in attempts],
        numbers=numbers,
        chosen=SubmissionOut.of(chosen) if chosen else None,
        chosen_code=highlight_python(chosen.code) if chosen else "",
        previous_id=previous.id if previous else None,
        diff=diff_lines(previous.code, chosen.code) if chosen and previous else [],
        progress=progress_for(session=session, user=user, exercise=exercise),
    )


# --- error pages ---------------------------------------------------------------------------------------------


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(JSON_ERROR_PREFIXES)


def _user_for_error_page(request: Request) -> MeOut | None:
    """Return the user a page error happened to (looked up here when no page dependency ran)."""
    if hasattr(request.state, "user"):
        user: MeOut | None = request.state.user
        return user
    if "session" not in request.scope or not request.session.get("uid"):
        return None  # an anonymous session holds only the log-in form's token, which must survive
    override = request.app.dependency_overrides.get(get_session_factory)  # honour overrides as routes do
    factory = override() if override else request.app.state.sessionmaker
    with factory() as session:
        found = user_from_session(request, session=session)
        return MeOut.of(found) if found else None


TITLES = {401: "Please log in", 403: "Not allowed", 404: "Not found", 405: "Not allowed", 429: "Too many requests"}


def _error_page(request: Request, status: int, message: str) -> Response:
    title = TITLES.get(status, "Something went wrong")
    return render(
        request, "error.html", status, user=_user_for_error_page(request), title=title, message=message, code=status
    )


def install_page_errors(app: FastAPI) -> None:
    """Answer errors on page paths with the HTML error page (or the login redirect); API paths keep JSON."""
    api_handler = app.exception_handlers[GpulabError]

    async def gpulab_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GpulabError)
        if _wants_json(request):
            answer = api_handler(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        if isinstance(exc, Unauthorized) and request.method == "GET":
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        if isinstance(exc, Forbidden) and request.url.path == "/login":  # an expired log-in form: offer a fresh one
            return render(request, "login.html", 403, user=None, next="/exercises", email="", error=exc.message)
        return _error_page(request, http_status(exc), exc.message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if _wants_json(request):
            return await http_exception_handler(request, exc)
        message = "There is no page at this address." if exc.status_code == 404 else str(exc.detail)
        return _error_page(request, exc.status_code, message)

    app.add_exception_handler(GpulabError, gpulab_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
