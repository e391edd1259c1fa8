"""Run the hidden tests of one job directory and write ``out/result.json``.

Contract (details in ``README.md``):
- ``python -m runner JOB_DIR`` reads ``JOB_DIR/job.json``, imports ``JOB_DIR/submission/<module>.py`` and runs
  pytest over ``JOB_DIR/tests``; it writes ``JOB_DIR/out/result.json`` once, atomically, and exits 0.
- If the runner itself cannot work (bad job.json, unwritable out/), it exits non-zero without a result;
  the host then reports ``crashed``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import JOB_VERSION, RESULT_VERSION
from .plugin import Job, run_tests

EXIT_BAD_JOB = 2
EXIT_NO_RESULT = 3


def _read_job(job_dir: Path) -> Job:
    """Read and check ``job.json``; raise ``ValueError`` on anything unexpected."""
    data = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("version") != JOB_VERSION:
        raise ValueError("job.json has an unsupported version")
    timeout_s = data.get("timeout_s")
    module = data.get("module", "submission")
    tests = data.get("tests", [])
    if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or timeout_s <= 0:
        raise ValueError("job.json timeout_s must be a positive number")
    if not isinstance(module, str) or not module.isidentifier():
        raise ValueError("job.json module must be a Python identifier")
    if not isinstance(tests, list) or not all(isinstance(t, dict) and isinstance(t.get("id"), str) for t in tests):
        raise ValueError("job.json tests must be a list of {id, points}")
    return Job(
        job_dir=job_dir,
        timeout_s=float(timeout_s),
        module=module,
        expected=[t["id"] for t in tests],
    )


def _write_result(out_dir: Path, result: dict[str, object]) -> None:
    """Write ``result.json`` atomically so the host never reads half a file."""
    tmp = out_dir / ".result.json.tmp"
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, out_dir / "result.json")


def main(argv: list[str]) -> int:
    """Run one job; return the process exit code."""
    job_dir = Path(argv[1] if len(argv) > 1 else "/job")
    runner_pid = os.getpid()
    try:
        job = _read_job(job_dir)
    except (OSError, ValueError) as exc:
        print(f"gpulab runner: cannot read job.json: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB
    tests, error, timed_out = run_tests(job)
    if os.getpid() != runner_pid:
        # A process the learner forked fell through the test run: only the runner itself reports.
        return 0
    result: dict[str, object] = {"version": RESULT_VERSION, "tests": tests, "error": error}
    if timed_out:
        result["timed_out"] = True
    try:
        _write_result(job_dir / "out", result)
    except OSError as exc:
        print(f"gpulab runner: cannot write result.json: {exc}", file=sys.stderr)
        return EXIT_NO_RESULT
    return 0


if __name__ == "__main__":
    # os._exit skips atexit hooks and thread joins the learner's code may have left behind.
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
