"""The one place that maps gpulab's errors (``worker.core.errors``) to HTTP answers.

Contract: routes and services raise the shared errors; ``install_error_handlers`` turns each into a JSON body
``{"detail": message}`` with the status ``http_status`` gives its class (the nearest listed base class wins).
Nothing else in the app builds error responses by hand; pages use ``http_status`` for their HTML errors.
"""

from __future__ import annotations

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


def install_error_handlers(app: FastAPI) -> None:
    """Answer every ``GpulabError`` and request-validation error with ``{"detail": message}``."""
    # Imported here so the worker and the sandbox can import this module without the web stack.
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.requests import Request

    async def gpulab_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, GpulabError)
        retry_after_s = exc.retry_after_s if isinstance(exc, RateLimited | RunnerUnavailable) else None
        headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
        return JSONResponse({"detail": exc.message}, status_code=http_status(exc), headers=headers)

    async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = list(dict.fromkeys(_field_problem(e) for e in exc.errors()))
        return JSONResponse({"detail": "invalid request: " + "; ".join(problems)}, status_code=422)

    app.add_exception_handler(GpulabError, gpulab_error)
    app.add_exception_handler(RequestValidationError, validation_error)
