"""A real LTI 1.3 platform on the loopback, for the tests: a Starlette app under uvicorn in a thread.

Contract:
- ``LoopbackPlatform.start()`` serves on ``127.0.0.1`` (a free port); ``issuer`` is ``http://127.0.0.1:<port>``.
  Endpoints: ``/.well-known/openid-configuration`` (``config_overrides`` change or, set to None, drop members),
  ``/register`` (Dynamic Registration: records each call in ``registrations`` with its Authorization header,
  answers the body with ``client_id`` and the ``deployment_id``, or the client id only when
  ``registration_gives_deployment`` is off, as Canvas does; refuses a wrong ``registration_token``),
  ``/jwks`` (the published keys; ``jwks_fetches`` counts calls), ``/auth`` (the OIDC authorisation endpoint:
  checks the request as a platform would and answers an auto-posting form with a signed id_token for the
  launch ``prepare(spec)`` registered under the login hint), ``/token`` (the OAuth 2 client-credentials grant
  with a JWT client assertion: verified against ``tool_jwks()``, gpulab's JWKS, which a test sets; ``iss`` =
  ``sub`` = the client id, ``aud`` the token URL, unexpired, ``jti`` never seen; each call is recorded in
  ``token_requests`` with its verdict; a good one answers a fresh bearer token for the asked scopes) and
  ``POST /ags/lineitems/{item}/scores`` (AGS scores: needs a bearer token this platform issued with the score
  scope and the score media type; answers 503 while ``scores_down``, ``scores_status`` when set, and 404 for
  a line item in ``deleted_lineitems``; every call lands in ``score_calls``, the accepted ones in ``scores``
  with their line item and query string), and
  ``GET /nrps/contexts/{context}/memberships`` (NRPS 2.0: needs a bearer token this platform issued with the
  context membership scope; pages from number ``roster_down_from`` on answer 503 (None: none do); serves
  ``roster_pages`` (a list of member lists) as membership containers, one page per ``?page=N``, each but the
  last with a ``Link: <...>; rel="next"`` to the following one; every call lands in ``roster_calls``).
  ``nrps_claim(context_id)`` is the launch claim naming that service, for ``LaunchSpec.claims``.
  ``GET /course/{hint}`` is a course page that shows the tool in a frame, whose source is the tool's login
  initiation (``tool_login_url``, which a test sets) for the launch ``prepare(spec)`` named ``hint``.
- ``rotate()`` makes a new signing key and, unless ``keep_old``, stops publishing the old one.
- ``id_token(nonce=..., spec=...)`` signs a token directly, for the refusal tests: ``claims`` overrides claims
  (a value of None removes one), ``header`` the JOSE header, ``key``/``alg`` the signature; ``unsigned_token``
  makes an ``alg: none`` one. Claim names are spelled out here, independently of ``app.domain.lti``.
"""

from __future__ import annotations

import base64
import html
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import uvicorn
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, OctKey, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
TOOL_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-tool-configuration"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
TEACHING_ASSISTANT = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"
INSTITUTION_INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/institution/person#Instructor"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
NRPS_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
NRPS_MEDIA_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"


def new_key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"use": "sig", "alg": "RS256"}, auto_kid=True)


@dataclass
class LaunchSpec:
    """Who launches, from which course and link, and as what."""

    sub: str = field(default_factory=lambda: "user-" + secrets.token_hex(6))
    name: str | None = "Ada Lovelace"
    email: str | None = None
    roles: list[str] = field(default_factory=lambda: [LEARNER])
    context: dict[str, Any] | None = field(
        default_factory=lambda: {"id": f"ctx-{secrets.token_hex(4)}", "title": "GPU Programming 101", "label": "GPU101"}
    )
    resource_link: dict[str, Any] = field(
        default_factory=lambda: {"id": f"rl-{secrets.token_hex(4)}", "title": "Week 1"}
    )
    target_link_uri: str = "http://testserver/lti/launch"
    message_type: str = "LtiResourceLinkRequest"
    deployment_id: str | None = None  # None: the platform's
    claims: dict[str, Any] = field(default_factory=dict)


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


