"""A course across terms in a real Chromium: next term from last term's course, run, and last term archived.

The teacher copies ``gpu-fall`` to ``gpu-spring`` from the manage page (every date 182 days later), publishes the
copy's assignment and enrols the learner; the learner submits there and is graded. The teacher then archives
``gpu-fall``: nothing in it can change any more (a submission, an extension, an override, an enrolment are
refused), and its learner still reads their grade there.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import PASSWORD, log_in, serve_gpulab, store_graded, watched_page
from tests.support import BANK, bank_file

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLUG = "python-split-batch"
TEACHER, LEARNER = "teacher@example.com", "learner@example.com"
GRADING_MS = 120_000


@pytest.fixture(scope="module")
def fall(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("next-term")
    bank = data / "bank"
    shutil.copytree(BANK / SLUG, bank / SLUG, ignore=shutil.ignore_patterns("__pycache__"))
    with serve_gpulab(data, [(TEACHER, "instructor"), (LEARNER, "learner")], exercises_dir=str(bank)) as base:
        with httpx.Client(base_url=base, timeout=30) as staff:
            staff.post("/api/auth/login", json={"email": TEACHER, "password": PASSWORD}).raise_for_status()
            staff.post("/api/courses", json={"slug": "gpu-fall", "title": "GPUs"}).raise_for_status()
            staff.post("/api/courses/gpu-fall/members", json={"csv": f"email\n{LEARNER}\n"}).raise_for_status()
            due = (datetime.now(UTC) + timedelta(days=3)).replace(second=0, microsecond=0)
            made = staff.post("/api/courses/gpu-fall/assignments", json={
                "title": "Week 1", "items": [{"exercise": SLUG, "weight": 2}], "due_at": due.isoformat(),
                "max_attempts": 3, "late_until": (due + timedelta(days=1)).isoformat(), "late_credit_pct": 60,
            })  # fmt: skip
            made.raise_for_status()
        graded = store_graded(data / "gpulab.db", slug=SLUG, email=LEARNER, assignment_id=made.json()["id"], score=7.0)
        yield {"base": base, "week": made.json()["id"], "due": due, "graded": graded}


def test_next_term_from_this_one_runs_and_the_old_one_is_archived(fall: dict[str, Any], browser: Any) -> None:
    from playwright.sync_api import expect

    base = fall["base"]
    teacher = watched_page(browser, timezone_id="Europe/Paris")
    log_in(teacher, base, TEACHER)
    teacher.goto(f"{base}/courses/gpu-fall/manage")
    form = teacher.locator("#copy-form")
    form.get_by_label("Title").fill("GPUs")
    form.get_by_label("Short name").fill("gpu-spring")
    form.get_by_label("Term").fill("Spring 2027")
    form.get_by_label("Days to move every date by").fill("182")
    form.get_by_label("Bring this course's instructors and TAs along").check()
    form.get_by_role("button", name="Create next term's course").click()
    teacher.wait_for_url(f"{base}/courses/gpu-spring/manage#assignments")
    expect(teacher.locator(".flash-ok, .flash-info, .flash").first).to_contain_text("1 unpublished assignments")
    (copied,) = teacher.request.get(f"{base}/api/courses/gpu-spring").json()["assignments"]
    due = datetime.fromisoformat(copied["due_at"].replace("Z", "+00:00"))
    assert due == fall["due"] + timedelta(days=182) and not copied["is_published"] and copied["max_attempts"] == 3
    assert copied["late_credit_pct"] == 60 and [i["weight"] for i in copied["items"]] == [2.0]
    # Run it: publish the copy, enrol the learner (the CSV form of the manage page).
    body = {k: copied[k] for k in ("title", "opens_at", "due_at", "late_until", "late_credit_pct", "counts",
                                   "max_attempts", "practice", "leaderboard")}  # fmt: skip
    body |= {"is_published": True, "items": [{"exercise": SLUG, "weight": 2}]}
    published = teacher.request.put(f"{base}/api/assignments/{copied['id']}", data=body, headers={"Origin": base})
    assert published.ok, published.text()
    teacher.goto(f"{base}/courses/gpu-spring/manage")
    teacher.locator("#csv-text").fill(f"email\n{LEARNER}\n")
    teacher.locator("#enroll").get_by_role("button", name="Enroll").click()
    expect(teacher.locator("#report")).to_contain_text(LEARNER)

    learner = watched_page(browser, timezone_id="America/New_York")
    log_in(learner, base, LEARNER)
    learner.goto(f"{base}/courses")
    expect(learner.locator("#courses")).to_contain_text("Spring 2027")
    learner.goto(f"{base}/courses/gpu-spring/assignments/{copied['id']}/exercises/{SLUG}")
    expect(learner.locator(".cm-editor .cm-content")).to_be_visible()
    learner.evaluate("(code) => window.gpulabExercise.editor().setValue(code)", bank_file(SLUG, "solution.py"))
    learner.once("dialog", lambda dialog: dialog.accept())
    learner.get_by_role("button", name="Submit").click()
    expect(learner.locator("#result-verdict")).to_be_visible(timeout=GRADING_MS)
    expect(learner.locator("#result-verdict")).to_contain_text("passed", ignore_case=True, timeout=GRADING_MS)

    # The old term is archived from its manage page.
    teacher.goto(f"{base}/courses/gpu-fall/manage")
    teacher.get_by_role("button", name="Archive this course").click()
    teacher.wait_for_url(f"{base}/courses/gpu-fall")
    expect(teacher.locator("#archived-note")).to_be_visible()
    teacher.goto(f"{base}/courses")
    expect(teacher.locator("#courses")).not_to_contain_text("gpu-fall")
    expect(teacher.locator("#archived-link")).to_contain_text("Archived courses (1)")
    # Nothing can change in the archive.
    week = fall["week"]
    refused = {
        "extension": teacher.request.post(
            f"{base}/api/assignments/{week}/extensions",
            headers={"Origin": base},
            data={"email": LEARNER, "extra_attempts": 1, "reason": "late"},
        ),
        "enrolment": teacher.request.post(
            f"{base}/api/courses/gpu-fall/members",
            headers={"Origin": base},
            data={"csv": "email\nsomeone@example.com\n"},
        ),
    }
    for what, answer in refused.items():
        assert answer.status == 409 and "archived" in answer.json()["detail"], (what, answer.text())
    late = learner.request.post(f"{base}/api/exercises/{SLUG}/submissions", headers={"Origin": base},
                                data={"code": bank_file(SLUG, "solution.py"), "assignment_id": week})  # fmt: skip
    assert late.status == 403 and "archived" in late.json()["detail"]
    # Its learner still reads their grade and history there.
    learner.goto(f"{base}/courses/gpu-fall")
    expect(learner.locator("#archived-note")).to_contain_text("read-only")
    learner.goto(f"{base}/courses/gpu-fall/grades")
    expect(learner.locator("main")).to_contain_text("Week 1")
    mine = learner.request.get(f"{base}/api/courses/gpu-fall/grades/me").json()
    assert mine["total_pct"] is not None and mine["total_pct"] > 0
    learner.goto(f"{base}/courses/gpu-fall/assignments/{week}/exercises/{SLUG}")
    expect(learner.locator("#gate-text")).to_contain_text("archived")
    assert teacher.problems == [] and learner.problems == []
