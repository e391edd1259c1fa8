"""Write a job directory for the runner and read back the result it leaves, trusting nothing in it.

Contract (the runner side is ``worker/runner/README.md``):
- ``write_job_dir(root, spec=..., code=...)`` creates, for the judge: ``root/job.json`` and
  ``root/tests/...`` (read-only) and ``root/out/`` (the only place it writes); for the subject:
  ``root/subject.json`` (its ``devices`` say the framework, the replicas and how many real GPUs, ``gpus``, the
  subject may use) and ``root/submission/<module>.py`` (read-only); for both: ``root/probes/probes.py``
  (read-only, may be absent) and ``root/ipc/`` (the judge creates ``judge.sock`` there). The tests and probes
  come with their bytecode (``bytecode.cached_files``), so the sandbox need not compile them. ``out/`` and
  ``ipc/`` are owned by ``owner`` (the judge's uid) when given and we are root. Everything else is
  readable by any uid, nothing is writable by it; which part each sandbox sees is the backend's job.
- ``read_result(out_dir)`` returns the parsed ``result.json`` or ``None`` when it is missing, not a plain
  file, a link, larger than ``max_bytes``, not JSON or not exactly the documented schema (measurements and
  partial credit included: ``runner/measure.py``). It never raises for anything the sandbox wrote, and never
  unpickles.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path, PurePosixPath
from typing import Any

from worker.bank.specdata import ExerciseData
from worker.core.files import read_capped
from worker.grading import bytecode

JOB_VERSION = 1
RESULT_VERSION = 1
MODULE = "submission"
MAX_RESULT_BYTES = 1024 * 1024
MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_TESTS = 2000
MAX_ID_CHARS = 1000
MAX_MESSAGE_CHARS = 8000
MAX_ERROR_CHARS = 8000
OUTCOMES = frozenset({"passed", "failed", "error", "skipped"})
RESULT_KEYS = {"version", "tests", "error"}
OPTIONAL_RESULT_KEYS = {"timed_out", "measurements", "platform_error"}
TEST_KEYS = {"id", "outcome", "message", "duration_ms"}
# "credit": a failed test's share of its points (0 < credit < 1): runner.measure.grade; "details": the framework's
# own text behind a failure's message (runner.feedback), shown behind a disclosure.
OPTIONAL_TEST_KEYS = {"credit", "details"}
MAX_DETAILS_CHARS = 8000
# Measurements (runner/measure.py): the same caps as the runner's, checked again here.
MAX_MEASUREMENTS = 64
MEASUREMENT_KEYS = {"test", "name", "value", "unit", "target", "compare", "met", "modelled", "basis", "chart"}
MEASUREMENT_TEXT_CAPS = {"name": 120, "unit": 24, "basis": 400}
COMPARES = frozenset({"<=", ">=", "=="})
CHART_KEYS = {"kind", "x_label", "y_label", "series"}
MAX_SERIES = 4
MAX_POINTS = 64


def _safe_relative(path: str) -> PurePosixPath:
    """Refuse absolute paths and ``..`` so a test file name cannot escape ``tests/``."""
    rel = PurePosixPath(path)
    if rel.is_absolute() or not rel.parts or any(part in ("", ".", "..") for part in rel.parts):
        raise ValueError(f"unsafe test file path: {path!r}")
    return rel


def _write_file(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    path.chmod(0o644)


def _write_trusted(root: Path, folder: str, name: str, text: str) -> None:
    """Write one of the exercise's own files and its bytecode (``bytecode.cached_files``) under ``root/folder``."""
    rel = _safe_relative(name)
    _write_file(root / folder / rel, text)
    for cached, data in bytecode.cached_files(folder, str(rel), text).items():
        _write_file(root / folder / cached, data)


def write_job_dir(
    root: Path,
    *,
    spec: ExerciseData,
    code: str,
    test_files: dict[str, str] | None = None,
    owner: tuple[int, int] | None = None,
    gpus: int = 0,
    params: dict[str, int | float | str] | None = None,
) -> Path:
    """Create the job directory at ``root`` for grading ``code`` against ``spec``; return ``root``."""
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    root.chmod(0o755)
    files = spec.hidden_test_files if test_files is None else test_files
    job = {
        "version": JOB_VERSION,
        "timeout_s": float(spec.limits.timeout_s),
        "module": MODULE,
        "tests": [{"id": t.id, "points": t.points} for t in spec.tests],
        "max_reply_bytes": MAX_REPLY_BYTES,
        "learner_process": spec.learner_process,
        "params": dict(params or {}),
    }
    _write_file(root / "job.json", json.dumps(job, indent=2))
    subject = {
        "version": JOB_VERSION,
        "module": MODULE,
        "preload": list(spec.preload),
        "max_reply_bytes": MAX_REPLY_BYTES,
        "devices": {"framework": spec.vdev_framework, "replicas": spec.replicas, "gpus": gpus},
    }
    _write_file(root / "subject.json", json.dumps(subject, indent=2))
    (root / "probes").mkdir(mode=0o755, exist_ok=True)
    for name, text in sorted(spec.probe_files.items()):
        _write_trusted(root, "probes", name, text)
    (root / "submission").mkdir(mode=0o755, exist_ok=True)
    _write_file(root / "submission" / f"{MODULE}.py", code)
    tests_dir = root / "tests"
    tests_dir.mkdir(mode=0o755, exist_ok=True)
    for name, text in sorted(files.items()):
        _write_trusted(root, "tests", name, text)
    for name in ("out", "ipc"):
        path = root / name
        path.mkdir(mode=0o755, exist_ok=True)
        path.chmod(0o755)
        if owner is not None and os.geteuid() == 0:
            os.chown(path, *owner)
    return root


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _valid_credit(entry: dict[str, Any]) -> bool:
    if "credit" not in entry:
        return True
    share = entry["credit"]
    return entry["outcome"] == "failed" and _finite(share) and 0 < share < 1


