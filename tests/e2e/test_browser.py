"""A learner in a real headless Chromium against a real `gpulab serve`: the CodeMirror editor, live grading over
SSE, example runs, attempt history with a diff, the catalogue's progress, and a phone-sized screen.

The tests of this module share one server and run in order (the journey builds the history the later
tests look at). Screenshots of the main pages go to ``docs/screenshots/`` (shown in the README).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import PASSWORD, SCREENSHOTS
from tests.support import BANK, bank_file
from worker.bank.spec import load_exercise

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SLUG = "python-split-batch"
GRADING_MS = 180_000  # two cores shared with other test runs: grading may queue behind them
FULL = f"{load_exercise(BANK / SLUG).max_score:g}"  # the exercise's full marks, as the bank has them now


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page at 1280x800 (or ``@pytest.mark.parametrize('viewport', …)``) that records browser errors."""
    viewport = getattr(request, "param", {"width": 1280, "height": 800})
    context = browser.new_context(viewport=viewport)
    tab = context.new_page()
    tab.problems = []  # console errors (CSP violations included) and uncaught exceptions
    tab.on("console", lambda m: tab.problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.problems.append(str(e)))
    try:
        yield tab
    finally:
        context.close()


def log_in(page: Any, base: str, email: str, path: str) -> None:
    page.goto(f"{base}{path}")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}{path}")


def set_editor(page: Any, code: str) -> None:
    """Replace the editor's whole text through CodeMirror's own API (what a paste would do)."""
    page.evaluate("(code) => window.gpulabExercise.editor().setValue(code)", code)


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def test_learner_fails_fixes_in_the_editor_and_passes(live_server: str, page: Any) -> None:
    from playwright.sync_api import expect

    log_in(page, live_server, "ada@example.com", f"/exercises/{SLUG}")
    editor = page.locator(".cm-editor .cm-content")
    expect(editor).to_be_visible()
    expect(page.locator("textarea#code")).to_be_hidden()  # still the form field, kept in sync
    expect(page.locator(".cm-lineNumbers .cm-gutterElement").nth(1)).to_have_text("1")  # nth(0) measures widths

    # A wrong solution: graded over SSE with a progress indicator, then failing tests with feedback.
    set_editor(page, bank_file(SLUG, "wrong/round_robin.py"))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#progress")).to_be_visible()
    expect(page.locator("#result-verdict")).to_have_text("failed", timeout=GRADING_MS)
    expect(page.locator("#progress")).to_be_hidden()
    expect(page.locator("#result-tests tr.feedback.outcome-failed").first).not_to_be_empty()
    expect(page.locator("#result-device")).to_contain_text("Ran on")
    expect(page.locator("#live-status")).to_contain_text("Graded: failed")
    expect(page.locator("#standing-state")).to_have_text("Attempted")
    shot(page, "exercise-failed.png")

    # The fix: the solution, plus a line typed into CodeMirror, submitted with Ctrl+Enter.
    solution = bank_file(SLUG, "solution.py").rstrip("\n") + "\n"
    set_editor(page, solution)
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("# fixed in the editor")
    expect(page.locator("textarea#code")).to_have_value(solution + "# fixed in the editor")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#result-verdict")).to_have_text("passed", timeout=GRADING_MS)
    expect(page.locator("#result-tests tbody tr.outcome-failed")).to_have_count(0)
    expect(page.locator("#standing-best")).to_have_text(f"best: {FULL}/{FULL}")
    expect(page.locator("#standing-history")).to_have_text("History (2)")
    shot(page, "exercise-passed.png")
    assert page.problems == []


def test_example_tests_run_without_a_submission(live_server: str, page: Any) -> None:
    from playwright.sync_api import expect

    log_in(page, live_server, "bob@example.com", f"/exercises/{SLUG}")
    set_editor(page, bank_file(SLUG, "wrong/round_robin.py"))
    page.get_by_role("button", name="Run example tests").click()
    expect(page.locator("#result-title")).to_have_text("Example tests (not graded)", timeout=GRADING_MS)
    expect(page.locator("#result-verdict")).to_have_text("failed")
    expect(page.locator("#result-tests tbody tr").first).to_contain_text("test_examples.py::")
    expect(page.locator("#standing-history")).to_be_hidden()  # nothing was stored

    # Reset to starter asks first; accepting puts the starter back into the editor.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Reset to starter").click()
    expect(page.locator("textarea#code")).to_have_value(bank_file(SLUG, "starter.py"))
    assert page.problems == []


def test_history_shows_attempts_and_the_diff(live_server: str, page: Any) -> None:
    from playwright.sync_api import expect

    log_in(page, live_server, "ada@example.com", f"/exercises/{SLUG}/history")
    expect(page.get_by_role("link", name="Attempt 2", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Attempt 1", exact=True)).to_be_visible()
    expect(page.locator(".best")).to_have_text(f"best: {FULL}/{FULL}")
    expect(page.locator(".diff-add", has_text="# fixed in the editor")).to_be_visible()  # the code came from the editor
    assert page.locator(".diff-del").count() >= 1
    shot(page, "history.png")
    page.get_by_role("link", name="Attempt 1", exact=True).click()
    expect(page.locator("#attempt")).to_contain_text("This was your first attempt")
    assert page.problems == []


def test_catalogue_shows_progress_for_every_exercise(live_server: str, page: Any) -> None:
    from playwright.sync_api import expect

    log_in(page, live_server, "ada@example.com", "/exercises")
    for folder in BANK.glob("*/exercise.toml"):
        expect(page.locator(f"a[href='/exercises/{folder.parent.name}']").first).to_be_visible()
    row = page.locator(".exercise-item", has=page.locator(f"a[href='/exercises/{SLUG}']"))
    expect(row.locator(".state")).to_have_text("Passed")
    expect(row.locator(".best")).to_have_text(f"best {FULL}/{FULL}")
    shot(page, "catalogue.png")
    assert page.problems == []


@pytest.mark.parametrize("page", [{"width": 375, "height": 667}], indirect=True)
def test_phone_sized_exercise_page_is_usable(live_server: str, page: Any) -> None:
    from playwright.sync_api import expect

    log_in(page, live_server, "bob@example.com", f"/exercises/{SLUG}")
    editor = page.locator(".cm-editor")
    expect(editor).to_be_visible()
    box = editor.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375 and box["height"] >= 200
    assert page.evaluate("document.documentElement.scrollWidth") <= 375  # nothing pushes the page sideways
    page.locator(".cm-content").click()
    page.keyboard.type("zz_phone")
    assert "zz_phone" in page.locator("textarea#code").input_value()
    expect(page.get_by_role("button", name="Submit")).to_be_visible()
    page.get_by_role("button", name="Submit").scroll_into_view_if_needed()
    shot(page, "exercise-phone.png")
    assert page.problems == []


def test_logged_out_pages_and_errors(live_server: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{live_server}/exercises")
    expect(page).to_have_url(f"{live_server}/login?next=/exercises")
    log_in(page, live_server, "bob@example.com", "/exercises")
    response = page.goto(f"{live_server}/exercises/no-such-exercise")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{live_server}/login")