class LoopbackPlatform:
    """A learning platform speaking LTI 1.3 over real HTTP on 127.0.0.1 (see the module contract)."""

    def __init__(self) -> None:
        self.keys: list[RSAKey] = [new_key()]  # the first one signs; all are published
        self.client_id = "client-" + secrets.token_hex(4)
        self.deployment_id = "deployment-" + secrets.token_hex(4)
        self.registration_token: str | None = None
        self.registration_gives_deployment = True  # Canvas answers a registration with the client id only
        self.registrations: list[dict[str, Any]] = []
        self.config_requests: list[dict[str, str]] = []
        self.config_overrides: dict[str, Any] = {}
        self.jwks_fetches = 0
        self.auth_requests: list[dict[str, str]] = []
        self.redirect_uris = ["http://testserver/lti/launch"]
        self._prepared: dict[str, LaunchSpec] = {}
        self.tool_jwks: Callable[[], dict[str, Any]] | None = None  # gpulab's public keys, for client assertions
        self.token_requests: list[dict[str, Any]] = []
        self.issued_tokens: dict[str, list[str]] = {}  # access token -> its scopes
        self._seen_jti: set[str] = set()
        self.scores_down = False
        self.deleted_lineitems: set[str] = set()  # deleted in the platform: their scores are refused for good
        self.scores_status: int | None = None  # set: every score call gets this status
        self.score_calls: list[dict[str, Any]] = []
        self.scores: list[dict[str, Any]] = []
        self.roster_pages: list[list[dict[str, Any]]] = [[]]
        self.roster_down_from: int | None = None
        self.roster_calls: list[dict[str, Any]] = []
        self.tool_login_url: str | None = None  # gpulab's /lti/login, for the course page's frame
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> LoopbackPlatform:
        app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._configuration),
                Route("/register", self._register, methods=["POST"]),
                Route("/jwks", self._jwks),
                Route("/auth", self._auth, methods=["GET", "POST"]),
                Route("/token", self._token, methods=["POST"]),
                Route("/ags/lineitems/{item}/scores", self._score, methods=["POST"]),
                Route("/nrps/contexts/{context}/memberships", self._memberships),
                Route("/course/{hint}", self._course_page),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="loopback-platform", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the loopback platform did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openid_configuration_url(self) -> str:
        return self.issuer + "/.well-known/openid-configuration"

    @property
    def auth_url(self) -> str:
        return self.issuer + "/auth"

    @property
    def token_url(self) -> str:
        return self.issuer + "/token"

    @property
    def jwks_url(self) -> str:
        return self.issuer + "/jwks"

    def memberships_url(self, context_id: str) -> str:
        return f"{self.issuer}/nrps/contexts/{context_id}/memberships"

    def nrps_claim(self, context_id: str) -> dict[str, Any]:
        """The ``namesroleservice`` launch claim naming this platform's memberships service of a context."""
        return {NRPS_CLAIM: {"context_memberships_url": self.memberships_url(context_id), "service_versions": ["2.0"]}}

    # --- keys and tokens -------------------------------------------------------------------------------------

    def rotate(self, *, keep_old: bool = False) -> RSAKey:
        """Sign with a new key from now on; publish the old one too only if ``keep_old``."""
        key = new_key()
        self.keys = [key, *self.keys] if keep_old else [key]
        return key

    def prepare(self, spec: LaunchSpec) -> str:
        """Remember ``spec`` for the next authorisation request; return the login hint that names it."""
        hint = "hint-" + secrets.token_hex(8)
        self._prepared[hint] = spec
        return hint

    def claims(self, *, nonce: str, spec: LaunchSpec, client_id: str | None = None) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": client_id or self.client_id,
            "sub": spec.sub,
            "exp": now + 300,
            "iat": now,
            "nonce": nonce,
            "name": spec.name,
            "email": spec.email,
            LTI + "message_type": spec.message_type,
            LTI + "version": "1.3.0",
            LTI + "deployment_id": spec.deployment_id or self.deployment_id,
            LTI + "target_link_uri": spec.target_link_uri,
            LTI + "resource_link": spec.resource_link,
            LTI + "roles": spec.roles,
            LTI + "context": spec.context,
            "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint": {
                "scope": ["https://purl.imsglobal.org/spec/lti-ags/scope/score"],
                "lineitems": f"{self.issuer}/ags/lineitems",
                "lineitem": f"{self.issuer}/ags/lineitems/{spec.resource_link.get('id')}",
            },
        }
        claims.update(spec.claims)
        return {name: value for name, value in claims.items() if value is not None}

    def id_token(
        self,
        *,
        nonce: str,
        spec: LaunchSpec,
        claims: dict[str, Any] | None = None,
        header: dict[str, Any] | None = None,
        key: RSAKey | OctKey | None = None,
        alg: str = "RS256",
    ) -> str:
        """Return a signed id_token for ``spec`` (see the module contract for the overrides)."""
        body = {**self.claims(nonce=nonce, spec=spec), **(claims or {})}
        body = {name: value for name, value in body.items() if value is not None}
        signer = key or self.keys[0]
        jose = {"alg": alg, "kid": signer.kid, **(header or {})}
        jose = {name: value for name, value in jose.items() if value is not None}
        return jwt.encode(jose, body, signer, algorithms=[alg])

    def unsigned_token(self, *, nonce: str, spec: LaunchSpec) -> str:
        """Return an ``alg: none`` token for ``spec``: header and claims, no signature."""
        return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(self.claims(nonce=nonce, spec=spec))}."

    # --- endpoints -------------------------------------------------------------------------------------------

    async def _configuration(self, request: Request) -> Response:
        self.config_requests.append({"authorization": request.headers.get("authorization", "")})
        config: dict[str, Any] = {
            "issuer": self.issuer,
            "authorization_endpoint": self.auth_url,
            "token_endpoint": self.token_url,
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            "token_endpoint_auth_signing_alg_values_supported": ["RS256"],
            "jwks_uri": self.jwks_url,
            "registration_endpoint": self.issuer + "/register",
            "scopes_supported": ["openid", "https://purl.imsglobal.org/spec/lti-ags/scope/score"],
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public", "pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": ["sub", "iss", "name", "email"],
            "https://purl.imsglobal.org/spec/lti-platform-configuration": {
                "product_family_code": "loopback",
                "version": "1.0",
                "messages_supported": [{"type": "LtiResourceLinkRequest"}, {"type": "LtiDeepLinkingRequest"}],
            },
        }
        config.update(self.config_overrides)
        return JSONResponse({name: value for name, value in config.items() if value is not None})

    async def _register(self, request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        body = await request.json()
        self.registrations.append({"authorization": authorization, "body": body})
        if self.registration_token and authorization != f"Bearer {self.registration_token}":
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        self.redirect_uris = list(body.get("redirect_uris", []))
        tool = dict(body.get(TOOL_CONFIGURATION, {}))
        if self.registration_gives_deployment:
            tool["deployment_id"] = self.deployment_id
        return JSONResponse({**body, "client_id": self.client_id, TOOL_CONFIGURATION: tool})

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        return JSONResponse({"keys": [key.as_dict(private=False) for key in self.keys]})

    async def _auth(self, request: Request) -> Response:
        params = dict(request.query_params)
        if request.method == "POST":
            params.update({k: v for k, v in (await request.form()).items() if isinstance(v, str)})
        self.auth_requests.append(params)
        expected = {"scope": "openid", "response_type": "id_token", "response_mode": "form_post", "prompt": "none"}
        wrong = [name for name, value in expected.items() if params.get(name) != value]
        if wrong or params.get("client_id") != self.client_id:
            return HTMLResponse(f"bad authentication request: {wrong or 'client_id'}", status_code=400)
        if params.get("redirect_uri") not in self.redirect_uris:
            return HTMLResponse("redirect_uri not registered", status_code=400)
        spec = self._prepared.get(params.get("login_hint", ""))
        if spec is None or not params.get("nonce") or not params.get("state"):
            return HTMLResponse("unknown login_hint, or no nonce/state", status_code=400)
        token = self.id_token(nonce=params["nonce"], spec=spec)
        fields = {"id_token": token, "state": params["state"]}
        inputs = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(value, quote=True)}">'
            for name, value in fields.items()
        )
        page = (
            f'<!doctype html><form id="launch" method="post" action="{html.escape(params["redirect_uri"])}">'
            f"{inputs}</form><script>document.getElementById('launch').submit()</script>"
        )
        return HTMLResponse(page)

    async def _course_page(self, request: Request) -> Response:
        """A course page of the platform that shows the tool in a frame, launching the prepared ``hint``."""
        hint = request.path_params["hint"]
        spec = self._prepared.get(hint)
        if spec is None or self.tool_login_url is None:
            return HTMLResponse("unknown launch", status_code=404)
        query = urlencode({
            "iss": self.issuer, "login_hint": hint, "target_link_uri": spec.target_link_uri,
            "client_id": self.client_id, "lti_deployment_id": spec.deployment_id or self.deployment_id,
        })  # fmt: skip
        src = html.escape(f"{self.tool_login_url}?{query}", quote=True)
        page = (
            '<!doctype html><title>Course</title><link rel="icon" href="data:,"><h1>Course on the platform</h1>'
            f'<iframe id="tool" title="gpulab" src="{src}" width="1000" height="640"></iframe>'
        )
        return HTMLResponse(page)

    def _check_assertion(self, form: dict[str, str]) -> str | None:
        """Return why the client-credentials request in ``form`` is refused, or None when it is good."""
        if form.get("grant_type") != "client_credentials":
            return "grant_type"
        if form.get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
            return "client_assertion_type"
        if self.tool_jwks is None:
            return "no tool JWKS"
        try:
            published = KeySet.import_key_set(self.tool_jwks())  # type: ignore[arg-type]
            token = jwt.decode(form.get("client_assertion", ""), published, ["RS256"])
        except (JoseError, ValueError) as exc:
            return f"signature: {exc}"
        claims = token.claims
        now = time.time()
        if claims.get("iss") != self.client_id or claims.get("sub") != self.client_id:
            return "iss/sub"
        if claims.get("aud") != self.token_url:
            return "aud"
        if not isinstance(claims.get("exp"), int) or claims["exp"] < now or claims.get("iat", now + 60) > now + 5:
            return "exp/iat"
        jti = claims.get("jti")
        if not jti or jti in self._seen_jti:
            return "jti"
        self._seen_jti.add(jti)
        return None

    async def _token(self, request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        refused = self._check_assertion(form)
        self.token_requests.append({"form": form, "refused": refused})
        if refused is not None:
            return JSONResponse({"error": "invalid_client", "error_description": refused}, status_code=401)
        token = "at-" + secrets.token_hex(12)
        self.issued_tokens[token] = form.get("scope", "").split()
        return JSONResponse({"access_token": token, "token_type": "Bearer", "expires_in": 3600})

    async def _score(self, request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        call = {
            "item": request.path_params["item"],
            "query": request.url.query,
            "authorization": authorization,
            "content_type": request.headers.get("content-type", ""),
            "body": json.loads(await request.body() or b"null"),
        }
        self.score_calls.append(call)
        if self.scores_down:
            return JSONResponse({"error": "down for maintenance"}, status_code=503)
        token = authorization.removeprefix("Bearer ")
        if "https://purl.imsglobal.org/spec/lti-ags/scope/score" not in self.issued_tokens.get(token, []):
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        if call["content_type"] != "application/vnd.ims.lis.v1.score+json":
            return JSONResponse({"error": "unsupported media type"}, status_code=415)
        if self.scores_status is not None:
            return JSONResponse({"error": f"status {self.scores_status}"}, status_code=self.scores_status)
        if call["item"] in self.deleted_lineitems:
            return JSONResponse({"error": "no such line item"}, status_code=404)
        self.scores.append(call)
        return Response(status_code=204)

    async def _memberships(self, request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        context = request.path_params["context"]
        call = {
            "context": context,
            "query": request.url.query,
            "authorization": authorization,
            "accept": request.headers.get("accept", ""),
        }
        self.roster_calls.append(call)
        page = int(request.query_params.get("page", "1"))
        if self.roster_down_from is not None and page >= self.roster_down_from:
            return JSONResponse({"error": "down for maintenance"}, status_code=503)
        if NRPS_SCOPE not in self.issued_tokens.get(authorization.removeprefix("Bearer "), []):
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        if NRPS_MEDIA_TYPE not in call["accept"]:
            return JSONResponse({"error": "not acceptable"}, status_code=406)
        if not 1 <= page <= len(self.roster_pages):
            return JSONResponse({"error": "no such page"}, status_code=404)
        body = {
            "id": str(request.url),
            "context": {"id": context, "label": "GPU101", "title": "GPU Programming 101"},
            "members": self.roster_pages[page - 1],
        }
        headers = {"Content-Type": NRPS_MEDIA_TYPE}
        if page < len(self.roster_pages):
            headers["Link"] = f'<{self.memberships_url(context)}?page={page + 1}>; rel="next"'
        return Response(json.dumps(body), headers=headers)
