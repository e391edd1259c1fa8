"""An LTI launch inside the platform's page, in Chromium: gpulab over https framed by a loopback platform.

Covers: Chromium blocking third-party cookies (``--test-third-party-cookie-phaseout``) still keeps gpulab's
Partitioned cookies in the platform's frame, so the framed launch signs the learner in and lands on the course
page there, and the pages after it keep the session (with the cookies unpartitioned the same test stays on the
login check: that Chromium flag does block them); a browser that drops gpulab's cookies in the frame (here
the framed login's ``Set-Cookie`` headers are removed on the way, as a browser blocking every third-party cookie
would) gets the "open in a new window" offer, and the launch completes in that window.
"""

from __future__ import annotations

import datetime
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from tests.app.domain.lti.platform import LaunchSpec, LoopbackPlatform
from tests.e2e.conftest import CHROMIUM, watched_page
from tests.support import REPO_ROOT, child_env, free_port, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _certificate(folder: Path) -> tuple[Path, Path]:
    """Write a self-signed certificate for ``localhost`` and its key; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    key_path, cert_path = folder / "key.pem", folder / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


@dataclass
class Framed:
    """gpulab over https at ``base`` and the platform that frames it."""

    base: str
    platform: LoopbackPlatform
    data: Path  # its data folder (the SQLite file a test adds rows to)

    def course_page(self) -> str:
        """Prepare a learner's launch; return the platform's course page that frames it."""
        spec = LaunchSpec(target_link_uri=f"{self.base}/courses", name="Framed Learner")
        return f"{self.platform.issuer}/course/{self.platform.prepare(spec)}"


@pytest.fixture(scope="module")
def framed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Framed]:
    folder = tmp_path_factory.mktemp("lti-https")
    key, cert = _certificate(folder)
    platform = LoopbackPlatform().start()
    port = free_port()
    base = f"https://localhost:{port}"
    env = child_env(
        mode="dev", data_dir=str(folder / "data"), secret_key="k" * 48, public_url=base, cookie_secure="true",
        frame_ancestors=platform.issuer,
    )  # fmt: skip
    done = subprocess.run(["gpulab", "db", "upgrade"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    _register(folder / "data" / "gpulab.db", platform)
    platform.redirect_uris = [f"{base}/lti/launch"]
    platform.tool_login_url = f"{base}/lti/login"
    log = folder / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--host", "127.0.0.1",
             "--port", str(port), "--ssl-keyfile", str(key), "--ssl-certfile", str(cert)],
            env=env, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip

    trusted = ssl.create_default_context(cafile=str(cert))

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(log.read_text(errors="replace"))
        try:
            return httpx.get(f"{base}/login", timeout=1, verify=trusted).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout_s=60, interval_s=0.3)
        yield Framed(base=base, platform=platform, data=folder / "data")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        platform.stop()


def _register(database: Path, platform: LoopbackPlatform) -> None:
    from app.domain.lti import platforms
    from app.domain.platform.db import engine_for

    engine = engine_for(f"sqlite:///{database}")
    with Session(engine) as session:
        platforms.register(
            session=session, issuer=platform.issuer, client_id=platform.client_id, name="Loopback",
            auth_login_url=platform.auth_url, auth_token_url=platform.token_url, jwks_url=platform.jwks_url,
            deployment_ids=[platform.deployment_id], allow_http=True,
        )  # fmt: skip
        session.commit()
    engine.dispose()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Chromium blocking third-party cookies as browsers are moving to (partitioned ones are kept)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--test-third-party-cookie-phaseout"],
        )  # fmt: skip
        try:
            yield browser
        finally:
            browser.close()


def _tool_frame(page: Any, base: str, *, at: str = "", timeout_s: float = 20) -> Any:
    """Return gpulab's frame in ``page`` once its URL contains ``at`` (Playwright's own waits keep its events going)."""
    for _ in range(int(timeout_s * 10)):
        for frame in page.frames:
            if frame.url.startswith(base) and at in frame.url:
                return frame
        page.wait_for_timeout(100)
    seen = [f.url for f in page.frames]
    texts = [f.content()[:2000] for f in page.frames]
    pytest.fail(f"no gpulab frame at {at!r}: frames {seen} {texts}")


def test_a_framed_launch_signs_in_and_keeps_the_session_in_the_frame(framed: Framed, chromium: Any) -> None:
    page = watched_page(chromium, ignore_https_errors=True)
    page.goto(framed.course_page())

    frame = _tool_frame(page, framed.base, at="/courses")  # the launch's target: gpulab's course list
    assert "Framed Learner" not in frame.url
    frame.click("a.course-link:has-text('GPU Programming 101')")  # a second page: the session came back with it
    frame.wait_for_selector("h1:has-text('GPU Programming 101')")
    assert "/login" not in frame.url and frame.locator("#logout").count() == 1
    assert page.problems == []


def test_a_frame_that_loses_the_cookies_offers_a_new_window_where_the_launch_completes(
    framed: Framed, chromium: Any
) -> None:
    page = watched_page(chromium, ignore_https_errors=True)

    def drop_cookies(route: Any) -> None:  # as a browser refusing every third-party cookie would
        if route.request.frame.parent_frame is None:
            route.continue_()
            return
        # Playwright fetches it anew, without the frame's Sec-Fetch-Dest: say it, as the browser did.
        answer = route.fetch(headers={**route.request.all_headers(), "sec-fetch-dest": "iframe"})
        headers = {k: v for k, v in answer.headers.items() if k.lower() != "set-cookie"}
        route.fulfill(response=answer, headers=headers)

    page.route(f"{framed.base}/lti/login*", drop_cookies)
    page.goto(framed.course_page())
    frame = _tool_frame(page, framed.base)
    frame.wait_for_selector("#lti-open-window", state="visible")
    assert "blocks gpulab's cookies" in frame.inner_text("#lti-login-blocked")

    with page.context.expect_page() as opened:
        frame.click("#lti-open-window")
    window = opened.value
    window.wait_for_url(f"{framed.base}/courses", timeout=20_000)
    assert window.locator("a.course-link:has-text('GPU Programming 101')").count() == 1
    assert window.locator("#logout").count() == 1  # signed in, in the window of its own
    assert page.problems == []


def test_a_timed_assignment_starts_and_counts_down_inside_the_lms_frame(framed: Framed, chromium: Any) -> None:
    page = watched_page(chromium, ignore_https_errors=True)
    page.goto(framed.course_page())
    frame = _tool_frame(page, framed.base, at="/courses")
    frame.click("a.course-link:has-text('GPU Programming 101')")
    frame.wait_for_selector("h1:has-text('GPU Programming 101')")
    slug = frame.url.rstrip("/").rsplit("/", 1)[-1]
    assignment_id = _timed_assignment(framed, slug)  # the course the launch provisioned gets a timed assessment
    frame.goto(f"{frame.url.rstrip('/')}/assignments/{assignment_id}")
    frame.wait_for_selector("button:has-text('Start')")
    frame.click("button:has-text('Start')")  # a form post with the session and its token, inside the frame
    frame.wait_for_selector(".countdown .countdown-left")
    assert "/login" not in frame.url and "Started: your time runs" in frame.inner_text("body")
    left = frame.inner_text(".countdown-left")
    assert left.startswith(("20:", "19:")), left  # counted from the server's 20 minutes
    assert page.problems == []


def _timed_assignment(framed: Framed, slug: str) -> int:
    """Add a published 20-minute assignment to the framed course, open now; return its id."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import select

    from app.domain.models import Assignment, Course
    from app.domain.platform.db import engine_for

    database = Path(framed.data) / "gpulab.db"
    engine = engine_for(f"sqlite:///{database}")
    try:
        with Session(engine) as session:
            course = session.scalars(select(Course).where(Course.slug == slug)).one()
            assignment = Assignment(
                course_id=course.id, title="Timed in the frame", time_limit_min=20,
                opens_at=datetime.now(UTC) - timedelta(hours=1), due_at=datetime.now(UTC) + timedelta(days=1),
            )  # fmt: skip
            session.add(assignment)
            session.commit()
            return int(assignment.id)
    finally:
        engine.dispose()
