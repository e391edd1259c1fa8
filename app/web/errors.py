"""The one place that maps gpulab's errors (``worker.core.errors``) to HTTP answers, and says so in the OpenAPI schema.

Contract:
- Routes and services raise the shared errors; ``install_error_handlers(app, page_error=...)`` is the one error
  mechanism. It answers every ``GpulabError``, request-validation error, HTTP error (unknown path, wrong method)
  and unexpected exception with the status of its kind (``KINDS``: the nearest listed base class wins), by path:
  under ``JSON_PATHS`` (the API, its docs, probes, static files) as RFC 9457 problem details, anywhere else through
  ``page_error`` (``app.web.pages.error_page``: the HTML error page or the log-in redirect; an unexpected exception
  stays Starlette's plain "Internal Server Error").
- A problem is ``application/problem+json``, a ``Problem``: ``type`` (``PROBLEM_BASE`` + the kind's slug, or
  ``about:blank`` for a plain HTTP error, whose ``title`` is then the status phrase), ``title`` (fixed per type),
  ``status``, ``detail`` (the sentence a person reads: the error's message) and ``instance`` (the request path).
  A request that does not match the schema is a ``ValidationProblem`` (type ``validation-error``, 422): ``errors``
  lists each field error as pydantic reports it, ``{"loc": [...], "msg": ..., "type": ...}``, never the input
  (it may be a password). RateLimited and RunnerUnavailable answers carry ``Retry-After``. docs/api.md lists
  the types.
- The ASGI middlewares (``app.web.middleware``: CSRF 403, body size 413) answer before any handler runs; they
  build the same problems with ``problem_of`` and ``problem_body``.
- OpenAPI: ``problem_responses(*statuses)`` is a route's ``responses=`` for the errors its own code raises;
  ``document_problems(app, statuses_of=...)`` makes ``app.openapi()`` declare, for every operation, also the
  statuses ``statuses_of(route)`` derives (dependencies, middleware), all as ``Problem`` under
  ``application/problem+json``, and every 422 as a ``ValidationProblem`` instead of FastAPI's ``HTTPValidationError``.
"""

from __future__ import annotations

import http
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema, models_json_schema

