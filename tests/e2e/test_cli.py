"""The `gpulab` command as an operator uses it: help, grade, exercises check/sync, users, migrations."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.support import BANK, child_env

SLUG = "python-split-batch"
COMMANDS = [
    [],
    ["serve"],
    ["demo"],
    ["db"],
    ["db", "upgrade"],
    ["user"],
    ["user", "add"],
    ["exercises"],
    ["exercises", "sync"],
    ["exercises", "check"],
    ["grade"],
    ["worker"],
]


def gpulab(
    *args: str, data_dir: Path, stdin: str | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["gpulab", *args],
        env=child_env(mode="dev", data_dir=str(data_dir)),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gpulab")
def test_every_command_has_help(command: list[str], tmp_path: Path) -> None:
    result = gpulab(*command, "--help", data_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Usage: gpulab" in result.stdout


@pytest.mark.slow
def test_grade_in_a_chosen_variant(tmp_path: Path) -> None:
    """A bank file's placeholders are filled in for the variant graded, and its tests get the same numbers."""
    slug, mine = "torch-lr-scaling", ["--param", "world_size=8", "--param", "base_lr=0.2"]
    good = gpulab("grade", slug, str(BANK / slug / "solution.py"), "--json", *mine, data_dir=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["verdict"] == "passed"
    # An answer hard-coded for the default variant (world_size 2, base_lr 0.05) fails in that one.
    hard = tmp_path / "hard_coded.py"
    hard.write_text((BANK / slug / "solution.py").read_text().replace("{{ params.world_size }}", "2")
                    .replace("{{ params.base_lr }}", "0.05"))  # fmt: skip
    bad = gpulab("grade", slug, str(hard), "--json", *mine, data_dir=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    failing = [t for t in json.loads(bad.stdout)["tests"] if t["outcome"] != "passed"]
    assert [t["name"] for t in failing] == ["test_lr_scaling.py::test_my_run_schedule"]
    assert "8 GPUs" in failing[0]["message"] and "base_lr 0.2" in failing[0]["message"]
    refused = gpulab("grade", slug, str(hard), "--param", "world_size=3", data_dir=tmp_path)
    assert refused.returncode == 2 and "world_size takes one of 2, 4, 8" in refused.stderr


@pytest.mark.slow
def test_grade_exit_codes_and_json(tmp_path: Path) -> None:
    good = gpulab("grade", SLUG, str(BANK / SLUG / "solution.py"), "--json", data_dir=tmp_path)
    assert good.returncode == 0, good.stderr
    result = json.loads(good.stdout)
    assert result["verdict"] == "passed" and result["score"] == result["max_score"] > 0
    assert {"verdict", "score", "max_score", "tests", "stdout", "stderr", "runtime_ms", "device"} <= set(result)
    assert all({"name", "outcome", "message", "points", "max_points"} <= set(t) for t in result["tests"])

    bad = gpulab("grade", SLUG, str(BANK / SLUG / "wrong" / "round_robin.py"), data_dir=tmp_path)
    assert bad.returncode == 1
    assert "failed" in bad.stdout

    missing = gpulab("grade", "no-such-exercise", str(BANK / SLUG / "solution.py"), data_dir=tmp_path)
    assert missing.returncode == 2
    assert "no exercise 'no-such-exercise'" in missing.stderr


@pytest.mark.slow
def test_exercises_check_passes_for_an_exercise(tmp_path: Path) -> None:
    # The command end to end on one exercise; tests/exercises/test_bank_checks.py checks the whole bank warm.
    result = gpulab("exercises", "check", SLUG, data_dir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all exercises check out" in result.stdout
    assert f"ok  {SLUG}/solution.py" in result.stdout and "BAD" not in result.stdout


@pytest.mark.slow
def test_exercises_check_catches_a_broken_reference(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    (bank / SLUG).mkdir(parents=True)
    for path in (BANK / SLUG).rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = bank / SLUG / path.relative_to(BANK / SLUG)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    # Make the reference solution wrong: the check must notice and exit non-zero.
    (bank / SLUG / "solution.py").write_text((BANK / SLUG / "wrong" / "round_robin.py").read_text())
    result = gpulab("exercises", "check", SLUG, "--dir", str(bank), data_dir=tmp_path)
    assert result.returncode == 1
    assert f"{SLUG}/solution.py should pass" in result.stderr


@pytest.mark.slow
def test_exercises_check_catches_a_message_without_its_feedback(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    shutil.copytree(BANK / SLUG, bank / SLUG, ignore=shutil.ignore_patterns("__pycache__"))
    toml = bank / SLUG / "exercise.toml"
    text = toml.read_text()
    assert 'feedback = "contiguous block"' in text
    # round_robin's message teaches contiguous blocks; a fragment it never says must fail the check.
    toml.write_text(text.replace('feedback = "contiguous block"', 'feedback = "set_epoch"'))
    result = gpulab("exercises", "check", SLUG, "--dir", str(bank), data_dir=tmp_path)
    assert result.returncode == 1
    assert f"{SLUG}/wrong/round_robin.py: no failure message of its must_fail tests contains its feedback " in (
        result.stderr
    )
    assert "'set_epoch'" in result.stderr and "contiguous block" in result.stderr  # the messages it got
    assert f"BAD {SLUG}/wrong/round_robin.py" in result.stdout


def test_db_upgrade_sync_and_user_add_on_sqlite(tmp_path: Path) -> None:
    assert gpulab("db", "upgrade", data_dir=tmp_path).returncode == 0
    first = gpulab("exercises", "sync", data_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    again = gpulab("exercises", "sync", data_dir=tmp_path)
    assert "new" not in again.stdout  # unchanged folders add no version

    added = gpulab(
        "user",
        "add",
        "Teacher@Example.com",
        "--name",
        "  Ada Lovelace ",
        "--role",
        "instructor",
        "--password-stdin",
        data_dir=tmp_path,
        stdin="s3cret-enough-pass\n",
    )
    assert added.returncode == 0, added.stderr
    duplicate = gpulab(
        "user", "add", "teacher@example.com", "--password-stdin", data_dir=tmp_path, stdin="x" * 12 + "\n"
    )
    assert duplicate.returncode != 0
    assert "(practice course staff)" in added.stdout
    aside = gpulab(
        "user",
        "add",
        "lecturer@example.com",
        "--role",
        "instructor",
        "--no-practice-staff",
        "--password-stdin",
        data_dir=tmp_path,
        stdin="s3cret-enough-pass\n",
    )
    assert aside.returncode == 0, aside.stderr
    refused = gpulab(
        "user",
        "add",
        "pupil@example.com",
        "--practice-staff",
        "--password-stdin",
        data_dir=tmp_path,
        stdin="s3cret-enough-pass\n",
    )
    assert refused.returncode != 0 and "learner cannot be on the practice course's staff" in refused.stderr

    with sqlite3.connect(tmp_path / "gpulab.db") as db:
        roles = db.execute("SELECT email, role FROM users ORDER BY id").fetchall()
        names = db.execute("SELECT name, must_change_password FROM users ORDER BY id").fetchall()
        practice_staff = db.execute(
            "SELECT u.email, m.role FROM course_members m JOIN users u ON u.id = m.user_id"
            " JOIN courses c ON c.id = m.course_id WHERE c.is_practice"
        ).fetchall()
        slugs = {row[0] for row in db.execute("SELECT slug FROM exercises")}
        versions = db.execute("SELECT count(*) FROM exercise_versions").fetchone()[0]
    assert roles == [("teacher@example.com", "instructor"), ("lecturer@example.com", "instructor")]
    assert practice_staff == [("teacher@example.com", "instructor")]  # the opted-out lecturer reviews no practice
    assert names == [("Ada Lovelace", 0), ("", 0)]  # --name, trimmed; a password given is no one-time password
    assert {p.name for p in BANK.glob("*/exercise.toml") for p in [p.parent]} == slugs
    assert versions == len(slugs)


def test_changed_exercise_becomes_a_new_version(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    src = BANK / SLUG
    for path in src.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = bank / SLUG / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    assert gpulab("db", "upgrade", data_dir=tmp_path).returncode == 0
    assert gpulab("exercises", "sync", str(bank), data_dir=tmp_path).returncode == 0
    prompt = bank / SLUG / "prompt.md"
    prompt.write_text(prompt.read_text() + "\nOne more hint.\n")
    result = gpulab("exercises", "sync", str(bank), data_dir=tmp_path)
    assert "new version" in result.stdout
    with sqlite3.connect(tmp_path / "gpulab.db") as db:
        numbers = [r[0] for r in db.execute("SELECT number FROM exercise_versions ORDER BY number")]
    assert numbers == [1, 2]


def test_bad_secret_is_refused_in_production(tmp_path: Path) -> None:
    env = child_env(mode="production", data_dir=str(tmp_path), secret_key="short")
    result = subprocess.run(
        ["gpulab", "serve", "--port", "1"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert "GPULAB_SECRET_KEY" in result.stderr
