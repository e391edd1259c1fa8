"""A variant per learner in the browser: two learners open one exercise and each reads their own numbers."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.conftest import LEARNERS, log_in, watched_page
from tests.support import BANK
from worker.bank.spec import load_exercise

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLUG = "tf-global-batch"
RUN = re.compile(r"Your training job has (\d+) examples and runs on (\d+) GPUs, with (\d+) examples per replica")


def _run_shown(page: Any) -> tuple[int, int, int]:
    text = page.locator(".prompt .markdown").inner_text()
    found = RUN.findall(text)
    assert len(found) == 1, text[:1500]
    examples, gpus, per_replica = (int(v) for v in found[0])
    return examples, gpus, per_replica


def test_two_learners_read_their_own_run_in_the_prompt(live_server: str, browser: Any) -> None:
    spec = load_exercise(BANK / SLUG)
    offered = {p.name: p.values for p in spec.params}
    shown: dict[str, tuple[int, int, int]] = {}
    for email in LEARNERS:
        page = watched_page(browser)
        log_in(page, live_server, email, landing=f"/exercises/{SLUG}")
        shown[email] = _run_shown(page)
        examples, gpus, per_replica = shown[email]
        assert examples in offered["examples"] and gpus in offered["gpus"]
        assert per_replica in offered["batch_per_replica"]
        assert "{{" not in page.locator(".prompt .markdown").inner_text(), "every placeholder is filled in"
        page.reload()
        assert _run_shown(page) == shown[email], "the same learner reads the same numbers on every visit"
        api = page.request.get(f"{live_server}/api/exercises/{SLUG}").json()
        assert api["params"] == {"examples": examples, "gpus": gpus, "batch_per_replica": per_replica}
        assert not page.problems, page.problems
        page.context.close()
    assert shown[LEARNERS[0]] != shown[LEARNERS[1]], shown