from worker.core.errors import (
    ConfigError,
    Conflict,
    ExerciseFormatError,
    Forbidden,
    GpulabError,
    InvalidInput,
    NotFound,
    PasswordChangeRequired,
    PayloadTooLarge,
    PlatformError,
    RateLimited,
    RunnerUnavailable,
    SandboxUnavailable,
    Unauthorized,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.routing import RouteContext
    from starlette.requests import Request
    from starlette.responses import Response

    PageError = Callable[[Request, int, str, Exception], Response]

JSON_PATHS = ("/api/", "/static/", "/docs", "/redoc", "/openapi.json", "/healthz", "/readyz", "/metrics")
PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_BASE = "https://gpulab.dev/problems/"


@dataclass(frozen=True)
class Kind:
    """How one class of error is answered: its status and its problem type (``PROBLEM_BASE`` + slug) and title."""

    status: int
    slug: str
    title: str

    @property
    def type(self) -> str:
        return PROBLEM_BASE + self.slug


KINDS: dict[type[GpulabError], Kind] = {
    GpulabError: Kind(400, "bad-request", "Bad request"),
    NotFound: Kind(404, "not-found", "Not found"),
    Forbidden: Kind(403, "forbidden", "Forbidden"),
    PasswordChangeRequired: Kind(403, "password-change-required", "Choose your own password first"),
    Unauthorized: Kind(401, "unauthorized", "Not logged in or wrong credentials"),
    RateLimited: Kind(429, "rate-limited", "Too many requests"),
    RunnerUnavailable: Kind(503, "runner-unavailable", "No example runner answered"),
    PayloadTooLarge: Kind(413, "payload-too-large", "Payload too large"),
    Conflict: Kind(409, "conflict", "Conflict with the stored state"),
    InvalidInput: Kind(422, "invalid-input", "Invalid input"),
    ExerciseFormatError: Kind(422, "exercise-format", "Exercise does not follow the format"),
    ConfigError: Kind(500, "config-error", "Server misconfigured"),
    SandboxUnavailable: Kind(503, "sandbox-unavailable", "Sandbox unavailable"),
    PlatformError: Kind(500, "platform-error", "Platform error"),
}
VALIDATION = Kind(422, "validation-error", "Request does not match the schema")
HTTP_STATUS: dict[type[GpulabError], int] = {cls: kind.status for cls, kind in KINDS.items()}
RETRY_AFTER_STATUSES = (429, 503)


def _optional_member(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # an unset member is left out of the answer, never sent as null


class FieldError(BaseModel):
    """One way the request failed the schema, as pydantic reports it."""

    loc: list[str | int] = Field(description='where: "body", "query", "path"..., then field names and list indices')
    msg: str = Field(description="what is wrong, in words")
    type: str = Field(description="pydantic's error type, e.g. missing, string_too_long, json_invalid")


class Problem(BaseModel):
    """An error answer: RFC 9457 problem details, served as ``application/problem+json``."""

    type: str = Field(
        default="about:blank",
        description=f"the problem type: {PROBLEM_BASE}<slug> (docs/api.md lists them), or about:blank for a plain "
        "HTTP error (then title is the status phrase)",
        json_schema_extra={"format": "uri-reference"},
    )
    title: str = Field(description="a short summary of the problem type; the same for every occurrence")
    status: int = Field(ge=400, le=599, description="the HTTP status of this answer")
    detail: str = Field(description="what went wrong this time, in a sentence a person can act on")
    instance: str | SkipJsonSchema[None] = Field(
        default=None, description="the path of the request that failed", json_schema_extra=_optional_member
    )


class ValidationProblem(Problem):
    """A 422 answer: the request did not match the schema (``errors``), or broke a rule gpulab checks itself."""

    errors: list[FieldError] | SkipJsonSchema[None] = Field(
        default=None,
        description="each field error, when the request did not match the schema (validation-error)",
        json_schema_extra=_optional_member,
    )


def kind_of(exc: GpulabError) -> Kind:
    """Return the kind of ``exc``: that of the nearest class in its MRO listed in ``KINDS``."""
    for cls in type(exc).__mro__:
        if cls in KINDS:
            return KINDS[cls]
    return KINDS[PlatformError]


def http_status(exc: GpulabError) -> int:
    """Return the HTTP status for ``exc``."""
    return kind_of(exc).status


def kind_for_status(status: int) -> Kind | None:
    """Return the first kind listed with ``status``, or None."""
    return next((kind for kind in KINDS.values() if kind.status == status), None)


def _field_problem(error: Mapping[str, Any]) -> str:
    """Describe one pydantic error as ``where: what`` in plain words."""
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        where = ".".join(loc[1:]) or ("request body" if loc[0] == "body" else loc[0])
    else:
        where = ".".join(loc) or "request"
    if error.get("type") == "json_invalid":
        return f"request body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    return f"{where}: {error.get('msg', 'invalid value')}"


def _field_error(error: Mapping[str, Any]) -> FieldError:
    loc = [part if isinstance(part, int) else str(part) for part in error.get("loc", ())]
    return FieldError(loc=loc, msg=str(error.get("msg", "invalid value")), type=str(error.get("type", "value_error")))


def wants_json(path: str) -> bool:
    """Say whether errors on ``path`` are answered as JSON problems (else as an HTML page)."""
    return path.startswith(JSON_PATHS)


def problem_of(kind: Kind | None, status: int, detail: str, path: str) -> Problem:
    """Return the problem for an answer of ``status``: of ``kind``, or about:blank with the status phrase."""
    # A message may quote the input, and a JSON "\ud800" escape in it has no UTF-8 form: written as the escape.
    detail = detail.encode("utf-8", errors="backslashreplace").decode("utf-8")
    if kind is None:
        return Problem(title=_phrase(status), status=status, detail=detail, instance=path)
    return Problem(type=kind.type, title=kind.title, status=status, detail=detail, instance=path)


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem_body(problem: Problem) -> bytes:
    """Serialise ``problem`` (members that are unset are left out)."""
    return problem.model_dump_json(exclude_none=True).encode()


FASTAPI_BODY_ERROR = "There was an error parsing the body"
UNREADABLE_BODY = (
    "the request body is not text in UTF-8, so it cannot be read as JSON: send it encoded as UTF-8 (a notebook's "
    "file text is UTF-8 as Jupyter saves it; read the file as UTF-8 before putting it into the request)"
)


def install_error_handlers(app: FastAPI, *, page_error: PageError) -> None:
    """Answer domain, validation, HTTP and unexpected errors as problems on API paths, else through ``page_error``."""
    # Imported here so the worker and the sandbox can import this module without the web stack.
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.responses import PlainTextResponse
    from starlette.responses import Response as PlainResponse

    def problem_response(problem: Problem, headers: Mapping[str, str] | None) -> Response:
        return PlainResponse(problem_body(problem), problem.status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)

    async def gpulab_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, GpulabError)
        kind = kind_of(exc)
        if not wants_json(request.url.path):
            return page_error(request, kind.status, exc.message, exc)
        retry_after_s = exc.retry_after_s if isinstance(exc, RateLimited | RunnerUnavailable) else None
        headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
        return problem_response(problem_of(kind, kind.status, exc.message, request.url.path), headers)

    async def validation_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, RequestValidationError)
        found = exc.errors()
        message = "invalid request: " + "; ".join(dict.fromkeys(_field_problem(e) for e in found))
        if not wants_json(request.url.path):
            return page_error(request, VALIDATION.status, message, exc)
        problem = ValidationProblem(
            type=VALIDATION.type, title=VALIDATION.title, status=VALIDATION.status, detail=message,
            instance=request.url.path, errors=[_field_error(e) for e in found],
        )  # fmt: skip
        return problem_response(problem, None)

    async def http_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers) if exc.headers else None
        if not wants_json(request.url.path):
            message = "There is no page at this address." if exc.status_code == 404 else str(exc.detail)
            return page_error(request, exc.status_code, message, exc)
        detail = str(exc.detail)
        if exc.status_code == 400 and detail == FASTAPI_BODY_ERROR:  # FastAPI's words for a body that is not UTF-8
            detail = UNREADABLE_BODY
        return problem_response(problem_of(None, exc.status_code, detail, request.url.path), headers)

    async def unexpected_error(request: Request, exc: Exception) -> Any:
        # Starlette's ServerErrorMiddleware calls this, then re-raises: the traceback is still logged.
        if not wants_json(request.url.path):
            return PlainTextResponse("Internal Server Error", status_code=500)  # what Starlette answers itself
        detail = "something went wrong on our side; it has been logged"
        return problem_response(problem_of(None, 500, detail, request.url.path), None)

    app.add_exception_handler(GpulabError, gpulab_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)


