"""The ASGI middlewares of the web side: CSRF refusal of API calls, the request-body size limit, security headers.

Contract: ``CSRFMiddleware`` answers 403 to a state-changing API call that
``app.domain.accounts.passwords.csrf_problem``
refuses; ``BodySizeLimitMiddleware`` answers 413 to a body over its limit (per path prefix) without handing any
of it to the app, in the learner's words (``worker.core.humane``): where the body carries code (a submission or an
example run), the sentence names the code limit, which any body over the limit exceeds. Both answer before any
route or exception handler runs, in the one error format
(``app.web.errors``: a problem on JSON paths; on page paths the sentence as plain text). ``SecurityHeadersMiddleware``
adds a strict Content-Security-Policy and friends to every answer; framing is refused unless
``GPULAB_FRAME_ANCESTORS`` names the LMS origins that may embed gpulab (then only those, by CSP). Every HTML page
is sent with ``Cache-Control: no-store`` (unless its route set its own), so Back/Forward after a submission asks
the server again instead of showing "3 attempts left" and no result from a copy (``app.js`` reloads a page the
browser still restores from its back/forward cache).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.errors import PROBLEM_MEDIA_TYPE, kind_for_status, problem_body, problem_of, wants_json
from app.web.sessions import UNSAFE_METHODS, csrf_problem, header
from worker.core import humane

CODE_PATH = re.compile(r"/exercises/[^/]+/(submissions|runs|draft)$")  # where a body carries a learner's code
NOTEBOOK_PATH = re.compile(r"/exercises/[^/]+/notebook-submissions$")  # where a body carries a notebook


async def _refuse(scope: Scope, send: Send, status: int, detail: str, *, close: bool = False) -> None:
    """Answer before any route runs: a problem on JSON paths, the sentence as plain text on page paths."""
    path = scope.get("path", "")
    if wants_json(path):
        body, media_type = problem_body(problem_of(kind_for_status(status), status, detail, path)), PROBLEM_MEDIA_TYPE
    else:
        body, media_type = detail.encode(), "text/plain; charset=utf-8"
    headers = [(b"content-type", media_type.encode()), (b"content-length", str(len(body)).encode())]
    if close:  # the unread rest of an oversized body must not be taken for the next request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class CSRFMiddleware:
    """Refuse forged state-changing API requests with 403 before any route runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (problem := csrf_problem(scope)):
            await _refuse(scope, send, 403, problem)
            return
        await self.app(scope, receive, send)


class BodySizeLimitMiddleware:
    """Answer 413 to a request body over ``max_bytes`` without handing any of it to the app.

    The body is read (at most ``max_bytes`` + one chunk) before the app runs, so a huge upload is refused
    whether or not it declares a Content-Length; the limit is small, so buffering it costs little.
    """

    BODY_METHODS = UNSAFE_METHODS

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        path_limits: dict[str, int] | None = None,
        code_bytes: int | None = None,
        notebook_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = path_limits or {}
        self.code_bytes = code_bytes  # the code limit, named when a code-carrying body is refused
        self.notebook_bytes = notebook_bytes  # the notebook limit, named when a notebook upload is refused

    def _limit(self, path: str) -> int:
        # A key is a path prefix, where ``*`` stands for one path segment or more (a slug).
        return next((n for prefix, n in self.path_limits.items() if fnmatchcase(path, prefix + "*")), self.max_bytes)

    def _too_large(self, path: str, limit: int, size: int | None) -> str:
        if self.code_bytes is not None and CODE_PATH.search(path):
            return humane.code_too_large(None, self.code_bytes)
        if self.notebook_bytes is not None and NOTEBOOK_PATH.search(path):
            return humane.notebook_too_large(None, self.notebook_bytes)
        return humane.too_large("What you sent", size, limit, "Send less at once.")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in self.BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope.get("path", ""))
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(scope, send, 413, self._too_large(scope.get("path", ""), limit, int(declared)), close=True)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refuse(scope, send, 413, self._too_large(scope.get("path", ""), limit, None), close=True)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def origin_of(url: str) -> str:
    """Return the ``scheme://host[:port]`` of ``url``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def page_policy(*, form_action: str = "", frame_origins: tuple[str, ...] = ()) -> str:
    """Return gpulab's Content-Security-Policy, with ``form_action`` allowed as a form target besides itself."""
    return SecurityHeadersMiddleware.CSP.format(
        ancestors=" ".join(frame_origins) if frame_origins else "'none'",
        form_action=f"'self' {form_action}" if form_action else "'self'",
    )


class SecurityHeadersMiddleware:
    """Add a strict Content-Security-Policy and friends to every response (not to the API docs page, whose
    Swagger UI starts from an inline script)."""

    CSP = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; frame-ancestors {ancestors}; form-action {form_action}"
    )

    def __init__(self, app: ASGIApp, frame_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        # An LMS that embeds launches may frame every page (the launch lands on any of them); nobody else may.
        self.frame_origins = frame_origins
        self.csp = page_policy(frame_origins=frame_origins).encode()
        self.frame_headers = [] if frame_origins else [(b"x-frame-options", b"DENY")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope.get("path", "") in ("/redoc", "/docs/oauth2-redirect")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin")]
                headers += self.frame_headers
                names = {k.lower() for k, _ in headers}
                html = any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers)
                if html and b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                own = next((v for k, v in headers if k.lower() == b"content-security-policy"), None)
                if own is not None:  # a route's own policy (one extra form target) keeps the framing rule
                    headers = [(k, v) for k, v in headers if k.lower() != b"content-security-policy"]
                    extra = _form_targets(own.decode("latin-1"))
                    headers.append(
                        (
                            b"content-security-policy",
                            page_policy(form_action=extra, frame_origins=self.frame_origins).encode(),
                        )
                    )
                elif not docs:
                    headers.append((b"content-security-policy", self.csp))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _form_targets(policy: str) -> str:
    """Return the form targets other than ``'self'`` that a route's own policy allows."""
    for directive in policy.split(";"):
        name, _, values = directive.strip().partition(" ")
        if name == "form-action":
            return " ".join(v for v in values.split() if v != "'self'")
    return ""
