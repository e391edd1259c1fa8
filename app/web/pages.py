"""What every HTML page shares: one template environment, one ``render``, the form-CSRF check, flashes, the error page.

Contract:
- ``templates`` loads ``app/web/templates`` with autoescape and ``StrictUndefined``. Times: every time a page
  shows goes through ``when`` (a ``time`` element whose ``datetime`` carries its UTC offset, with the UTC text
  inside; ``app.js``'s ``localTimes`` rewrites it into the viewer's zone: ``format`` "short", "long" with the
  weekday, year and zone, or "ago" whose text stays and whose title gets the local time) or ``timed`` (a
  sentence of ours, escaped, whose ``YYYY-MM-DD HH:MM UTC`` times become such elements, so a gate's "closed on
  ..." shows in the viewer's zone too; ``app.js``'s ``timedText`` does the same for sentences a script writes,
  and ``showError`` uses it). ``utc`` is the plain UTC text, for sentences and CSV only. Numbers: ``num``
  (``worker.core.humane.number``: at most 2 decimals, no exponent), ``points`` (``4.67/10``), ``pct`` and
  ``duration_ms``; ``app.js``'s ``gpulab.num``/``gpulab.duration`` follow the same rules. Learner text (code,
  e-mails, messages) is never marked safe.
- ``render(request, name, status_code=200, **context)``: ``user`` defaults to the request's user (the
  detached copy ``app.web.deps`` keeps), ``csrf`` to the session's form token (every form posts it as
  ``csrf_token``), ``flashes`` to the messages ``flash`` queued for this page.
- ``FORM_CSRF``: a router dependency that refuses (403) an unsafe request whose form lacks the session's token;
  every page router has it, so no page route can forget it.
- ``error_page(request, status, message, exc)`` is how ``app.web.errors`` answers a failure on a page path:
  ``Unauthorized`` on a GET redirects to ``/login?next=...``, ``PasswordChangeRequired`` on a GET to
  ``/account/password?next=...`` (a one-time password is changed before anything else), a stale log-in form
  is shown again with the message, anything else is ``error.html`` with the status.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import markupsafe
from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from app.domain.platform.clock import as_utc
from app.web.deps import get_session_factory
from app.web.schemas.auth import MeOut
from app.web.sessions import UNSAFE_METHODS, csrf_token, user_from_session, verify_csrf
from worker.core import humane
from worker.core.errors import Forbidden, PasswordChangeRequired, Unauthorized

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
TITLES = {401: "Please log in", 403: "Not allowed", 404: "Not found", 405: "Not allowed", 429: "Too many requests"}
FLASHES_KEPT = 5


TIME_FORMATS = ("short", "long", "ago")


def time_element(value: datetime | None, time_format: str = "short", text: str = "") -> markupsafe.Markup:
    """Return ``value`` as a ``time`` element with its UTC offset (``text`` inside, else the UTC time)."""
    if not value:
        return markupsafe.Markup("")
    if time_format not in TIME_FORMATS:
        raise ValueError(f"unknown time format {time_format!r}")
    at = as_utc(value)
    return markupsafe.Markup('<time datetime="{}" data-format="{}">{}</time>').format(
        at.isoformat(), time_format, text or humane.utc_text(at)
    )


def iso_utc(value: datetime | None) -> str:
    """Return ``value`` as ISO 8601 with its UTC offset (for a ``data-`` attribute a script reads), or ``""``."""
    return as_utc(value).isoformat() if value else ""


def timed_text(value: str) -> markupsafe.Markup:
    """Escape ``value`` and wrap each UTC time ``utc_text`` wrote in it in a ``time`` element."""
    escaped = str(markupsafe.escape(value))
    # Safe: the sentence is escaped first and the pattern adds only digits, dashes and colons it matched.
    return markupsafe.Markup(  # noqa: S704
        humane.UTC_TIME_RE.sub(r'<time datetime="\1T\2:00Z" data-format="long">\1 \2 UTC</time>', escaped)
    )


templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=True, undefined=jinja2.StrictUndefined
    )
)
templates.env.filters["when"] = time_element
templates.env.filters["iso"] = iso_utc
templates.env.filters["timed"] = timed_text
templates.env.filters["num"] = humane.number
templates.env.filters["points"] = humane.points
templates.env.filters["pct"] = humane.percent
templates.env.filters["duration_ms"] = humane.duration_ms


async def verify_form_csrf(request: Request) -> None:
    """Refuse an unsafe request whose form lacks this session's token (403)."""
    if request.method in UNSAFE_METHODS:
        form = await request.form()  # Starlette caches it, so Form(...) parameters still read it
        token = form.get("csrf_token")
        verify_csrf(request, token if isinstance(token, str) else None)


FORM_CSRF = Depends(verify_form_csrf)


def flash(request: Request, text: str, kind: str = "ok") -> None:
    """Show ``text`` once on the next page rendered for this session."""
    request.session["flash"] = [*request.session.get("flash", []), [kind, text]][-FLASHES_KEPT:]


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a page template with the user, the form token and the pending flash messages."""
    context.setdefault("user", getattr(request.state, "user", None))
    context.setdefault("csrf", csrf_token(request) if "session" in request.scope else "")
    context.setdefault("flashes", request.session.pop("flash", []) if "session" in request.scope else [])
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def redirect(path: str) -> RedirectResponse:
    """Answer a form post with "see other" ``path``."""
    return RedirectResponse(path, status_code=303)


def safe_next(path: str) -> str:
    """Return ``path`` if it is a path on this site, else ``/exercises`` (no open redirect via ``?next=``)."""
    if path.startswith("/") and not path.startswith("//") and "\\" not in path and ":" not in path.split("?")[0]:
        return path
    return "/exercises"


def _user_for_error_page(request: Request) -> MeOut | None:
    """Return the user a page error happened to (looked up here when no user dependency ran)."""
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


def error_page(request: Request, status: int, message: str, exc: Exception) -> Response:
    """Answer a failed page request: the log-in redirect, the log-in form again, or the error page."""
    if isinstance(exc, Unauthorized) and request.method == "GET":
        return redirect_to_login(request)
    if isinstance(exc, PasswordChangeRequired) and request.method == "GET":
        return RedirectResponse(f"/account/password?next={quote(request.url.path)}", status_code=303)
    if isinstance(exc, Forbidden) and request.url.path == "/login":  # an expired log-in form: offer a fresh one
        return render(request, "login.html", 403, user=None, next="/exercises", email="", error=message)
    title = TITLES.get(status, "Something went wrong")
    user = _user_for_error_page(request)
    return render(request, "error.html", status, user=user, title=title, message=message, code=status)


def redirect_to_login(request: Request) -> RedirectResponse:
    """Send the visitor to the log-in page, coming back to this page afterwards."""
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
