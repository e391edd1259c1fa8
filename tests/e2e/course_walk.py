"""The graded course a real class walks through, seeded in a served gpulab for the course-walk browser tests.

``seed_walk`` makes it through the API as its instructor and learners (a course with a TA and two learners, an
assignment with dates, late credit and an attempt limit holding a code exercise and a quiz, graded attempts with
scores that do not round evenly, a staff-graded quiz answer, a regrade request and its answer, a finished
similarity run, an LTI key, an assignment whose exercise has a leaderboard with two passing learners on it) and
returns what the tests need to reach every page; ``pages`` lists those pages with
the role that sees them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.conftest import log_in, post_json, store_graded, watched_page
from tests.support import REPO_ROOT, bank_file, wait_for
from worker.core.outcome import Verdict

ADMIN, INSTRUCTOR, TA = "root@example.com", "ina@example.com", "tom@example.com"
LEARNER, OTHER = "nia@example.com", "kai@example.com"
USERS = ((ADMIN, "admin"), (INSTRUCTOR, "instructor"), (TA, "learner"), (LEARNER, "learner"), (OTHER, "learner"))
COURSE = "gpu-walk"
CODE = "python-split-batch"
QUIZ = "quiz-tf-multigpu-basics"
BOARD = "torch-ddp-comm-tuning"  # opts in to a leaderboard of bytes per step
BOARD_METRIC = "bytes all-reduced per optimizer step (rank 0)"
ZONES = ("America/New_York", "Asia/Kolkata")
# A graded attempt's time: 23:16 UTC is the day before in New York and the day after in Kolkata.
GRADED_AT = datetime(2026, 12, 1, 23, 16, tzinfo=UTC)
AXE = REPO_ROOT / "frontend" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
EXPLAIN = (
    "Every GPU keeps a complete copy of the model and gets its own slice of the batch, so the slices are processed "
    "at the same time and a step covers more examples. The gradients are averaged so the copies stay identical."
)


@dataclass(frozen=True)
class Walk:
    """What the seeded course holds: ids the pages' addresses need."""

    base: str
    db_file: Path
    assignment_id: int
    closed_id: int  # an assignment that closed three days ago, holding CODE
    attempt_id: str  # LEARNER's graded code attempt under the assignment
    quiz_attempt_id: str
    grade_id: int  # the staff-graded answer of LEARNER's quiz attempt
    regrade_id: int
    similarity_run_id: int
    board_id: int  # an assignment holding BOARD, two passing attempts ranked on its leaderboard


