"""Job directories: what the host writes and how strictly it reads the runner's result back."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from worker.bank.spec import ExerciseSpec
from worker.grading.jobdir import read_result, write_job_dir

VALID: dict[str, Any] = {
    "version": 1,
    "tests": [{"id": "test_add.py::test_small", "outcome": "passed", "message": "", "duration_ms": 3}],
    "error": None,
}


def write_result(out: Path, data: Any) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "result.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_write_job_dir_lays_out_the_contract(tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]) -> None:
    job = write_job_dir(tmp_path / "job", spec=tiny_spec(timeout_s=7), code="def add(a, b):\n    return a + b\n")
    data = json.loads((job / "job.json").read_text())
    assert data == {
        "version": 1,
        "timeout_s": 7.0,
        "module": "submission",
        "tests": [
            {"id": "test_add.py::test_small", "points": 1.0},
            {"id": "test_add.py::test_negative", "points": 2.0},
        ],
        "max_reply_bytes": 4 * 1024 * 1024,
        "learner_process": "per-test",
        "params": {},
    }
    subject = json.loads((job / "subject.json").read_text())
    assert subject == {
        "version": 1,
        "module": "submission",
        "preload": [],
        "max_reply_bytes": 4 * 1024 * 1024,
        "devices": {"framework": "none", "replicas": 1, "gpus": 0},
    }
    assert "test_add" not in (job / "subject.json").read_text(), "the subject's config names no hidden test"
    assert (job / "ipc").is_dir() and (job / "probes").is_dir()
    assert (job / "submission" / "submission.py").read_text().startswith("def add")
    assert (job / "tests" / "test_add.py").exists()
    assert (job / "out").is_dir() and not any((job / "out").iterdir())
    for path in [job / "job.json", job / "submission" / "submission.py", job / "tests" / "test_add.py"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((job / "tests").stat().st_mode) == 0o755


def test_write_job_dir_tells_the_subject_its_real_gpus(tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]) -> None:
    job = write_job_dir(tmp_path / "job", spec=tiny_spec(), code="x = 1\n", gpus=1)
    assert json.loads((job / "subject.json").read_text())["devices"]["gpus"] == 1


def test_write_job_dir_refuses_escaping_test_paths(tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]) -> None:
    with pytest.raises(ValueError, match="unsafe"):
        write_job_dir(tmp_path / "job", spec=tiny_spec(), code="", test_files={"../evil.py": "x"})


def test_read_result_accepts_valid(tmp_path: Path) -> None:
    write_result(tmp_path, VALID)
    assert read_result(tmp_path) == VALID
    write_result(tmp_path, {**VALID, "timed_out": True})
    assert read_result(tmp_path) == {**VALID, "timed_out": True}


def test_read_result_missing(tmp_path: Path) -> None:
    assert read_result(tmp_path) is None


def test_read_result_refuses_symlink(tmp_path: Path) -> None:
    target = write_result(tmp_path / "elsewhere", VALID)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "result.json").symlink_to(target)
    assert read_result(tmp_path / "out") is None


def test_read_result_refuses_hard_link(tmp_path: Path) -> None:
    target = write_result(tmp_path / "elsewhere", VALID)
    (tmp_path / "out").mkdir()
    os.link(target, tmp_path / "out" / "result.json")
    assert read_result(tmp_path / "out") is None


def test_read_result_refuses_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "result.json")
    assert read_result(tmp_path) is None


def test_read_result_refuses_oversized(tmp_path: Path) -> None:
    big = {**VALID, "error": "x" * 5000}
    write_result(tmp_path, big)
    assert read_result(tmp_path) == big
    assert read_result(tmp_path, max_bytes=1000) is None


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        "[]",
        {**VALID, "version": 2},
        {**VALID, "version": True},
        {**VALID, "extra": 1},
        {k: v for k, v in VALID.items() if k != "error"},
        {**VALID, "error": 5},
        {**VALID, "timed_out": "yes"},
        {**VALID, "tests": {}},
        {**VALID, "tests": [{**VALID["tests"][0], "outcome": "great"}]},
        {**VALID, "tests": [{**VALID["tests"][0], "duration_ms": 1.5}]},
        {**VALID, "tests": [{**VALID["tests"][0], "duration_ms": -1}]},
        {**VALID, "tests": [{**VALID["tests"][0], "id": ""}]},
        {**VALID, "tests": [{**VALID["tests"][0], "message": None}]},
        {**VALID, "tests": [{**VALID["tests"][0], "message": "m" * 9000}]},
        {**VALID, "tests": [{**VALID["tests"][0], "points": 5}]},
        {**VALID, "tests": [VALID["tests"][0]] * 2001},
    ],
)
def test_read_result_refuses_bad_schema(tmp_path: Path, data: Any) -> None:
    write_result(tmp_path, data)
    assert read_result(tmp_path) is None


MEASUREMENT: dict[str, Any] = {
    "test": "test_add.py::test_small",
    "name": "bytes per step",
    "value": 196.0,
    "unit": "B",
    "target": 196.0,
    "compare": "<=",
    "met": True,
    "modelled": False,
    "basis": "",
    "chart": {"kind": "bar", "x_label": "step", "y_label": "bytes", "series": [{"label": "r", "points": [[1, 196]]}]},
}
ONE_COORDINATE = [{"label": "r", "points": [[1]]}]
TOO_LONG = [{"label": "r", "points": [[0, 1]] * 65}]  # one point more than a series may hold
MODELLED = {**MEASUREMENT, "name": "modelled step time", "modelled": True, "basis": "compute + link", "chart": None}
PARTIAL = {
    "id": "test_add.py::test_budget", "outcome": "failed", "message": "over budget", "duration_ms": 1, "credit": 0.5,
}  # fmt: skip


def test_read_result_accepts_measurements_and_partial_credit(tmp_path: Path) -> None:
    data = {**VALID, "tests": [*VALID["tests"], PARTIAL], "measurements": [MEASUREMENT, MODELLED]}
    write_result(tmp_path, data)
    assert read_result(tmp_path) == data


@pytest.mark.parametrize(
    "bad",
    [
        {"measurements": {}},
        {"measurements": [MEASUREMENT] * 65},
        {"measurements": [{**MEASUREMENT, "extra": 1}]},
        {"measurements": [{**MODELLED, "basis": ""}]},  # a modelled figure always comes with its basis
        {"measurements": [{**MEASUREMENT, "value": "196"}]},
        {"measurements": [{**MEASUREMENT, "value": True}]},
        {"measurements": [{**MEASUREMENT, "compare": "<"}]},
        {"measurements": [{**MEASUREMENT, "name": "n" * 121}]},
        {"measurements": [{**MEASUREMENT, "chart": {**MEASUREMENT["chart"], "kind": "pie"}}]},
        {"measurements": [{**MEASUREMENT, "chart": {**MEASUREMENT["chart"], "series": []}}]},
        {"measurements": [{**MEASUREMENT, "chart": {**MEASUREMENT["chart"], "series": ONE_COORDINATE}}]},
        {"measurements": [{**MEASUREMENT, "chart": {**MEASUREMENT["chart"], "series": TOO_LONG}}]},
        {"tests": [{**PARTIAL, "credit": 1.0}]},
        {"tests": [{**PARTIAL, "credit": 0}]},
        {"tests": [{**PARTIAL, "outcome": "passed"}]},
        {"tests": [{**PARTIAL, "credit": "0.5"}]},
    ],
)
def test_read_result_refuses_bad_measurements_and_credit(tmp_path: Path, bad: dict[str, Any]) -> None:
    write_result(tmp_path, {**VALID, **bad})
    assert read_result(tmp_path) is None


def test_read_result_refuses_nan_measurements(tmp_path: Path) -> None:
    write_result(tmp_path, json.dumps({**VALID, "measurements": [MEASUREMENT]}).replace("196.0", "NaN", 1))
    assert read_result(tmp_path) is None
