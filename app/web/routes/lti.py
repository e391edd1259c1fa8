"""LTI 1.3 endpoints under ``/lti``: gpulab's keys, Dynamic Registration, the OIDC login and the launch.

Contract (the rules themselves live in ``app.domain.lti``; this is the HTTP side):
- ``GET /lti/jwks`` (``jwks_router``, JSON, in the OpenAPI schema): gpulab's public JWK Set, made at first use.
- ``GET /lti/register?openid_configuration=...&registration_token=...``: Dynamic Registration's initiation URL,
  for admins. Nobody logged in goes to the log-in page and comes back with the query intact (``AdminDep``'s
  detour would drop it, hence ``OptionalUser`` and the role check here); another role is refused (403). On
  success the page shows the platform and loads ``/lti/close.js``, which posts
  ``{subject: "org.imsglobal.lti.close"}`` to the window that opened it (or its parent frame), as the spec asks.
- ``GET|POST /lti/login``: the third-party initiated login. It answers a redirect to the platform's
  authorisation endpoint and sets the state cookie (below); an unknown platform or deployment is refused.
  Loaded into a frame (``Sec-Fetch-Dest: iframe``: the LMS shows gpulab inside its page) it answers instead
  ``lti/login_check.html`` (200) with both cookies it needs, the state and a probe (``gpulab_lti_probe``, path
  ``/lti/cookie-check``): ``/static/lti-login.js`` asks ``GET /lti/cookie-check`` (``{"cookies": bool}``)
  whether the probe came back, and goes on to the platform if it did; if the browser dropped it (third-party
  cookies blocked) the page says so and offers the same login in a new window, where gpulab's cookies are
  first-party and the launch opens there.
- ``POST /lti/launch`` (``id_token``, ``state``, or the platform's ``error``): checks the state cookie, verifies
  the token and provisions (``launch.verify``, ``provisioning.provision``), commits, signs the user in
  (``app.domain.accounts.passwords.start_session``) and redirects (303) to where the launch lands. The state cookie is
  deleted whatever the outcome: a state is good for one launch.
- A deep linking request (``LtiDeepLinkingRequest``) posted to ``/lti/launch`` goes through the same checks,
  then ``deep_linking.begin`` (instructors only: anyone else gets the refusal page, 403); the instructor is
  signed in, the pending settings are kept in the new session, and the answer is a redirect (303) to
  ``GET /lti/deep-link``, the picker page (``lti/pick.html``: the course's assignments and the published
  exercises, checkboxes). ``POST /lti/deep-link`` (``FORM_CSRF``: it is gpulab's own form; field ``item``, once
  per pick) signs the ``LtiDeepLinkingResponse`` (``deep_linking.respond``), forgets the pending settings and
  answers ``lti/return.html``: a form posting ``JWT`` to the platform's ``deep_link_return_url``, submitted by
  ``/static/lti-return.js`` (no inline script), with a Continue button for browsers without script. Both
  need the session the request started (else the refusal page, 403).
- Refusals: every domain error of these steps is the page ``lti/refused.html`` saying why, with 400 (malformed,
  or a message gpulab does not handle yet), 401 (``Unauthorized``: the token cannot be trusted), 403
  (``Forbidden``: this browser, platform, deployment or user may not), or 409 (``Conflict``). The session is
  rolled back first, so a refused registration, login or launch stores nothing, except that a verified launch
  refused for its deployment (``launch.DeploymentRefused``) is noted on the platform for the admins
  (``platforms.note_refused``: ``/admin/lti`` offers to accept it), and the page says so. (The app's error page
  would answer a 401 on a GET with the log-in page, and a malformed request with 422.)
- ``POST /lti/deep-link/course`` (``FORM_CSRF``, field ``course``): links the request's LMS course to another
  course the instructor teaches (next term's copy: ``deep_linking.relink``), then the picker again.
- This router has no ``FORM_CSRF`` (only ``POST /lti/deep-link`` and ``/lti/deep-link/course``, gpulab's own
  forms, carry it): the login and launch posts come cross-site from the platform by design, and the OIDC state
  cookie and nonce bind them to the browser instead.
- The state cookie ``gpulab_lti_<state>`` (path ``/lti/launch``, HttpOnly, ``lti_state_max_age_s``): the launch
  is a cross-site POST from the platform, which browsers send only ``SameSite=None`` cookies with, and they
  keep those only when ``Secure``. So when gpulab is served over https (``GPULAB_PUBLIC_URL``, the request, or
  ``GPULAB_COOKIE_SECURE``) it is ``SameSite=None; Secure``. Over plain http (dev; the loopback test server)
  a ``SameSite=None`` cookie without ``Secure`` would be dropped, so it is ``SameSite=Lax``: launches then work
  from a platform on the same site (Moodle on localhost:8080 and gpulab on localhost:8000), and a test client
  sends it like any cookie.
- Over https the state and probe cookies are ``Partitioned`` (CHIPS), and so is the session cookie when
  ``GPULAB_FRAME_ANCESTORS`` lets an LMS frame gpulab (``SameSite=None``): browsers that block third-party
  cookies keep partitioned ones for the frame's top-level site, so a framed launch and the pages after it work.
  Without ``GPULAB_FRAME_ANCESTORS`` gpulab's pages refuse to be framed (``SecurityHeadersMiddleware``) and the
  platform must open gpulab in a new window (docs/lti.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.domain.lti import deep_linking, keys, launch, oidc, platforms, provisioning, registration
from app.domain.lti import vocabulary as v
from app.domain.lti.platform_keys import PlatformKeys
from app.domain.lti.toolconfig import ToolUrls, tool_urls
from app.domain.models import Course, Role, User
from app.settings import Settings
from app.web.deps import OptionalUser, SessionDep, SettingsDep
from app.web.middleware import origin_of, page_policy
from app.web.pages import FORM_CSRF, redirect, render
from app.web.sessions import start_session
from worker.core.errors import Conflict, Forbidden, GpulabError, InvalidInput, Unauthorized

router = APIRouter(prefix="/lti", include_in_schema=False)
jwks_router = APIRouter(prefix="/lti", tags=["lti"])

LAUNCH_PATH = "/lti/launch"
LOGIN_PATH = "/lti/login"
PROBE_PATH = "/lti/cookie-check"
PROBE_COOKIE = "gpulab_lti_probe"
DEEP_LINK_PATH = "/lti/deep-link"
STATE_RE = re.compile(r"[A-Za-z0-9_-]{20,128}")  # what oidc.begin makes; anything else never had a cookie
CLOSE_SCRIPT = '(window.opener || window.parent).postMessage({subject: "org.imsglobal.lti.close"}, "*");\n'
ADVICE = {
    "launch": "Open gpulab again from your course. If this keeps happening, show this message to whoever runs "
    "your learning platform.",
    "registration": "Check the tool registration in the platform and start it again.",
}


def _tool(request: Request, settings: Settings) -> ToolUrls:
    """Return gpulab's LTI endpoints under its public URL (else the address this request came to)."""
    return tool_urls(settings.public_url or str(request.base_url))


