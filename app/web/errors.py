"""The one place that maps gpulab's errors (``worker.core.errors``) to HTTP answers.

Contract: routes and services raise the shared errors; ``install_error_handlers(app, page_error=...)`` is the one
error mechanism. It answers every ``GpulabError``, request-validation error and HTTP error (unknown path, wrong
method) with the status ``http_status`` gives its class (the nearest listed base class wins), by path: under
``JSON_PATHS`` (the API, its docs, probes, static files) as JSON ``{"detail": message}``, anywhere else through
``page_error`` (``app.web.pages.error_page``: the HTML error page or the log-in redirect). Nothing else in the
app builds error responses by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worker.core.errors import (
    ConfigError,
    Conflict,
    ExerciseFormatError,
    Forbidden,
    GpulabError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    PlatformError,
    RateLimited,
    RunnerUnavailable,
    SandboxUnavailable,
    Unauthorized,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

    PageError = Callable[[Request, int, str, Exception], Response]

JSON_PATHS = ("/api/", "/static/", "/docs", "/redoc", "/openapi.json", "/healthz", "/readyz", "/metrics")

HTTP_STATUS: dict[type[GpulabError], int] = {
    GpulabError: 400,
    NotFound: 404,
    Forbidden: 403,
    Unauthorized: 401,
    RateLimited: 429,
    RunnerUnavailable: 503,
    PayloadTooLarge: 413,
    Conflict: 409,
    InvalidInput: 422,
    ExerciseFormatError: 422,
    ConfigError: 500,
    SandboxUnavailable: 503,
    PlatformError: 500,
}


def http_status(exc: GpulabError) -> int:
    """Return the HTTP status for ``exc``: that of the nearest class in its MRO listed in ``HTTP_STATUS``."""
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


def _field_problem(error: dict[str, Any]) -> str:
    """Describe one pydantic error as ``where: what`` in plain words."""
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        where = ".".join(loc[1:]) or ("request body" if loc[0] == "body" else loc[0])
    else:
        where = ".".join(loc) or "request"
    if error.get("type") == "json_invalid":
        return f"request body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    return f"{where}: {error.get('msg', 'invalid value')}"


def wants_json(path: str) -> bool:
    """Say whether errors on ``path`` are answered as JSON (else as an HTML page)."""
    return path.startswith(JSON_PATHS)


def install_error_handlers(app: FastAPI, *, page_error: PageError) -> None:
    """Answer domain, validation and HTTP errors as JSON on API paths and through ``page_error`` elsewhere."""
    # Imported here so the worker and the sandbox can import this module without the web stack.
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def answer(request: Request, status: int, message: str, exc: Exception, headers: dict[str, str] | None) -> Any:
        if not wants_json(request.url.path):
            return page_error(request, status, message, exc)
        return JSONResponse({"detail": message}, status_code=status, headers=headers)

    async def gpulab_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, GpulabError)
        retry_after_s = exc.retry_after_s if isinstance(exc, RateLimited | RunnerUnavailable) else None
        headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
        return answer(request, http_status(exc), exc.message, exc, headers)

    async def validation_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, RequestValidationError)
        problems = list(dict.fromkeys(_field_problem(e) for e in exc.errors()))
        return answer(request, 422, "invalid request: " + "; ".join(problems), exc, None)

    async def http_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404 and not wants_json(request.url.path):
            message = "There is no page at this address."
        else:
            message = str(exc.detail)
        return answer(request, exc.status_code, message, exc, dict(exc.headers) if exc.headers else None)

    app.add_exception_handler(GpulabError, gpulab_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