# --- OpenAPI ---------------------------------------------------------------------------------------------------

DESCRIPTIONS = {
    400: "The request body could not be decoded (JSON must be UTF-8)",
    401: "Not logged in (no valid session cookie), or wrong credentials",
    403: "Logged in without the role this needs, or refused as possible cross-site request forgery (a state-changing "
    "call with the session cookie must be sent as Content-Type: application/json, from this site)",
    404: "Nothing with this id or slug that this user may see",
    409: "The request clashes with what is stored",
    413: "The request body (or the code in it) is larger than its limit",
    422: "The request does not match the schema (errors lists each field), or breaks a rule gpulab checks",
    429: "Too many tries; wait Retry-After seconds",
    503: "A service this needs did not answer; nothing was stored; try again after Retry-After seconds",
}
RETRY_AFTER_HEADER = {"description": "Seconds to wait before trying again", "schema": {"type": "integer"}}
PROBLEM_REF = "#/components/schemas/Problem"
VALIDATION_REF = "#/components/schemas/ValidationProblem"


def problem_responses(*statuses: int, described: Mapping[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """Return FastAPI ``responses`` declaring each of ``statuses`` as a problem (``described`` overrides the words)."""
    return {status: _problem_response(status, (described or {}).get(status)) for status in statuses}


def _problem_response(status: int, description: str | None) -> dict[str, Any]:
    ref = VALIDATION_REF if status == 422 else PROBLEM_REF
    response: dict[str, Any] = {
        "description": description or DESCRIPTIONS.get(status, _phrase(status)),
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": ref}}},
    }
    if status in RETRY_AFTER_STATUSES:
        response["headers"] = {"Retry-After": RETRY_AFTER_HEADER}
    return response


def document_problems(app: FastAPI, *, statuses_of: Callable[[RouteContext], Iterable[int]]) -> None:
    """Make ``app.openapi()`` declare every operation's error answers as problems (see the module contract)."""
    from fastapi.routing import APIRoute, iter_route_contexts

    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()  # FastAPI's, cached on the app: completed here once, in place
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        _, definitions = models_json_schema(
            [(Problem, "serialization"), (ValidationProblem, "serialization")],
            ref_template="#/components/schemas/{model}",
        )
        schemas.update(definitions.get("$defs", {}))
        for route in iter_route_contexts(app.routes):  # included routers' routes, as the schema has them
            if not (isinstance(route.original_route, APIRoute) and route.include_in_schema):
                continue
            derived = set(statuses_of(route))
            for method in route.methods or ():
                operation = schema["paths"][route.path_format][method.lower()]
                _complete(operation.setdefault("responses", {}), derived)
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(responses: dict[str, Any], derived: set[int]) -> None:
    """Add the derived statuses an operation does not declare; make its 422 a ``ValidationProblem``."""
    for status in sorted(derived):
        responses.setdefault(str(status), _problem_response(status, None))
    validation = responses.get("422")
    if validation is not None:
        content = validation.setdefault("content", {})
        content.pop("application/json", None)  # FastAPI's HTTPValidationError, or a route's plain JSON
        content[PROBLEM_MEDIA_TYPE] = {"schema": {"$ref": VALIDATION_REF}}
        if validation.get("description") == "Validation Error":  # FastAPI's default words
            validation["description"] = DESCRIPTIONS[422]
