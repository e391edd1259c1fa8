"""Every domain error gpulab raises, and the one place that maps them to HTTP.

Contract: routes and services raise these; ``install_error_handlers`` turns each into a JSON body
``{"detail": message}`` with the status below. Nothing else in the app builds error responses by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI


class GpulabError(Exception):
    """Base class: ``status_code`` is the HTTP status the API answers with."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(GpulabError):
    status_code = 404


class Forbidden(GpulabError):
    status_code = 403


class Unauthorized(GpulabError):
    status_code = 401


class RateLimited(GpulabError):
    status_code = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RunnerUnavailable(GpulabError):
    """No worker answered a job the request waits on (an example run) in time; nothing was stored."""

    status_code = 503

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PayloadTooLarge(GpulabError):
    status_code = 413


class Conflict(GpulabError):
    status_code = 409


class InvalidInput(GpulabError):
    status_code = 422


class ExerciseFormatError(GpulabError):
    """An exercise folder or upload does not follow ``exercises/README.md``."""

    status_code = 422

    def __init__(self, slug: str, problem: str) -> None:
        super().__init__(f"exercise {slug!r}: {problem}")
        self.slug = slug
        self.problem = problem


class ConfigError(GpulabError):
    """Settings are unsafe or inconsistent; raised at start-up, never per request."""

    status_code = 500


class SandboxUnavailable(GpulabError):
    """The chosen sandbox backend cannot run on this host (missing bwrap, cgroups, user namespaces...)."""

    status_code = 503


class PlatformError(GpulabError):
    """Grading failed for a reason that is ours, not the learner's; the only kind that is retried."""

    status_code = 500


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
        return JSONResponse({"detail": exc.message}, status_code=exc.status_code, headers=headers)

    async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = list(dict.fromkeys(_field_problem(e) for e in exc.errors()))
        return JSONResponse({"detail": "invalid request: " + "; ".join(problems)}, status_code=422)

    app.add_exception_handler(GpulabError, gpulab_error)
    app.add_exception_handler(RequestValidationError, validation_error)
