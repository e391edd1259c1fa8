"""Drafts in a real Chromium: a closed tab, a killed browser, a lost connection or a second tab lose no work.

One `gpulab serve` on a private copy of two exercises of the bank (a code exercise and a quiz); each test logs its
own learner in, so their drafts never meet.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CHROMIUM, PASSWORD, log_in, serve_gpulab, watched_page
from tests.support import BANK, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLUG = "python-split-batch"
QUIZ = "quiz-torch-dataparallel-why"
LEARNERS = [f"{name}@example.com" for name in ("tab", "crash", "offline", "twotabs", "quiz")]
CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("drafts")
    bank = data / "bank"
    for slug in (SLUG, QUIZ):
        shutil.copytree(BANK / slug, bank / slug, ignore=shutil.ignore_patterns("__pycache__"))
    with serve_gpulab(data, [(email, "learner") for email in LEARNERS], exercises_dir=str(bank)) as base:
        yield base


def _type_at_end(page: Any, text: str) -> None:
    page.locator(".cm-editor .cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def _editor_text(page: Any) -> str:
    return str(page.evaluate("() => window.gpulabExercise.editor().getValue()"))


def _on_disk(profile: Path, marker: str) -> bool:
    """Say whether Chromium's localStorage files of ``profile`` hold ``marker`` (stored as Latin-1 or UTF-16)."""
    wanted = (marker.encode("latin-1"), marker.encode("utf-16-le"))
    files = (profile / "Default" / "Local Storage" / "leveldb").glob("*")
    return any(any(w in f.read_bytes() for w in wanted) for f in files if f.is_file())


def _server_draft(page: Any, base: str, slug: str = SLUG) -> dict[str, Any]:
    answer = page.request.get(f"{base}/api/exercises/{slug}/draft")
    assert answer.ok, answer.text()
    return dict(answer.json())


def test_a_closed_tab_loses_no_code_and_the_draft_comes_back_on_another_device(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser, timezone_id="Europe/Berlin")
    log_in(page, server, "tab@example.com", landing=f"/exercises/{SLUG}")
    _type_at_end(page, "\n# work in progress, not submitted")
    expect(page.locator("#draft-status")).to_contain_text("Draft saved at")
    page.context.close()  # the tab (and its browser window) is gone

    other = watched_page(browser, timezone_id="America/New_York")  # another device: nothing local
    log_in(other, server, "tab@example.com", landing=f"/exercises/{SLUG}")
    assert _editor_text(other).endswith("# work in progress, not submitted")
    expect(other.locator("#draft-status")).to_contain_text("Your draft saved")
    expect(other.locator("#draft-status")).to_contain_text("is in the editor (not submitted)")
    # Back to the starter: the draft goes too, so no device brings the old work back.
    other.once("dialog", lambda dialog: dialog.accept())
    other.get_by_role("button", name="Reset to starter").click()
    wait_for(lambda: _server_draft(other, server)["revision"] == 0, timeout_s=10)
    assert "work in progress" not in _editor_text(other)
    assert other.problems == []
    other.context.close()


def test_a_killed_browser_loses_no_code(server: str, browser: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    profile = tmp_path / "profile"
    chromium = browser.browser_type  # a second browser with a profile on disk, as a learner's is
    context = chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROME_ARGS, headless=True
    )
    page = context.pages[0] if context.pages else context.new_page()
    log_in(page, server, "crash@example.com", landing=f"/exercises/{SLUG}")
    # The saves never reach the server before the crash: the only copy is the one this browser keeps.
    page.route("**/api/exercises/*/draft", lambda route: route.abort())
    _type_at_end(page, "\n# typed just before the crash")
    expect(page.locator("#draft-status")).to_contain_text("kept in this browser")
    # Chromium writes a page's localStorage to disk within seconds (its commit delay), not at every change: a crash
    # that soon after the last keystroke loses those seconds. The kill waits until the copy is on disk.
    wait_for(lambda: _on_disk(profile, "typed just before the crash"), timeout_s=60)
    subprocess.run(["pkill", "-KILL", "-f", f"user-data-dir={profile}"], check=False)  # no pagehide, no unload
    wait_for(lambda: subprocess.run(["pgrep", "-f", f"user-data-dir={profile}"], capture_output=True).returncode,
             timeout_s=20)  # fmt: skip
    with contextlib.suppress(Exception):  # the connection to the killed browser is gone
        context.close()

    context = chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROME_ARGS, headless=True
    )
    try:
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(f"{server}/exercises/{SLUG}")
        if "/login" in page.url:  # the session cookie did not survive: log in again, the local copy did
            page.get_by_label("E-mail").fill("crash@example.com")
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(f"{server}/exercises/{SLUG}")
        expect(page.locator("#draft-status")).to_contain_text("Draft saved at")
        assert _editor_text(page).endswith("# typed just before the crash")
        assert _server_draft(page, server)["code"].endswith("# typed just before the crash")
    finally:
        context.close()


def test_an_offline_edit_arrives_after_the_connection_returns(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser)
    log_in(page, server, "offline@example.com", landing=f"/exercises/{SLUG}")
    page.context.set_offline(True)
    _type_at_end(page, "\n# written on a train")
    expect(page.locator("#draft-status")).to_contain_text("Offline: your changes are kept in this browser")
    page.context.set_offline(False)
    expect(page.locator("#draft-status")).to_contain_text("Draft saved at")
    assert _server_draft(page, server)["code"].endswith("# written on a train")
    page.context.close()


def test_two_tabs_never_overwrite_each_other_silently(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    first = watched_page(browser)
    log_in(first, server, "twotabs@example.com", landing=f"/exercises/{SLUG}")
    second = first.context.new_page()
    second.goto(f"{server}/exercises/{SLUG}")
    _type_at_end(first, "\n# from the first tab")
    expect(first.locator("#draft-status")).to_contain_text("Draft saved at")
    _type_at_end(second, "\n# from the second tab")
    expect(second.locator("#draft-status")).to_contain_text("Another tab or device saved newer work")
    assert _server_draft(first, server)["code"].endswith("# from the first tab")  # nothing overwritten
    second.get_by_role("button", name="Load it").click()
    expect(second.locator("#draft-status")).to_contain_text("Loaded the draft saved at")
    assert _editor_text(second).endswith("# from the first tab")
    first.context.close()


def test_quiz_answers_come_back_after_a_reload(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser)
    log_in(page, server, "quiz@example.com", landing=f"/exercises/{QUIZ}")
    first = page.locator("fieldset[data-question] input").first
    first.check()
    expect(page.locator("#draft-status")).to_contain_text("Draft saved at")
    page.reload()
    expect(page.locator("fieldset[data-question] input").first).to_be_checked()
    expect(page.locator("#draft-status")).to_contain_text("Your answers so far were saved")
    assert page.problems == []
    page.context.close()
