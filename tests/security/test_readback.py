"""Result read-back trusts nothing in out/: links, hard links, FIFOs, huge or malformed files are refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from worker.grading.jobdir import read_result

TEST = {"id": "t.py::t", "outcome": "passed", "message": "", "duration_ms": 1}
VALID = {"version": 1, "error": None, "tests": [TEST]}


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def test_plain_result_is_read(out: Path) -> None:
    (out / "result.json").write_text(json.dumps(VALID))
    assert read_result(out) == VALID


def test_symlink_to_a_valid_result_is_refused(out: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(VALID))
    (out / "result.json").symlink_to(target)
    assert read_result(out) is None


def test_hard_link_is_refused(out: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(VALID))
    os.link(target, out / "result.json")
    assert read_result(out) is None


def test_fifo_does_not_block_and_is_refused(out: Path) -> None:
    os.mkfifo(out / "result.json")
    assert read_result(out) is None


def test_directory_and_oversized_and_malformed_are_refused(out: Path) -> None:
    (out / "result.json").mkdir()
    assert read_result(out) is None
    (out / "result.json").rmdir()
    (out / "result.json").write_text(json.dumps(VALID) + " " * (2 * 1024 * 1024))
    assert read_result(out) is None
    for bad in ("[]", "{", json.dumps({**VALID, "extra": 1}), json.dumps({**VALID, "tests": [{"id": 1}]}), "NaN"):
        (out / "result.json").write_text(bad)
        assert read_result(out) is None, bad


def test_symlinked_out_folder_component_is_not_followed_for_the_file(out: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "result.json").symlink_to("/etc/passwd")
    assert read_result(real) is None