def _status(exc: GpulabError) -> int:
    if isinstance(exc, Unauthorized):
        return 401
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, Conflict):
        return 409
    return 400


def _refused(request: Request, session: Session, exc: GpulabError, *, step: str) -> Response:
    """Roll back and answer the refusal page for ``exc`` (see the module contract)."""
    session.rollback()
    noted = isinstance(exc, launch.DeploymentRefused)
    if isinstance(exc, launch.DeploymentRefused):  # the platform signed it: worth the admins' look
        platforms.note_refused(session=session, platform_id=exc.platform_id, deployment_id=exc.deployment_id)
        session.commit()
    status = _status(exc)
    title = f"{'Launch' if step == 'launch' else 'Registration'} refused"
    return render(
        request, "lti/refused.html", status, title=title, message=exc.message, code=status, advice=ADVICE[step],
        noted=noted,
    )  # fmt: skip


def _cookie_flags(settings: Settings, tool: ToolUrls) -> tuple[bool, Literal["none", "lax"]]:
    """Return Secure and SameSite for the state cookie (see the module contract)."""
    secure = settings.cookie_secure or tool.base.startswith("https://")
    return secure, "none" if secure else "lax"


def _platform_keys(request: Request, settings: Settings) -> PlatformKeys:
    """Return this app's cache of platform keys, making it on first use."""
    found: PlatformKeys | None = getattr(request.app.state, "lti_platform_keys", None)
    if found is None:
        found = PlatformKeys(timeout_s=settings.lti_http_timeout_s)
        request.app.state.lti_platform_keys = found
    return found


# --- gpulab's keys -----------------------------------------------------------------------------------------


@jwks_router.get("/jwks", summary="gpulab's public keys (JWK Set) for LTI platforms")
def jwks(session: SessionDep, settings: SettingsDep) -> dict[str, list[dict[str, Any]]]:
    """Return gpulab's current and recently retired public signing keys."""
    published = keys.jwks(session=session, grace_s=settings.lti_key_grace_s)
    session.commit()  # the first call made the first key
    return published


# --- Dynamic Registration ----------------------------------------------------------------------------------


