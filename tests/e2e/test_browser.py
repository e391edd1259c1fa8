"""A learner in a real headless Chromium: log in, open each shipped exercise, submit, watch the verdict arrive."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import PASSWORD
from tests.support import BANK, REPO_ROOT, bank_file

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"Chromium is not installed at {CHROMIUM}")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.mark.parametrize(
    ("slug", "path", "verdict"),
    [
        ("python-split-batch", "wrong/round_robin.py", "failed"),
        ("python-split-batch", "solution.py", "passed"),
        ("torch-unwrap-state-dict", "solution.py", "passed"),
    ],
)
def test_learner_submits_in_the_browser_and_sees_the_verdict(
    live_server: str, browser: object, slug: str, path: str, verdict: str
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(f"{live_server}/exercises/{slug}")
        expect(page).to_have_url(f"{live_server}/login?next=/exercises/{slug}")
        page.get_by_label("E-mail").fill("ada@example.com")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(f"{live_server}/exercises/{slug}")

        page.get_by_label("Your code").fill(bank_file(slug, path))
        page.get_by_role("button", name="Submit").click()
        expect(page.locator("#result-status")).to_have_text("graded", timeout=120_000)
        expect(page.locator("#result-verdict")).to_have_text(verdict)
        rows = page.locator("#result-tests tbody tr")
        assert rows.count() >= 1
        if verdict == "failed":
            expect(page.locator("#result-tests tbody tr.outcome-failed").first).to_be_visible()
            expect(page.locator("#result-tests tr.feedback.outcome-failed").first).not_to_be_empty()
        else:
            assert page.locator("#result-tests tbody tr.outcome-failed").count() == 0
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"exercise-{slug}-{verdict}.png"), full_page=True)
    finally:
        page.close()


def test_catalogue_lists_every_exercise(live_server: str, browser: object) -> None:
    from playwright.sync_api import Browser

    assert isinstance(browser, Browser)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(f"{live_server}/login")
        page.get_by_label("E-mail").fill("ada@example.com")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{live_server}/exercises")
        for folder in BANK.glob("*/exercise.toml"):
            assert page.locator(f"a[href='/exercises/{folder.parent.name}']").count() >= 1
        page.screenshot(path=str(SCREENSHOTS / "catalogue.png"), full_page=True)
    finally:
        page.close()
