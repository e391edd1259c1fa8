"""Build the web application: JSON API under ``/api``, server-rendered pages, static files, OpenAPI at ``/docs``.

Contract:
- ``create_app(settings)`` has no side effects until it serves: the database, the dispatcher and the grading
  code are touched only by requests and by the lifespan.
- The lifespan re-dispatches unfinished submissions at start when it grades in-process (unless
  ``app.state.recover_on_start`` is False; in Celery mode the workers' sweepers do it) and shuts the
  dispatcher down at stop (an in-process dispatcher starts warming, beating and sweeping when made). It
  also relays news from other processes (``app.domain.platform.news.relay``) and, on SIGTERM/SIGINT, ends open status
  streams cleanly before the server waits for its connections (``_end_streams_on_stop_signals``).
  ``app.jobs.dispatch`` is imported there, lazily.
- Middleware (``app.web.middleware``), outermost first: security headers, request-body size limit (six times
  ``max_code_bytes`` + slack, more for staff's uploads and for notebooks; answered 413 before anything is parsed),
  CSRF rule for ``/api``, signed session cookie. The first two answer their refusals as problem details themselves.
- The OpenAPI schema declares the two ways in (``accessToken``, a bearer token, and ``sessionCookie``; logging in
  and out and managing tokens take the cookie only) and every error an operation can answer
  (``app.web.errors.document_problems``): what its route declares itself (``problem_responses``), plus what
  ``error_statuses`` derives: 401/403/404 from the dependencies in ``DEPENDENCY_PROBLEMS``, FastAPI's 400 for a
  request body it cannot decode, and for a state-changing method the middlewares' 413 and, under ``/api/``, the CSRF
  rule's 403.
"""

from __future__ import annotations

import logging
import signal
import threading
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.responses import HTMLResponse
from fastapi.routing import RouteContext
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware

from app.domain.accounts.passwords import LoginLimiter
from app.domain.exercises.notebooks import MAX_NOTEBOOK_BYTES
from app.domain.platform import news
from app.domain.platform.db import engine_for
from app.domain.platform.ratelimit import limiter_for
from app.settings import Settings, get_settings
from app.web import deps
from app.web.errors import document_problems, install_error_handlers
from app.web.middleware import BodySizeLimitMiddleware, CSRFMiddleware, SecurityHeadersMiddleware
from app.web.pages import error_page, templates
from app.web.routers import api_router, page_router
from app.web.sessions import SESSION_COOKIE, UNSAFE_METHODS

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "static"
SWAGGER_DIR = STATIC_DIR / "build" / "swagger"
BODY_SLACK_BYTES = 4096  # JSON framing around the code field
# Code within max_code_bytes always fits the body limit, however it is sent: JSON escapes a control character as
# six bytes (\u0001), a urlencoded form a byte as three (%3A). So a code body over the limit holds code over it.
BODY_PER_CODE_BYTE = 6
STAFF_BODY_LIMITS = {"/instructor/": 3 * 1024 * 1024, "/admin/users/import": 512 * 1024}
# A notebook's text travels inside a JSON string, where escaping can make a byte six (\u0001): a body over this limit
# holds a notebook over MAX_NOTEBOOK_BYTES, so both refusals can say the same thing.
NOTEBOOK_BODY_LIMITS = {
    "/api/exercises/*/notebook-submissions": BODY_PER_CODE_BYTE * MAX_NOTEBOOK_BYTES + BODY_SLACK_BYTES
}


def _dependency_of(annotated: object) -> Callable[..., object]:
    """Return the callable behind an ``Annotated[..., Depends(callable)]`` alias."""
    return typing.cast(Callable[..., object], typing.get_args(annotated)[1].dependency)


# What each dependency of app.web.deps raises before the route runs (the role checks are require_role's closures).
DEPENDENCY_PROBLEMS: dict[Callable[..., object], tuple[int, ...]] = {
    deps.get_optional_user: (401, 403),  # an access token: unknown or revoked, or without the call's scope
    deps.get_logged_in_user: (401,),
    deps.get_current_user: (403,),  # a one-time password to change first
    _dependency_of(deps.InstructorDep): (403,),
    _dependency_of(deps.AdminDep): (403,),
    deps.get_course_staff: (403,),
    deps.get_assignment_staff: (403,),
    **{
        loader: (404,)
        for loader in (
            deps.get_exercise, deps.get_submission, deps.get_staff_exercise, deps.get_staff_version,
            deps.get_staff_submission, deps.get_check, deps.get_regrade, deps.get_user, deps.get_course_access,
            deps.get_assignment_access, deps.get_extension, deps.get_platform, deps.get_outbox_row,
        )
    },
}  # fmt: skip