def seed_walk(browser: Any, base: str, db_file: Path) -> Walk:
    """Make the course, its assignment and the attempts, requests and runs that fill every page."""
    staff = watched_page(browser)
    log_in(staff, base, INSTRUCTOR)
    post_json(staff, base, "/api/courses", {"slug": COURSE, "title": "GPU walk"})
    post_json(staff, base, f"/api/courses/{COURSE}/members",
              {"csv": f"email,name,role\n{TA},Tom,ta\n{LEARNER},Nia,learner\n{OTHER},Kai,learner\n"})  # fmt: skip
    due = (datetime.now(UTC) + timedelta(days=7)).replace(hour=17, minute=0, second=0, microsecond=0)
    week = {
        "title": "Week 1", "due_at": due.isoformat(), "late_until": (due + timedelta(days=2)).isoformat(),
        "late_credit_pct": 50, "max_attempts": 3, "items": [{"exercise": CODE, "weight": 2}, {"exercise": QUIZ}],
    }  # fmt: skip
    assignment_id = post_json(staff, base, f"/api/courses/{COURSE}/assignments", week)["id"]
    closed = {"title": "Week 0", "due_at": (due - timedelta(days=10)).isoformat(), "items": [{"exercise": CODE}]}
    closed_id = post_json(staff, base, f"/api/courses/{COURSE}/assignments", closed)["id"]
    board_id = post_json(staff, base, f"/api/courses/{COURSE}/assignments",
                         {"title": "Week 2", "items": [{"exercise": BOARD}]})["id"]  # fmt: skip
    for email, nbytes in ((LEARNER, 1_612_345.0), (OTHER, 1_612_345.0)):  # a tie: both rank first
        measured = [{"test": "test_comm_tuning.py::test_bytes_per_step", "name": BOARD_METRIC, "value": nbytes,
                     "unit": "B", "target": nbytes, "compare": "<=", "met": True}]  # fmt: skip
        store_graded(db_file, slug=BOARD, email=email, assignment_id=board_id, measurements=measured,
                     created_at=GRADED_AT, finished_at=GRADED_AT)  # fmt: skip

    # Scores that do not round evenly (4.67/10), once under the assignment and once as practice.
    code = bank_file(CODE, "wrong/round_robin.py")  # a copy, renamed, is what the similarity run finds
    attempt = store_graded(db_file, slug=CODE, email=LEARNER, assignment_id=assignment_id, verdict=Verdict.failed,
                           score=14 / 3, max_score=10.0, code=code, created_at=GRADED_AT, finished_at=GRADED_AT,
                           runtime_ms=13_140)  # fmt: skip
    store_graded(db_file, slug=CODE, email=OTHER, assignment_id=assignment_id, verdict=Verdict.failed,
                 score=4 / 3, max_score=10.0, code=code.replace("batch", "items").replace("shard", "part"),
                 created_at=GRADED_AT, finished_at=GRADED_AT, runtime_ms=850)  # fmt: skip

    learner = watched_page(browser)
    log_in(learner, base, LEARNER)
    # Every question answered (a quiz under an assignment refuses gaps), one of them partly right (2 of 3 options).
    answers = {"speedup": ["a"], "data-parallel": ["a", "b"], "explain-speedup": EXPLAIN, "explain-sync": EXPLAIN}
    answers |= {q: ["a"] for q in ("which-api", "no-sync", "overhead", "mirrored-does", "picture", "sync-purpose")}
    answers |= {"downside": ["c"], "api-family": ["d"]}
    quiz = post_json(learner, base, f"/api/exercises/{QUIZ}/quiz", {"answers": answers, "assignment_id": assignment_id})
    asked = post_json(learner, base, f"/api/submissions/{attempt}/regrade-request",
                      {"reason": "Test 3 expects 4 batches; mine makes the last one smaller."})  # fmt: skip
    post_json(staff, base, f"/api/regrade-requests/{asked['id']}/messages",
              {"body": "Looking at it this week.", "action": "comment"})  # fmt: skip

    # The assignment's check: an exercise's compares practice work, which is the practice course's staff's.
    run = post_json(staff, base, f"/api/assignments/{assignment_id}/similarity", {})
    run_url = f"{base}/api/similarity/runs/{run['id']}"
    wait_for(lambda: staff.request.get(run_url).json()["status"] in ("done", "failed"), timeout_s=120, interval_s=0.5)
    staff.goto(f"{base}/instructor/exercises/{QUIZ}/grading")
    link = staff.locator("a[href^='/grading/']").first.get_attribute("href") or ""
    grade_id = int(re.search(r"/grading/(\d+)", link).group(1))  # type: ignore[union-attr]

    admin = watched_page(browser)
    log_in(admin, base, ADMIN)
    assert admin.request.get(f"{base}/api/admin/lti/keys").ok  # the first key: the LTI page lists it with its date
    for page in (staff, learner, admin):
        page.context.close()
    return Walk(base=base, db_file=db_file, assignment_id=assignment_id, closed_id=closed_id, attempt_id=attempt,
                quiz_attempt_id=quiz["submission_id"], grade_id=grade_id, regrade_id=asked["id"],
                similarity_run_id=run["id"], board_id=board_id)  # fmt: skip


