"""``create_app``: the lifespan recovers unfinished work and stops the dispatcher; headers and docs."""

from __future__ import annotations

import pytest

import app.jobs.dispatch
from app.main import SWAGGER_DIR, create_app
from app.settings import Settings
from tests.conftest import RecordingDispatcher, make_test_client

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("owns_all_running", [True, False], ids=["in-process", "celery"])
def test_lifespan_recovers_then_shuts_the_dispatcher_down(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, owns_all_running: bool
) -> None:
    fake = RecordingDispatcher(owns_all_running=owns_all_running)
    recovered: list[object] = []
    monkeypatch.setattr(app.jobs.dispatch, "get_dispatcher", lambda: fake)
    monkeypatch.setattr(app.jobs.dispatch, "recover_unfinished", lambda d: recovered.append(d) or 0)
    application = create_app(settings)
    with make_test_client(application) as client:
        # Only the process that grades everything recovers at start; in Celery mode the workers' sweepers do.
        assert recovered == ([fake] if owns_all_running else []) and not fake.shut_down
        assert client.get("/login").status_code == 200
    assert fake.shut_down


def test_after_an_app_stops_the_next_one_gets_a_live_dispatcher(settings: Settings) -> None:
    app.jobs.dispatch.reset_dispatcher()
    try:
        with make_test_client(create_app(settings)):
            first = app.jobs.dispatch.get_dispatcher()
        second = app.jobs.dispatch.get_dispatcher()
        assert second is not first  # the stopped one was forgotten with its lifespan
        assert isinstance(second, app.jobs.dispatch.InProcessDispatcher)
        assert second._pool.submit(lambda: 41 + 1).result(timeout=10) == 42  # it takes work
    finally:
        app.jobs.dispatch.reset_dispatcher()


def test_recovery_can_be_turned_off(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.jobs.dispatch, "get_dispatcher", lambda: pytest.fail("no dispatcher wanted"))
    application = create_app(settings)
    application.state.recover_on_start = False
    with make_test_client(application) as client:
        assert client.get("/login").status_code == 200


def test_security_headers_and_static_files(settings: Settings) -> None:
    application = create_app(settings)
    application.state.recover_on_start = False
    with make_test_client(application) as client:
        page = client.get("/login")
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        # The API page starts Swagger UI from a file of ours, so it keeps the policy (no inline script).
        assert "script-src 'self';" in client.get("/docs").headers["content-security-policy"]
        script = client.get("/static/exercise.js")
        assert script.status_code == 200 and "innerHTML" not in script.text.replace("never innerHTML", "")
        # Pages are never kept (Back/Forward asks again); static files and JSON keep their own rules.
        assert page.headers["cache-control"] == "no-store"
        assert client.get("/nowhere").headers["cache-control"] == "no-store"  # the HTML error page too
        assert "cache-control" not in script.headers


def test_api_docs_are_served_without_a_cdn(settings: Settings) -> None:
    application = create_app(settings)
    application.state.recover_on_start = False
    with make_test_client(application) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and '<html lang="en">' in page.text
        assert "cdn." not in page.text and "https://" not in page.text  # with or without the bundle
        if not (SWAGGER_DIR / "swagger-ui-bundle.js").is_file():
            assert 'href="/openapi.json"' in page.text  # the page says where the description is
            pytest.skip("the front-end build (scripts/setup) has not run")
        assert "/static/build/swagger/swagger-ui-bundle.js" in page.text and "/static/docs.js" in page.text
        assert client.get("/static/build/swagger/swagger-ui-bundle.js").status_code == 200
        assert client.get("/static/build/swagger/swagger-ui.css").status_code == 200
        spec = client.get("/openapi.json").json()
        assert spec["openapi"].startswith("3.1") and "/api/auth/login" in spec["paths"]


def test_only_the_named_lms_origins_may_frame_gpulab(settings: Settings) -> None:
    application = create_app(settings)
    application.state.recover_on_start = False
    with make_test_client(application) as client:
        closed = client.get("/login")
        assert closed.headers["x-frame-options"] == "DENY" and "samesite=lax" in closed.headers["set-cookie"].lower()

    framed = settings.model_copy(
        update={"frame_ancestors": "https://moodle.example.edu https://lms.example.org/", "cookie_secure": True}
    )
    application = create_app(framed)
    application.state.recover_on_start = False
    with make_test_client(application, base_url="https://testserver") as client:
        page = client.get("/login")
        assert "x-frame-options" not in page.headers  # CSP's frame-ancestors names who may; XFO cannot list origins
        csp = page.headers["content-security-policy"]
        assert "frame-ancestors https://moodle.example.edu https://lms.example.org;" in csp
        cookie = page.headers["set-cookie"].lower()
        assert "samesite=none" in cookie and "secure" in cookie  # the session works inside the LMS frame


def test_dev_framing_without_secure_cookies_keeps_a_cookie_browsers_accept_and_says_why(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # SameSite=None without Secure is dropped by Chromium: no log-in would work at all, not even top-level.
    framed = settings.model_copy(update={"frame_ancestors": "http://127.0.0.1:9000"})
    assert framed.relaxed and not framed.cookie_secure
    with caplog.at_level("WARNING", logger="app.main"):
        application = create_app(framed)
    assert "without GPULAB_COOKIE_SECURE" in caplog.text
    application.state.recover_on_start = False
    with make_test_client(application) as client:
        page = client.get("/login")
        cookie = page.headers["set-cookie"].lower()
        assert "samesite=lax" in cookie and "samesite=none" not in cookie and "partitioned" not in cookie
        assert "frame-ancestors http://127.0.0.1:9000;" in page.headers["content-security-policy"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [("moodle.example.edu", "give origins"), ("https://a.edu 'unsafe-inline'", "give origins"),
     ("https://a.edu/x;y", "give origins")],
)  # fmt: skip
def test_frame_ancestors_must_be_origins(settings: Settings, value: str, problem: str) -> None:
    from worker.core.errors import ConfigError

    with pytest.raises(ConfigError, match=problem):
        Settings(**{**settings.model_dump(), "frame_ancestors": value})


def test_framing_outside_dev_needs_secure_cookies(settings: Settings) -> None:
    from worker.core.errors import ConfigError

    fields = {
        **settings.model_dump(), "mode": "production", "secret_key": "x" * 64, "sandbox": "local",
        "frame_ancestors": "https://lms.example.edu",
    }  # fmt: skip
    with pytest.raises(ConfigError, match="GPULAB_COOKIE_SECURE"):
        Settings(**{**fields, "cookie_secure": False})
    assert Settings(**{**fields, "cookie_secure": True}).frame_origins == ("https://lms.example.edu",)