def _calls(dependant: Dependant) -> Iterator[Callable[..., object]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def error_statuses(route: RouteContext) -> set[int]:
    """Return the error statuses ``route`` can answer through its dependencies and the middlewares."""
    statuses = {status for call in _calls(route.dependant) for status in DEPENDENCY_PROBLEMS.get(call, ())}
    if route.body_field is not None:
        statuses.add(400)  # FastAPI: a JSON body it cannot decode (not UTF-8)
    if (route.methods or set()) & UNSAFE_METHODS:
        statuses.add(413)  # BodySizeLimitMiddleware
        if (route.path or "").startswith("/api/"):
            statuses.add(403)  # CSRFMiddleware
    return statuses


def _declare_tokenless_paths(app: FastAPI) -> None:
    """Make the schema say that logging in and out and managing tokens take the session cookie, never a token."""
    build = app.openapi

    def openapi() -> dict[str, typing.Any]:
        done = app.openapi_schema is not None
        schema = build()
        if not done:
            for path, operations in schema.get("paths", {}).items():
                if path.startswith(deps.TOKENLESS_PATHS):
                    for operation in operations.values():
                        if operation.get("security"):
                            operation["security"] = [{"sessionCookie": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Recover unfinished submissions at start (embedded grading); stop the dispatcher at the end."""
    if getattr(app.state, "recover_on_start", True):
        from app.jobs.dispatch import get_dispatcher, recover_unfinished

        app.state.dispatcher = get_dispatcher()
        # Celery mode: the workers' sweepers send stranded work again; several API processes starting at
        # once must not each flood the queues with the whole backlog.
        if app.state.dispatcher.owns_all_running:
            count = await run_in_threadpool(recover_unfinished, app.state.dispatcher)
            if count:
                log.info("re-dispatched %d unfinished submissions", count)
    news_relay = news.relay(app.state.settings.broker_url)  # news from other processes' gradings (Celery mode)
    news.end_shutdown()
    restore_signals = _end_streams_on_stop_signals()
    try:
        yield
    finally:
        news.begin_shutdown()
        restore_signals()
        news.stop_relay(news_relay)
        if app.state.dispatcher is not None:
            from app.jobs.dispatch import release_dispatcher

            # Forgotten too, not only stopped: another app in this process (tests) must not get a dead one.
            release_dispatcher(app.state.dispatcher)
            app.state.dispatcher = None
            from worker.grading.sandbox import close_warm_pools

            # Here, not at exit: a SIGTERM'd uvicorn re-raises the signal after the lifespan, so no exit hook runs,
            # and warm container pairs would outlive their server.
            await run_in_threadpool(close_warm_pools)


def _end_streams_on_stop_signals() -> Callable[[], None]:
    """Chain a handler before the server's own for SIGTERM/SIGINT that ends live streams; return an undo.

    uvicorn waits for every open response before it exits, and a status stream may stay open for many
    minutes: without this a rolling restart would hang on the slowest learner. Only the main thread may set
    signal handlers (uvicorn's case); elsewhere (a test client's thread) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(sig: int, frame: FrameType | None) -> None:
        news.begin_shutdown()
        chained = previous.get(signal.Signals(sig))
        if callable(chained):
            chained(sig, frame)
        elif chained == signal.SIG_DFL:
            raise SystemExit(128 + sig)

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, old)

    return restore


def _install_docs(app: FastAPI) -> None:
    """Serve the OpenAPI page at ``/docs`` from our own copy of Swagger UI (bundled at set-up, no CDN).

    The page is ours (``docs.html``: its language, our colour corrections in ``docs.css``, Swagger UI started by
    ``docs.js`` without deep links), so it passes WCAG 2 A/AA and keeps the site's Content-Security-Policy."""

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        # Set-up without npm has no Swagger UI: the page then links to the schema itself (never a CDN).
        has_ui = (SWAGGER_DIR / "swagger-ui-bundle.js").is_file()
        context = {"openapi_url": app.openapi_url or "/openapi.json", "has_ui": has_ui}
        return templates.TemplateResponse(request, "docs.html", context)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Return the gpulab ASGI application configured by ``settings`` (default: the environment)."""
    settings = settings or get_settings()
    app = FastAPI(title="gpulab", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.settings = settings
    app.state.recover_on_start = True
    app.state.dispatcher = None
    app.state.sessionmaker = sessionmaker(bind=engine_for(settings.database_url), expire_on_commit=False)
    app.state.rate_limiter = limiter_for(settings)  # shared by every process on the broker's Redis, if any
    app.state.login_limiter = LoginLimiter(
        settings.login_max_failures, settings.login_window_s, limiter=app.state.rate_limiter
    )

    install_error_handlers(app, page_error=error_page)  # problem details on API paths, HTML pages elsewhere
    app.include_router(api_router)
    document_problems(app, statuses_of=error_statuses)
    _declare_tokenless_paths(app)
    app.include_router(page_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _install_docs(app)

    if settings.frame_origins and not settings.framed_sessions:
        log.warning(
            "GPULAB_FRAME_ANCESTORS is set without GPULAB_COOKIE_SECURE: browsers drop a SameSite=None cookie that is "
            "not Secure, so the session cookie stays SameSite=Lax; gpulab works in its own tab, and inside the LMS's "
            "frame it shows the log-in page (serve it over https with GPULAB_COOKIE_SECURE=true for framed sessions)"
        )
    # add_middleware wraps: the last one added is the outermost.
    app.add_middleware(
        SessionMiddleware,
        secret_key=settings.session_secret(),
        session_cookie=SESSION_COOKIE,
        max_age=settings.session_max_age_s,
        same_site="none" if settings.framed_sessions else "lax",  # framed by an LMS: the cookie goes in its frame
        https_only=settings.cookie_secure,
        # CHIPS: a framed session keeps working in browsers that block unpartitioned third-party cookies.
        partitioned=settings.framed_sessions,
    )
    app.add_middleware(CSRFMiddleware)
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=BODY_PER_CODE_BYTE * settings.max_code_bytes + BODY_SLACK_BYTES,
        # Exercise uploads and the authoring form carry whole folders; a notebook carries its outputs.
        path_limits=STAFF_BODY_LIMITS | NOTEBOOK_BODY_LIMITS,
        code_bytes=settings.max_code_bytes,
        notebook_bytes=MAX_NOTEBOOK_BYTES,
    )
    app.add_middleware(SecurityHeadersMiddleware, frame_origins=settings.frame_origins)
    return app
