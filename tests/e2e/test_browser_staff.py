"""Staff in a real headless Chromium: an instructor uploads, checks and publishes an exercise; a learner sees it;
an admin reads the dashboard and downloads grades that match the database; learner code never runs as script."""

from __future__ import annotations

import csv
import io
import sqlite3
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import PASSWORD, SCREENSHOTS, serve_gpulab
from tests.support import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = (("ina@example.com", "instructor"), ("ada@example.com", "admin"), ("lea@example.com", "learner"))
SLUG = "browser-add"
FILES = {
    "exercise.toml": 'title = "Add in the browser"\ntopic = "Warm-up"\n[limits]\ntimeout_s = 20\nmemory_mb = 256\n\n'
    '[[wrong]]\nfile = "wrong/minus.py"\nmust_fail = ["test_add.py::test_small"]\nwhy = "subtracts"\n',
    "prompt.md": "Write `add(a, b)` that returns **a + b**.\n",
    "starter.py": "def add(a, b):\n    raise NotImplementedError\n",
    "solution.py": "def add(a, b):\n    return a + b\n",
    "wrong/minus.py": "def add(a, b):\n    return a - b\n",
    "tests/test_add.py": textwrap.dedent(
        """
        def test_small(submission):
            assert submission.add(1, 2) == 3, "add(1, 2) should be 3"
        """
    ),
}


@pytest.fixture(scope="module")
def staff_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Serve on SQLite with an instructor, an admin and a learner; yield the base URL and the database file."""
    data = tmp_path_factory.mktemp("staff")
    with serve_gpulab(data, USERS, sync=False) as base:
        yield base, data / "gpulab.db"


def _login(page, base: str, email: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{base}/login")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login" not in url)


def test_staff_flow_in_the_browser(staff_server: tuple[str, Path], browser: object, tmp_path: Path) -> None:
    from playwright.sync_api import Browser, expect

    base, db_file = staff_server
    assert isinstance(browser, Browser)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    archive = tmp_path / f"{SLUG}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path, content in FILES.items():
            zf.writestr(f"{SLUG}/{path}", content)

    # The instructor uploads, checks and publishes.
    staff = browser.new_page(viewport={"width": 1280, "height": 800})
    _login(staff, base, "ina@example.com")
    staff.goto(f"{base}/instructor")
    staff.get_by_label("upload an exercise folder").set_input_files(str(archive))
    staff.get_by_role("button", name="Upload as draft").click()
    expect(staff).to_have_url(f"{base}/instructor/exercises/{SLUG}/versions/1")
    staff.get_by_role("button", name="Run the check").click()
    expect(staff.locator("#check-status")).to_have_text("passed", timeout=120_000)
    staff.screenshot(path=str(SCREENSHOTS / "instructor-version-checked.png"), full_page=True)
    staff.get_by_role("button", name="Publish version 1").click()
    expect(staff.locator(".flash-ok")).to_contain_text("live")

    # The editor: live Markdown preview of the prompt.
    staff.goto(f"{base}/instructor/new?from={SLUG}&version=1")
    staff.get_by_label("Markdown").fill("Some **bold** words and `code`.")
    expect(staff.locator("#prompt-preview strong")).to_have_text("bold")
    staff.screenshot(path=str(SCREENSHOTS / "instructor-authoring.png"), full_page=False)

    # A learner sees it, cannot open staff pages, and submits code holding a script.
    learner = browser.new_page(viewport={"width": 1280, "height": 800})
    dialogs: list[str] = []
    learner.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _login(learner, base, "lea@example.com")
    learner.goto(f"{base}/exercises")
    expect(learner.locator(f"a[href='/exercises/{SLUG}']").first).to_be_visible()
    for path in ("/instructor", "/admin", f"/instructor/exercises/{SLUG}"):
        assert learner.goto(f"{base}{path}").status == 403
    evil = "def add(a, b):\n    return a + b\n# </pre><script>alert('owned')</script><img src=x onerror=alert(2)>\n"
    api = learner.request.post(f"{base}/api/exercises/{SLUG}/submissions", data={"code": evil},
                               headers={"Origin": base})  # fmt: skip
    assert api.status == 202, api.text()

    # The instructor reads it: shown literally, nothing runs.
    staff_dialogs: list[str] = []
    staff.on("dialog", lambda d: (staff_dialogs.append(d.message), d.dismiss()))
    staff.goto(f"{base}/instructor/exercises/{SLUG}/submissions")
    staff.screenshot(path=str(SCREENSHOTS / "instructor-submissions.png"), full_page=True)
    staff.locator("#submissions tbody a").first.click()
    expect(staff.locator("#learner-code")).to_contain_text("<script>alert('owned')</script>")
    assert staff.locator("script:not([src])").count() == 0 and staff.locator("img").count() == 0
    staff.wait_for_timeout(500)
    assert staff_dialogs == [] and dialogs == []

    # The admin's dashboard and CSV match the database.
    admin = browser.new_page(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    _login(admin, base, "ada@example.com")
    admin.goto(f"{base}/admin")
    wait_for(lambda: _settled(db_file), timeout_s=120, interval_s=0.5)
    admin.reload()
    expect(admin.locator("#exercise-stats")).to_contain_text(SLUG)
    # The embedded server grades and runs examples itself: every queue and lane has its live worker.
    expect(admin.locator("body")).not_to_contain_text("no live worker")
    admin.screenshot(path=str(SCREENSHOTS / "admin-dashboard.png"), full_page=True)
    with admin.expect_download() as download_info:
        admin.locator("#csv-link").click()
    rows = list(csv.DictReader(io.StringIO(Path(download_info.value.path()).read_text())))
    with sqlite3.connect(db_file) as conn:
        expected = conn.execute(
            "SELECT u.email, count(s.id), max(s.score) FROM users u JOIN submissions s ON s.user_id = u.id "
            "WHERE u.role = 'learner' GROUP BY u.email"
        ).fetchall()
    got = {(r["email"], int(r["attempts"]), float(r["best_score"])) for r in rows if r["exercise"] == SLUG}
    assert got == {(email, n, float(best)) for email, n, best in expected}
    for page in (staff, learner, admin):
        page.close()


def _settled(db_file: Path) -> bool:
    with sqlite3.connect(db_file) as conn:
        return conn.execute("SELECT count(*) FROM submissions WHERE status IN ('queued', 'running')").fetchone()[0] == 0


def test_phone_layout_of_the_dashboard(staff_server: tuple[str, Path], browser: object) -> None:
    from playwright.sync_api import Browser

    base, _ = staff_server
    assert isinstance(browser, Browser)
    page = browser.new_page(viewport={"width": 390, "height": 844})
    _login(page, base, "ada@example.com")
    page.goto(f"{base}/admin/users")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390 + 1, f"the users page scrolls sideways on a phone ({width}px)"
    page.screenshot(path=str(SCREENSHOTS / "admin-users-phone.png"), full_page=True)
    page.close()
