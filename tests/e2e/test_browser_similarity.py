"""A similarity check in a real headless Chromium: an instructor starts one on an exercise of `gpulab serve`
(the embedded dispatcher runs it in the background), follows it until it is done, and opens the most similar
pair side by side with the matched fragments highlighted and the learners' code escaped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import SCREENSHOTS, log_in, serve_gpulab, watched_page
from tests.support import BANK, bank_file

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SLUG = "torch-allreduce-grads"
INSTRUCTOR = "ina@example.com"
LEARNERS = ("ada@example.com", "bob@example.com", "cy@example.com", "dee@example.com")
FLAT = bank_file(SLUG, "right/flat_buffer.py")
CODES = {
    "ada@example.com": FLAT + "\n# <b>bold</b></pre><script>window.hacked = 1</script>\n",
    "bob@example.com": FLAT.replace("flat", "buf").replace("grads", "gs"),  # a renamed copy
    "cy@example.com": FLAT.replace("    offset = 0\n", "    # walk the buffer\n    offset = 0\n"),
    "dee@example.com": bank_file(SLUG, "starter.py"),  # handed in the starter: shares nothing of its own
}


def _seed(db_file: Path) -> None:
    """Add the exercise and one graded submission per learner straight into the served SQLite database."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from app.domain.exercises.bank import upsert_exercise
    from app.domain.models import Submission, SubmissionStatus, User
    from worker.bank.spec import load_exercise
    from worker.core.outcome import Verdict

    engine = create_engine(f"sqlite:///{db_file}")
    try:
        with Session(engine) as session:
            exercise, _ = upsert_exercise(session=session, spec=load_exercise(BANK / SLUG))
            assert exercise.current_version is not None
            for email, code in CODES.items():
                user = session.scalar(select(User).where(User.email == email))
                assert user is not None
                session.add(
                    Submission(user_id=user.id, exercise_version_id=exercise.current_version.id, code=code,
                               status=SubmissionStatus.graded, verdict=Verdict.passed, score=1.0, max_score=1.0)
                )  # fmt: skip
            session.commit()
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def similarity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("similarity")
    users = [(INSTRUCTOR, "instructor"), *((email, "learner") for email in LEARNERS)]
    with serve_gpulab(data, users, sync=False) as base:
        _seed(data / "gpulab.db")
        yield base


def test_a_similarity_check_highlights_the_shared_fragments(similarity_server: str, browser: object) -> None:
    from playwright.sync_api import Browser, expect

    base = similarity_server
    assert isinstance(browser, Browser)
    page = watched_page(browser)
    log_in(page, base, INSTRUCTOR, landing="/instructor")
    page.goto(f"{base}/instructor/exercises/{SLUG}")
    page.get_by_role("link", name="Similarity").click()
    expect(page.get_by_role("note")).to_contain_text("never a verdict or a penalty")
    page.get_by_role("button", name="Start similarity check").click()
    expect(page.locator("#similarity-status")).to_have_text("done", timeout=90_000)  # the page reloads when done
    expect(page.locator("#similarity-summary")).to_contain_text("4 submissions compared")
    rows = page.locator("#similarity-pairs tbody tr")
    expect(rows).to_have_count(3)  # ada, bob and cy pairwise; dee's starter matches nobody
    expect(page.locator("#similarity-clusters li")).to_have_count(1)
    expect(page.locator("#similarity-clusters li")).to_contain_text("3 submissions")
    assert "dee@example.com" not in page.locator("#similarity-pairs").inner_text()

    rows.first.get_by_role("link", name="Side by side").click()
    expect(page.locator("h1")).to_contain_text("Pair 1")
    sides = page.locator(".sim-side")
    expect(sides).to_have_count(2)
    for index in (0, 1):
        marks = sides.nth(index).locator("mark.sim-match")
        assert marks.count() >= 1
        assert "all_reduce" in " ".join(marks.all_inner_texts())
    # Learner code is text: the comment's markup shows as written and runs nothing.
    assert page.locator(".sim-code b, .sim-code script").count() == 0
    assert page.evaluate("window.hacked") is None
    if "ada@example.com" in page.locator("#similarity-sides").inner_text():
        expect(page.locator("#similarity-sides")).to_contain_text("<script>window.hacked = 1</script>")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "instructor-similarity-pair.png"), full_page=True)
    assert page.problems == []
