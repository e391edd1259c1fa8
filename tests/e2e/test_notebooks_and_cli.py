"""A learner's own tools against a real `gpulab serve`: a notebook dropped on the exercise page (headless Chromium),
and the served command line submitting a file and a notebook with an access token.

One server for the module. The browser tests run first (they make the history the CLI's attempts add to).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import PASSWORD, serve_gpulab, watched_page
from tests.support import BANK, bank_file
from worker.bank.spec import load_exercise

pytestmark = [pytest.mark.slow]
SLUG = "python-split-batch"
FULL = f"{load_exercise(BANK / SLUG).max_score:g}"  # its full marks, as the bank has them now
LEARNER = "nb@example.com"
CLI_LEARNER = "cli@example.com"
GRADING_MS = 180_000  # two cores shared with other test runs: grading may queue behind them
STEP_ORDER = ["queued", "running", "graded"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    users = [(LEARNER, "learner"), (CLI_LEARNER, "learner")]
    with serve_gpulab(tmp_path_factory.mktemp("serve-nb"), users) as base:
        yield base


def _with_solution(notebook: dict[str, Any], code: str) -> dict[str, Any]:
    """Put ``code`` in the notebook's solution cell and add an untagged cell, as a learner's own experiments."""
    for cell in notebook["cells"]:
        if "solution" in cell["metadata"].get("tags", []):
            cell["source"] = code
    notebook["cells"].append(
        {"cell_type": "code", "id": "scratch", "metadata": {}, "source": "UNTAGGED_SCRATCH = 1",
         "outputs": [], "execution_count": None}
    )  # fmt: skip
    return notebook


def _drop(page: Any, name: str, text: str) -> None:
    """Drop a file named ``name`` holding ``text`` on the notebook zone, as a drag from the desktop does."""
    page.evaluate(
        """([name, text]) => {
            const data = new DataTransfer();
            data.items.add(new File([text], name, { type: "application/x-ipynb+json" }));
            const zone = document.getElementById("notebook");
            for (const type of ["dragenter", "dragover", "drop"]) {
                zone.dispatchEvent(new DragEvent(type, { dataTransfer: data, bubbles: true, cancelable: true }));
            }
        }""",
        [name, text],
    )


@pytest.mark.browser
def test_a_dropped_notebook_is_graded_and_its_extracted_code_is_the_history(
    server: str, browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser)
    page.goto(f"{server}/login?next=/exercises/{SLUG}")
    page.get_by_label("E-mail").fill(LEARNER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server}/exercises/{SLUG}")

    with page.expect_download() as download:
        page.get_by_role("link", name="Download this exercise as a notebook").click()
    assert download.value.suggested_filename == f"{SLUG}.ipynb"
    notebook = json.loads(Path(download.value.path()).read_text())
    assert notebook["metadata"]["gpulab"]["exercise"] == SLUG

    # A malformed one first: refused with its reason, and no attempt is used.
    broken = json.loads(json.dumps(notebook))
    for cell in broken["cells"]:
        cell["metadata"].pop("tags", None)
    _drop(page, "untagged.ipynb", json.dumps(broken))
    expect(page.locator("#notebook-error")).to_contain_text("no code cell is tagged 'solution'")
    expect(page.locator("#notebook-error")).to_contain_text("untagged.ipynb was not submitted")
    other = json.loads(json.dumps(notebook))
    other["metadata"]["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    path = tmp_path / "r-kernel.ipynb"
    path.write_text(json.dumps(other))
    page.locator("#notebook-file").set_input_files(str(path))  # the file chooser, for keyboard users
    expect(page.locator("#notebook-error")).to_contain_text("kernel runs 'R' (R)")
    expect(page.locator("#standing-history")).to_be_hidden()  # still no attempt
    progress = page.request.get(f"{server}/api/exercises/{SLUG}/progress").json()
    assert progress["attempts"] == 0

    # The real one: graded live on the page, the solution cell and nothing else stored.
    solution = bank_file(SLUG, "solution.py").rstrip("\n") + "\n# written in my notebook\n"
    _drop(page, "mine.ipynb", json.dumps(_with_solution(notebook, solution)))
    expect(page.locator("#notebook-error")).to_be_hidden()
    expect(page.locator("#result-verdict")).to_have_text("passed", timeout=GRADING_MS)
    expect(page.locator("#standing-history")).to_have_text("History (1)")

    page.get_by_role("link", name="History (1)").click()
    code = page.locator("pre.code").first
    expect(code).to_contain_text("# written in my notebook")
    expect(page.locator("body")).not_to_contain_text("UNTAGGED_SCRATCH")
    refusal = "the server responded with a status of 422"  # the browser logs the two refused uploads; nothing else
    assert [p for p in page.problems if refusal not in p] == []
    page.context.close()


def _token(server: str, email: str) -> tuple[str, int]:
    """Log ``email`` in and make an access token (read and submit); return it and its id."""
    with httpx.Client(base_url=server) as client:
        assert client.post("/api/auth/login", json={"email": email, "password": PASSWORD}).status_code == 200
        made = client.post("/api/me/tokens", json={"name": "cli test", "scopes": ["read", "submit"]})
        assert made.status_code == 201, made.text
        return made.json()["token"], made.json()["id"]


def _revoke(server: str, email: str, token_id: int) -> None:
    with httpx.Client(base_url=server) as client:
        assert client.post("/api/auth/login", json={"email": email, "password": PASSWORD}).status_code == 200
        assert client.post(f"/api/me/tokens/{token_id}/revoke", json={}).status_code == 200


def _cli(script: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # -I -S: no site-packages and no environment hooks; the script must need nothing beyond the standard library.
    return subprocess.run(
        [sys.executable, "-I", "-S", str(script), *args], capture_output=True, text=True, timeout=300, env=env,
        check=False,
    )  # fmt: skip


def _steps(stdout: str) -> list[str]:
    return [line.split(":", 1)[0] for line in stdout.splitlines() if line.split(":", 1)[0] in STEP_ORDER]


def test_the_command_line_submits_a_file_and_a_notebook_and_exits_with_the_verdict(server: str, tmp_path: Path) -> None:
    script = tmp_path / "gpulab-submit.py"
    script.write_bytes(httpx.get(f"{server}/cli/gpulab-submit.py").content)
    token, token_id = _token(server, CLI_LEARNER)

    wrong = tmp_path / "wrong.py"
    wrong.write_text(bank_file(SLUG, "wrong/round_robin.py"))
    failed = _cli(script, SLUG, str(wrong), "--server", server, "--token", token)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    steps = _steps(failed.stdout)
    # Followed live: each status it saw, in order, and the verdict last (how many it saw depends on timing).
    assert steps[-1] == "graded" and steps == sorted(steps, key=STEP_ORDER.index), failed.stdout
    assert "FAILED" in failed.stdout and f"{SLUG}: failed" in failed.stdout
    assert "contiguous" in failed.stdout  # a failing test's feedback, as the page shows it

    notebook = httpx.get(f"{server}/api/exercises/{SLUG}/notebook", headers={"Authorization": f"Bearer {token}"})
    assert notebook.status_code == 200
    path = tmp_path / "mine.ipynb"
    path.write_text(json.dumps(_with_solution(notebook.json(), bank_file(SLUG, "solution.py"))))
    env = {"GPULAB_TOKEN": token, "GPULAB_SERVER": server, "PATH": "/usr/bin:/bin"}
    passed = _cli(script, SLUG, str(path), env=env)  # token and server from the environment
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert _steps(passed.stdout)[-1] == "graded" and f"{SLUG}: passed  {FULL}/{FULL}" in passed.stdout
    assert "FAILED" not in passed.stdout

    malformed = tmp_path / "broken.ipynb"
    malformed.write_text("{not json")
    refused = _cli(script, SLUG, str(malformed), "--server", server, "--token", token)
    assert refused.returncode == 2 and "not JSON" in refused.stderr and "(HTTP 422)" in refused.stderr

    _revoke(server, CLI_LEARNER, token_id)
    revoked = _cli(script, SLUG, str(wrong), "--server", server, "--token", token)
    assert revoked.returncode == 2
    assert "the access token is unknown or was revoked (HTTP 401)" in revoked.stderr
    with httpx.Client(base_url=server) as client:  # the refused calls stored nothing
        client.post("/api/auth/login", json={"email": CLI_LEARNER, "password": PASSWORD})
        assert client.get(f"/api/exercises/{SLUG}/progress").json()["attempts"] == 2