@router.get("/register")
def register(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    user: OptionalUser,
    openid_configuration: Annotated[str, Query(max_length=1024)] = "",
    registration_token: Annotated[str, Query(max_length=4096)] = "",
) -> Response:
    """Register gpulab with the platform that sent an admin here; store it and tell the platform to close."""
    if user is None:
        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse("/login?" + urlencode({"next": back}), status_code=303)
    try:
        if user.role is not Role.admin:
            raise Forbidden("registering a learning platform needs the admin role")
        if not openid_configuration:
            raise InvalidInput("start the registration from the platform: this address needs openid_configuration")
        platform = registration.register(
            session=session,
            openid_configuration=openid_configuration,
            registration_token=registration_token or None,
            tool=_tool(request, settings),
            timeout_s=settings.lti_http_timeout_s,
            allow_http=settings.relaxed,
        )
        session.commit()
    except GpulabError as exc:
        return _refused(request, session, exc, step="registration")
    return render(request, "lti/registered.html", platform=platform)


@router.get("/close.js")
async def close_script() -> Response:
    """Return the script that tells the platform's window the registration is done."""
    return Response(CLOSE_SCRIPT, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})


# --- the OIDC login and the launch -------------------------------------------------------------------------


def _set_cookie(
    response: Response, name: str, value: str, *, max_age_s: int, path: str, secure: bool,
    same_site: Literal["none", "lax"], partitioned: bool,
) -> None:  # fmt: skip
    """Set an HttpOnly cookie (``max_age_s`` 0 deletes it), ``Partitioned`` when asked.

    By hand for ``Partitioned`` alone: Starlette builds cookies with ``http.cookies``, which learns that
    attribute only in Python 3.14; the attribute is appended to the header Starlette made.
    """
    response.set_cookie(name, value, max_age=max_age_s, path=path, httponly=True, secure=secure, samesite=same_site)
    if partitioned:
        header, made = response.raw_headers[-1]
        assert header == b"set-cookie"  # set_cookie appends its header last
        response.raw_headers[-1] = (header, made + b"; Partitioned")


def _framed(request: Request) -> bool:
    """Say whether the browser loads this request into a frame (an LMS that shows gpulab inside its page)."""
    return request.headers.get("sec-fetch-dest", "").lower() in ("iframe", "frame")


def _begin(request: Request, session: Session, settings: Settings, params: dict[str, str]) -> Response:
    tool = _tool(request, settings)
    try:
        login_request = oidc.login_request(params)
        pending, url = oidc.begin(session=session, login=login_request, tool=tool)
    except GpulabError as exc:
        return _refused(request, session, exc, step="launch")
    secure, same_site = _cookie_flags(settings, tool)
    partitioned = secure  # CHIPS: a framed gpulab keeps its cookies where third-party ones are blocked
    response: Response
    if _framed(request):
        # Inside a frame the browser may refuse gpulab's cookies: lti-login.js asks /lti/cookie-check whether the
        # probe came back before going on, and offers the same login in a window of its own when it did not.
        again = f"{LOGIN_PATH}?{urlencode({k: v for k, v in vars(login_request).items() if v is not None})}"
        response = render(request, "lti/login_check.html", auth_url=url, window_url=again)
        _set_cookie(
            response, PROBE_COOKIE, "1", max_age_s=settings.lti_state_max_age_s, path=PROBE_PATH, secure=secure,
            same_site=same_site, partitioned=partitioned,
        )  # fmt: skip
    else:
        response = RedirectResponse(url, status_code=302)
    _set_cookie(
        response, oidc.cookie_name(pending.state), oidc.seal(pending, secret=settings.session_secret()),
        max_age_s=settings.lti_state_max_age_s, path=LAUNCH_PATH, secure=secure, same_site=same_site,
        partitioned=partitioned,
    )  # fmt: skip
    return response


@router.get("/cookie-check")
async def cookie_check(request: Request) -> Response:
    """Say whether this browser sent back the probe cookie the framed login set (JSON ``{"cookies": bool}``)."""
    kept = request.cookies.get(PROBE_COOKIE) == "1"
    return JSONResponse({"cookies": kept}, headers={"Cache-Control": "no-store"})