def pages(walk: Walk) -> list[tuple[str | None, str]]:
    """Every page of the walk with who opens it (None: nobody logged in)."""
    course = f"/courses/{COURSE}"
    under = f"{course}/assignments/{walk.assignment_id}"
    return [
        (None, "/login"),
        (None, "/docs"),
        (LEARNER, "/exercises"),
        (LEARNER, "/exercises?by=topic"),
        (LEARNER, f"/exercises/{CODE}"),
        (LEARNER, f"/exercises/{CODE}/history?attempt={walk.attempt_id}"),
        (LEARNER, f"/exercises/{QUIZ}"),
        (LEARNER, f"/exercises/{QUIZ}/history?attempt={walk.quiz_attempt_id}"),
        (LEARNER, "/courses"),
        (LEARNER, course),
        (LEARNER, under),
        (LEARNER, f"{under}/exercises/{CODE}"),
        (LEARNER, f"{under}/exercises/{QUIZ}"),
        (LEARNER, f"{course}/assignments/{walk.closed_id}/exercises/{CODE}"),
        (LEARNER, f"{course}/grades"),
        (LEARNER, f"{course}/assignments/{walk.board_id}/exercises/{BOARD}/leaderboard"),
        (TA, f"{course}/assignments/{walk.board_id}/exercises/{BOARD}/leaderboard"),
        (LEARNER, "/regrade-requests"),
        (LEARNER, f"/regrade-requests/{walk.regrade_id}"),
        (LEARNER, "/account"),
        (LEARNER, "/account/password"),
        (TA, course),
        (TA, f"{under}/exercises/{CODE}/insights"),
        (TA, f"{course}/manage"),
        (TA, f"{course}/gradebook"),
        (INSTRUCTOR, "/instructor"),
        (INSTRUCTOR, course),
        (INSTRUCTOR, f"{course}/manage"),
        (INSTRUCTOR, f"{course}/gradebook"),
        (INSTRUCTOR, f"{course}/assignments/new"),
        (INSTRUCTOR, f"{under}/edit"),
        (INSTRUCTOR, f"{under}/extensions"),
        (INSTRUCTOR, f"{course}/assignments/{walk.assignment_id}/grading"),
        (INSTRUCTOR, f"/instructor/exercises/{QUIZ}/grading"),
        (INSTRUCTOR, f"/grading/{walk.grade_id}"),
        (INSTRUCTOR, "/regrade-requests"),
        (INSTRUCTOR, f"/regrade-requests/{walk.regrade_id}"),
        (INSTRUCTOR, f"/instructor/exercises/{CODE}"),
        (INSTRUCTOR, f"/instructor/exercises/{CODE}/submissions"),
        (INSTRUCTOR, f"/instructor/submissions/{walk.attempt_id}"),
        (INSTRUCTOR, f"/instructor/exercises/{CODE}/insights"),
        (INSTRUCTOR, f"/instructor/exercises/{CODE}/similarity"),
        (INSTRUCTOR, f"/instructor/similarity/{walk.similarity_run_id}"),
        (INSTRUCTOR, f"/instructor/similarity/{walk.similarity_run_id}/pairs/1"),
        (ADMIN, "/admin"),
        (ADMIN, "/admin/users"),
        (ADMIN, "/admin/lti"),
    ]


def logged_in_pages(browser: Any, base: str, zone: str) -> dict[str | None, Any]:
    """Open one page per role in ``zone``, each logged in (None: anonymous)."""
    opened: dict[str | None, Any] = {None: watched_page(browser, timezone_id=zone)}
    for email in (LEARNER, TA, INSTRUCTOR, ADMIN):
        page = watched_page(browser, timezone_id=zone)
        log_in(page, base, email)
        opened[email] = page
    return opened


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u202f", " ")).strip()


def local_clock(iso: str, zone: str) -> str:
    """The hour and minute Chromium's en-US format shows for ``iso`` in ``zone`` (e.g. "06:16 PM")."""
    return datetime.fromisoformat(iso).astimezone(ZoneInfo(zone)).strftime("%I:%M %p")


def axe_source() -> str:
    """Return axe-core's script (fail under CI, skip elsewhere, when scripts/setup has not installed it)."""
    if not AXE.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"axe-core is not installed at {AXE}: run scripts/setup")
        pytest.skip("axe-core is not installed (scripts/setup installs it with npm)")
    return AXE.read_text(encoding="utf-8")


def settle(page: Any) -> None:
    """Wait until the page's scripts ran and two frames were drawn (times localised, scroll boxes marked)."""
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def axe_findings(page: Any, source: str) -> list[str]:
    """Run axe-core (WCAG 2 A/AA rules) on the page; return one line per violation and element."""
    if not page.evaluate("() => Boolean(window.axe)"):
        page.evaluate(source + "\n;undefined")
    result = page.evaluate(
        "(tags) => axe.run(document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] })", AXE_TAGS
    )
    return [
        f"{v['id']} ({v['impact']}): {node['target']} {node.get('failureSummary', '')[:200]}"
        for v in result["violations"]
        for node in v["nodes"]
    ]
