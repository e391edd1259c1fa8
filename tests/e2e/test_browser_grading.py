"""Staff grading in a real headless Chromium: a learner answers a card quiz's staff-graded questions, an instructor
works through the grading queue with the keyboard (items toggled with digits, a reusable comment, Ctrl+Enter to
save and go on), releases the grades, and the learner sees the points, the rubric and the comment.
Screenshot: ``docs/screenshots/grading.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import SCREENSHOTS, log_in, serve_gpulab, watched_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = (("gus@example.com", "instructor"), ("ivy@example.com", "learner"))
SLUG = "quiz-tf-multigpu-basics"
SPEEDUP = (
    "Every GPU keeps a complete copy of the model and gets its own slice of the batch, so the slices are processed "
    "at the same time and a step covers more examples. The gradients are averaged so the copies stay identical."
)
SYNC = (
    "Each replica sees other examples and so computes another gradient; the all-reduce gives all of them the same "
    "averaged update, so the copies stay one model. Without it they would drift apart after the first step."
)


@pytest.fixture(scope="module")
def grading_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_gpulab(tmp_path_factory.mktemp("grading"), USERS) as base:
        yield base


def test_the_queue_by_keyboard_then_release_and_the_learner_sees_it(grading_server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    base = grading_server
    learner = watched_page(browser)
    log_in(learner, base, "ivy@example.com", landing=f"/exercises/{SLUG}")
    expect(learner.locator("fieldset[data-question=explain-speedup] legend")).to_contain_text("graded by staff")
    learner.get_by_label("Your answer").first.fill(SPEEDUP)
    learner.locator("#answer-explain-sync").fill(SYNC)
    learner.get_by_role("button", name="Check my answers").click()
    expect(learner.locator("#feedback-explain-speedup")).to_contain_text("Sent to staff")

    staff = watched_page(browser)
    log_in(staff, base, "gus@example.com", landing="/instructor")
    staff.goto(f"{base}/instructor/exercises/{SLUG}/grading")
    expect(staff.locator("#grading-counts")).to_contain_text("2 to grade")
    staff.get_by_role("link", name="Grade the next answer").click()
    expect(staff.locator("h1")).to_contain_text("explain-speedup")
    expect(staff.locator("#learner-answer")).to_contain_text("complete copy of the model")
    staff.locator("body").press("1")  # whole model
    staff.locator("body").press("2")  # split batch
    staff.locator("body").press("3")  # gradients combined
    expect(staff.locator("#rubric-total")).to_have_text("3")
    staff.get_by_role("button", name="What limits the gain? Think of the gradient exchange after every step.").click()
    expect(staff.locator("#grade-comment")).to_have_value(
        "What limits the gain? Think of the gradient exchange after every step."
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    staff.screenshot(path=str(SCREENSHOTS / "grading.png"), full_page=True)
    staff.locator("#grade-comment").press("Control+Enter")  # save, and on to the next answer
    expect(staff.locator("h1")).to_contain_text("explain-sync")
    expect(staff.locator(".flash").last).to_contain_text("Saved: 3 of 4 points.")
    for key in ("1", "2", "3"):
        staff.locator("body").press(key)
    expect(staff.locator("#rubric-total")).to_have_text("3")
    staff.locator("body").press("Control+Enter")
    expect(staff.locator(".flash").last).to_contain_text("Nothing left to grade here.")
    expect(staff.locator("#grading-counts")).to_contain_text("2 graded, not released")
    staff.get_by_role("button", name="Release 2 graded answers").click()
    expect(staff.locator(".flash").last).to_contain_text("Released 2 grades")

    learner.goto(f"{base}/exercises/{SLUG}/history")
    expect(learner.locator(".quiz-answers")).to_contain_text("Graded by staff: 3 of 4 points.")
    expect(learner.locator(".quiz-answers")).to_contain_text("What limits the gain?")
    expect(learner.locator(".quiz-answers")).to_contain_text("Graded by staff: 3 of 3 points.")
    assert staff.problems == [] and learner.problems == []
