"""A learner takes a quiz in headless Chromium at phone width: answers, reads the feedback, retries."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PASSWORD, SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SLUG = "quiz-torch-dataparallel-practice"


def test_learner_answers_a_quiz_sees_explanations_and_retries(live_server: str, browser: object) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(f"{live_server}/exercises/{SLUG}")
        page.get_by_label("E-mail").fill("bob@example.com")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(f"{live_server}/exercises/{SLUG}")

        purpose = page.locator("fieldset[data-question=purpose]")
        expect(purpose.locator("legend")).to_contain_text("Question 1")
        # Measured once the page and its stylesheets have loaded: before that a loaded machine shows raw layout.
        page.wait_for_load_state("load")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "no sideways scrolling"
        purpose.locator("input[value=a]").check()  # wrong on purpose
        page.locator("fieldset[data-question=wrap] input[value=a]").check()
        page.get_by_role("button", name="Check my answers").click()

        feedback = page.locator("#feedback-purpose")
        expect(feedback).to_be_visible()
        expect(feedback).to_contain_text("Not right.")
        expect(feedback).to_contain_text("Explanation")
        expect(feedback).to_contain_text("The model is copied whole to every GPU")
        expect(page.locator("#feedback-wrap")).to_contain_text("Correct.")
        expect(page.locator("#feedback-chunk-sizes")).to_contain_text("Not answered")
        expect(page.locator("#feedback-chunk-sizes")).not_to_contain_text("Explanation")
        expect(page.locator("#quiz-score")).to_contain_text("Score 1 / 8")
        page.screenshot(path=str(SCREENSHOTS / f"{SLUG}-first-try.png"), full_page=True)

        page.get_by_role("button", name="Start again").click()
        expect(feedback).to_be_hidden()
        purpose.locator("input[value=c]").check()
        page.locator("fieldset[data-question=wrap] input[value=a]").check()
        page.locator("fieldset[data-question=chunk-sizes] input[value=c]").check()
        page.get_by_role("button", name="Check my answers").click()
        expect(feedback).to_contain_text("Correct.")
        expect(page.locator("#quiz-score")).to_contain_text("Score 3 / 8")
        expect(page.locator("#quiz-score")).to_contain_text("best 3 after 2 attempts")
    finally:
        page.close()
