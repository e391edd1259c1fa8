"""A measured-outcome exercise in a real headless Chromium: a learner submits gradient accumulation that syncs on
every micro-batch (``torch-ddp-grad-accum``'s wrong variant, written for the learner's own MICRO and ACCUM), the
real sandbox runs two gloo ranks and measures their communication, and the result shows each measurement beside
its target, partial credit, the charts, and the "modelled" label on every figure of the cost model.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import SCREENSHOTS, log_in, serve_gpulab, watched_page
from tests.support import BANK, REPO_ROOT
from worker.bank.spec import load_exercise
from worker.runner.measure import credit

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SLUG = "torch-ddp-grad-accum"
USERS = (("ada@example.com", "learner"),)
GRADING_MS = 300_000  # two ranks of torch on two cores shared with other test runs
PER_RANK, PARAM_BYTES = 44, 196  # the exercise's samples per rank and epoch; its model's gradient bytes


def shown(value: float) -> str:
    """Return ``value`` as the result page's table writes it (measurements.js ``round``: at most 3 places)."""
    return f"{round(value * 1000) / 1000:.3f}".rstrip("0").rstrip(".")


@pytest.fixture(scope="module")
def measured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Serve a bank of the one measured exercise."""
    bank = tmp_path_factory.mktemp("bank")
    shutil.copytree(REPO_ROOT / "exercises" / SLUG, bank / SLUG)
    with serve_gpulab(tmp_path_factory.mktemp("measured"), USERS, exercises_dir=str(bank)) as base:
        yield base


@pytest.mark.timeout(600)  # the server's start, torch in two sandboxes and two ranks, on shared cores
def test_result_shows_measurements_beside_targets_with_the_modelled_label(measured_server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser)
    base = measured_server
    log_in(page, base, "ada@example.com", landing=f"/exercises/{SLUG}")
    # The learner's own variant; without no_sync every micro-batch all-reduces, so a step costs its window's length.
    params = page.request.get(f"{base}/api/exercises/{SLUG}").json()["params"]
    micros = PER_RANK // params["micro"]
    windows = math.ceil(micros / params["accum"])
    calls_per_step = round(micros / windows, 3)
    bytes_per_step = round(micros * PARAM_BYTES / windows, 1)
    wrong = load_exercise(BANK / SLUG).rendered("wrong/sync_every_micro_batch.py", params)
    page.evaluate("(code) => window.gpulabExercise.editor().setValue(code)", wrong)
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#result-verdict")).to_have_text("failed", timeout=GRADING_MS)

    section = page.locator("#result-measurements")
    expect(section).to_be_visible()
    calls = section.locator("tr", has_text="collective calls per optimizer step")
    # One all-reduce per micro-batch for one step per window (default variant: 11 for 3, 3.667 per step) against a
    # target of exactly 1, partial credit.
    expect(calls.locator("td").nth(1)).to_have_text(f"{shown(calls_per_step)} calls")
    expect(calls.locator("td").nth(2)).to_have_text("= 1 calls")
    expect(calls.locator("td").nth(3)).to_have_text("missed")
    nbytes = section.locator("tr", has_text="bytes all-reduced per optimizer step")
    expect(nbytes.locator("td").nth(1)).to_have_text(f"{shown(bytes_per_step)} B")
    expect(nbytes.locator("td").nth(2)).to_have_text("<= 196 B")
    steps = section.locator("tr", has_text="optimizer steps per rank")
    expect(steps.locator("td").nth(3)).to_have_text("met")
    row = page.locator("#result-tests tr", has_text="test_one_allreduce_per_step")
    earned = 3 * credit(calls_per_step, 1, "==", params["accum"])  # default: (4 - 3.667) / (4 - 1) of 3 points
    expect(row.locator("td").nth(2)).to_have_text(f"{earned:.2f}".rstrip("0").rstrip(".") + " / 3")
    # The variant's own feedback fragment (its cause, as the bank's check requires it to be named).
    cause = next(w.feedback for w in load_exercise(BANK / SLUG).wrong if w.path == "wrong/sync_every_micro_batch.py")
    expect(page.locator("#result-tests tr.feedback", has_text=cause).first).to_be_visible()
    sent = f"sent {bytes_per_step:.0f} bytes per optimizer step"
    expect(page.locator("#result-tests tr.feedback", has_text=sent)).to_have_count(1)

    # Every figure of the cost model carries the label and its basis; no measured figure does.
    modelled = section.locator("tr", has=page.locator(".badge.modelled"))
    expect(modelled).to_have_count(2)
    for i in range(2):
        expect(modelled.nth(i)).to_contain_text("modelled")
        expect(modelled.nth(i).locator(".basis")).to_contain_text("PCIe-class link")
    expect(calls.locator(".badge.modelled")).to_have_count(0)

    # Two charts: bytes per step (bars, with the target line) and the modelled speed-up against ranks (lines).
    expect(section.locator("figure")).to_have_count(2)
    bars = section.locator("figure", has_text="bytes all-reduced per optimizer step")
    expect(bars.locator("rect")).to_have_count(2 * windows)  # one bar per optimizer step, 2 epochs
    expect(bars).to_contain_text("target 196")
    lines = section.locator("figure", has_text="speed-up")
    expect(lines.locator("figcaption")).to_have_text("Modelled: speed-up over one device")
    expect(lines.locator("path")).to_have_count(2)
    expect(lines).to_contain_text("NVLink-class")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    section.screenshot(path=str(SCREENSHOTS / "measured-result.png"))
    assert page.problems == []