@router.api_route("/login", methods=["GET", "POST"])
async def login(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """Start a launch the platform initiated: send the browser to the platform to authenticate."""
    params = dict(request.query_params)
    if request.method == "POST":
        form = await request.form()
        params.update({name: value for name, value in form.items() if isinstance(value, str)})
    return await run_in_threadpool(_begin, request, session, settings, params)


@router.post("/launch")
def launch_endpoint(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    id_token: Annotated[str, Form()] = "",
    state: Annotated[str, Form()] = "",
    error: Annotated[str, Form()] = "",
    error_description: Annotated[str, Form()] = "",
) -> Response:
    """Check the platform's id_token, sign its user in and send them where the launch lands."""
    state_ok = STATE_RE.fullmatch(state) is not None
    tool = _tool(request, settings)
    try:
        if error:
            said = f"{error}: {error_description}" if error_description else error
            raise InvalidInput(f"the platform did not sign you in ({said[:300]})")
        sealed = request.cookies.get(oidc.cookie_name(state)) if state_ok else None
        pending = oidc.unseal(
            sealed, secret=settings.session_secret(), state=state, max_age_s=settings.lti_state_max_age_s
        )
        verified = launch.verify(
            session=session,
            pending=pending,
            id_token=id_token,
            keys=_platform_keys(request, settings),
            leeway_s=settings.lti_leeway_s,
        )
        if verified.message_type == v.DEEP_LINKING_REQUEST:
            picking = deep_linking.begin(session=session, launch=verified)
            user, path = picking.user, DEEP_LINK_PATH
        else:
            landing = provisioning.provision(
                session=session,
                launch=verified,
                tool=tool,
                course_pages=True,  # /courses/{slug}: pages_courses
            )
            user, path, picking = landing.user, landing.path, None
        session.commit()
    except GpulabError as exc:
        response = _refused(request, session, exc, step="launch")
    else:
        start_session(request, user)
        if picking is not None:
            request.session[deep_linking.SESSION_KEY] = picking.pending.as_session()
        response = RedirectResponse(path, status_code=303)
    if state_ok:
        secure, same_site = _cookie_flags(settings, tool)
        _set_cookie(
            response, oidc.cookie_name(state), "", max_age_s=0, path=LAUNCH_PATH, secure=secure, same_site=same_site,
            partitioned=secure,
        )  # fmt: skip
    return response


# --- deep linking: the picker and the response -------------------------------------------------------------


def _picking(request: Request, user: object) -> deep_linking.Pending:
    """Return the deep linking request this signed-in browser has waiting, or raise ``Forbidden``."""
    if user is None:
        raise Forbidden("this browser is not signed in to gpulab; start again from the platform")
    return deep_linking.Pending.from_session(request.session.get(deep_linking.SESSION_KEY))


@router.get("/deep-link")
def deep_link_picker(request: Request, session: SessionDep, user: OptionalUser) -> Response:
    """Show the instructor what gpulab can place in the platform's course."""
    try:
        pending = _picking(request, user)
        course = session.get(Course, pending.course_id) if pending.course_id is not None else None
        offered = deep_linking.choices(session=session, course=course)
    except GpulabError as exc:
        return _refused(request, session, exc, step="launch")
    linkable = deep_linking.courses_to_link(session=session, pending=pending, user=user) if user is not None else []
    return render(request, "lti/pick.html", pending=pending, course=course, choices=offered, linkable=linkable)


@router.post("/deep-link/course", dependencies=[FORM_CSRF])
def deep_link_course(
    request: Request, session: SessionDep, user: OptionalUser, course: Annotated[str, Form(max_length=64)] = ""
) -> Response:
    """Link the LMS course of this request to another gpulab course of the instructor's (next term's copy)."""
    try:
        pending = _picking(request, user)
        assert isinstance(user, User)  # _picking refuses a browser that is not signed in
        moved = deep_linking.relink(session=session, pending=pending, user=user, course_slug=course)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _refused(request, session, exc, step="launch")
    request.session[deep_linking.SESSION_KEY] = moved.as_session()
    return redirect(DEEP_LINK_PATH)


@router.post("/deep-link", dependencies=[FORM_CSRF])
def deep_link_respond(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    user: OptionalUser,
    item: Annotated[list[str] | None, Form(max_length=200)] = None,
) -> Response:
    """Sign the deep linking response for the instructor's picks and send the browser back to the platform."""
    try:
        pending = _picking(request, user)
        token = deep_linking.respond(session=session, pending=pending, picked=item or [], tool=_tool(request, settings))
        session.commit()  # the first signature may have made gpulab's first key
    except GpulabError as exc:
        return _refused(request, session, exc, step="launch")
    request.session.pop(deep_linking.SESSION_KEY, None)
    answer = render(request, "lti/return.html", return_url=pending.return_url, jwt=token)
    # The one form of gpulab that posts to another site: its own policy lets it post to the platform's return URL.
    answer.headers["content-security-policy"] = page_policy(form_action=origin_of(pending.return_url))
    return answer