def _valid_chart(chart: Any) -> bool:
    if chart is None:
        return True
    if not isinstance(chart, dict) or set(chart) != CHART_KEYS or chart["kind"] not in ("bar", "line"):
        return False
    if not all(isinstance(chart[k], str) and len(chart[k]) <= 120 for k in ("x_label", "y_label")):
        return False
    series = chart["series"]
    if not isinstance(series, list) or not 0 < len(series) <= MAX_SERIES:
        return False
    for s in series:
        if not isinstance(s, dict) or set(s) != {"label", "points"}:
            return False
        points = s["points"]
        if not isinstance(s["label"], str) or len(s["label"]) > 120:
            return False
        if not isinstance(points, list) or not 0 < len(points) <= MAX_POINTS:
            return False
        if not all(isinstance(p, list) and len(p) == 2 and all(_finite(v) for v in p) for p in points):
            return False
    return True


def _valid_measurement(entry: Any) -> bool:
    """Say whether ``entry`` is one measurement exactly as ``runner.measure.Recorder.record`` writes it."""
    if not isinstance(entry, dict) or set(entry) != MEASUREMENT_KEYS:
        return False
    if not isinstance(entry["test"], str) or not 0 < len(entry["test"]) <= MAX_ID_CHARS:
        return False
    for key, cap in MEASUREMENT_TEXT_CAPS.items():
        if not isinstance(entry[key], str) or len(entry[key]) > cap:
            return False
    if not all(entry[k] is None or _finite(entry[k]) for k in ("value", "target")):
        return False
    if entry["compare"] is not None and entry["compare"] not in COMPARES:
        return False
    if entry["met"] is not None and not isinstance(entry["met"], bool):
        return False
    if not isinstance(entry["modelled"], bool) or (entry["modelled"] and not entry["basis"]):
        return False  # a modelled figure never comes without what it assumes
    return _valid_chart(entry["chart"])


def _valid_test(entry: Any) -> bool:
    if not isinstance(entry, dict) or not TEST_KEYS <= set(entry) <= TEST_KEYS | OPTIONAL_TEST_KEYS:
        return False
    test_id, outcome, message, duration = entry["id"], entry["outcome"], entry["message"], entry["duration_ms"]
    details = entry.get("details", "")
    if not isinstance(details, str) or len(details) > MAX_DETAILS_CHARS:
        return False
    return _valid_credit(entry) and (
        isinstance(test_id, str)
        and 0 < len(test_id) <= MAX_ID_CHARS
        and outcome in OUTCOMES
        and isinstance(message, str)
        and len(message) <= MAX_MESSAGE_CHARS
        and isinstance(duration, int)
        and not isinstance(duration, bool)
        and 0 <= duration <= 10**9
    )


def validate_result(data: Any) -> bool:
    """Say whether ``data`` is exactly the ``result.json`` schema."""
    if not isinstance(data, dict) or not RESULT_KEYS <= set(data) <= RESULT_KEYS | OPTIONAL_RESULT_KEYS:
        return False
    if data["version"] != RESULT_VERSION or isinstance(data["version"], bool):
        return False
    error, tests = data["error"], data["tests"]
    if error is not None and not (isinstance(error, str) and len(error) <= MAX_ERROR_CHARS):
        return False
    if "timed_out" in data and not isinstance(data["timed_out"], bool):
        return False
    found_error = data.get("platform_error")
    if "platform_error" in data and not (isinstance(found_error, str) and 0 < len(found_error) <= MAX_ERROR_CHARS):
        return False
    if "measurements" in data:
        found = data["measurements"]
        if not isinstance(found, list) or len(found) > MAX_MEASUREMENTS:
            return False
        if not all(_valid_measurement(m) for m in found):
            return False
    return isinstance(tests, list) and len(tests) <= MAX_TESTS and all(_valid_test(t) for t in tests)


def read_result(out_dir: Path, *, max_bytes: int = MAX_RESULT_BYTES) -> dict[str, Any] | None:
    """Return the runner's result from ``out_dir/result.json``, or ``None`` if it is absent or invalid."""
    raw = read_capped(out_dir / "result.json", max_bytes)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return data if validate_result(data) else None
