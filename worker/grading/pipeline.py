"""Grade one submission: the single pipeline behind the server, the Celery task and the CLI.

Contract:
- ``grade(spec, code, sandbox=...)`` writes a private job directory, runs the sandbox, reads the runner's
  result and decides everything on the host: the verdict, each expected test's outcome and the score.
- Verdicts, first match wins: ``internal_error`` (the runner's ``platform_error``: the process that runs the
  learner's code never started, so nothing about it was learned; retried at no cost), ``memory_limit`` (OOM
  kill), ``timeout`` (wall clock or the runner's own limit), ``crashed`` (too much output, or no valid result:
  the program exited or was killed before reporting), else ``passed`` iff every point was earned (and there are
  points to earn), else ``failed``.
  The score always counts the passed expected tests, whatever the verdict.
- Only ``spec.tests`` count: unknown reported ids are ignored, expected ids that never reported fail.
- A failed test with ``credit`` (``runner.measure.grade``: a measured outcome short of its target) earns that
  share of its points. Measurements of expected tests travel on in ``GradeOutcome.measurements``.
- Every message the runner reports is cleaned (``messages.clean_message``): no terminal codes, no traceback.
- ``SandboxUnavailable`` propagates; any other failure of ours becomes an ``internal_error`` outcome.
  The job directory (it holds the hidden tests) is always deleted.
- ``gpus`` names the models of the real GPUs the run's subject can use (``scripts/gpu-check`` passes the
  machine's; every worker passes none, as before): the job is told how many (``subject.json``) and the runner
  decides from it (``runner.vdev.setup``), and the device label says the same (``devices.device_label``).
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from worker.bank.specdata import ExerciseData
from worker.core.errors import SandboxUnavailable
from worker.core.outcome import GradeOutcome, TestOutcome, TestOutcomeKind, Verdict
from worker.grading.devices import device_label
from worker.grading.jobdir import read_result, write_job_dir
from worker.grading.messages import clean_message
from worker.grading.sandbox.base import Sandbox, SandboxRun

NOT_REPORTED = "This test did not report a result (did your code exit or crash?)"
TRUNCATED = "\n... [output truncated]"


def _decode(data: bytes, truncated: bool) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + TRUNCATED if truncated and data else text


def _exit_text(exit_code: int | None) -> str:
    """Describe how the sandboxed program ended, for a ``crashed`` message."""
    if exit_code is None:
        return "did not stop when asked to"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"was killed by {name}"
    return f"exited with code {exit_code}"


def _test_outcomes(spec: ExerciseData, result: dict[str, Any] | None) -> list[TestOutcome]:
    """Match reported results to the expected tests; unreported ones fail."""
    reported = {t["id"]: t for t in result["tests"]} if result else {}
    outcomes = []
    for expected in spec.tests:
        entry = reported.get(expected.id)
        if entry is None:
            kind, message, details = TestOutcomeKind.failed, NOT_REPORTED, ""
        else:
            kind, message = TestOutcomeKind(entry["outcome"]), clean_message(entry["message"])
            details = clean_message(entry.get("details", "")) if kind is not TestOutcomeKind.passed else ""
        if kind is TestOutcomeKind.passed:
            points = expected.points
        elif kind is TestOutcomeKind.failed and entry is not None and "credit" in entry:
            # Rounded to the cent, and a failed test never shows all its points (credit 0.9999 of 4 is 3.99, not 4;
            # a third of 3 is 1, not 0.99).
            points = min(round(expected.points * float(entry["credit"]), 2), expected.points - 0.01)
        else:
            points = 0.0
        outcomes.append(TestOutcome(expected.id, kind, message, points, expected.points, details))
    return outcomes


def _measurements(spec: ExerciseData, result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Return the measurements of expected tests (the schema was checked by ``read_result``)."""
    expected = {t.id for t in spec.tests}
    return [m for m in (result or {}).get("measurements", []) if m["test"] in expected]


def decide(spec: ExerciseData, run: SandboxRun, result: dict[str, Any] | None) -> tuple[Verdict, str]:
    """Return the verdict and its message from what the sandbox saw and what the runner reported."""
    limits = spec.limits
    if result is not None and result.get("platform_error"):  # the learner's code never ran: ours to retry
        return Verdict.internal_error, clean_message(result["platform_error"])
    # An OOM kill explains a run better than the clock that may have expired after it.
    if run.memory_exceeded:
        return Verdict.memory_limit, f"Your code used more than the memory limit of {limits.memory_mb} MB."
    if run.timed_out or (result is not None and result.get("timed_out")):
        return Verdict.timeout, f"Your code ran longer than the time limit of {limits.timeout_s:g} s."
    if run.output_exceeded:
        return Verdict.crashed, "Your code printed far too much output and was stopped."
    if result is None:
        return Verdict.crashed, f"Your program {_exit_text(run.exit_code)} before the tests could report."
    return Verdict.failed, clean_message(result["error"] or "")


def grade(
    spec: ExerciseData,
    code: str,
    *,
    sandbox: Sandbox,
    work_root: Path | None = None,
    gpus: tuple[str, ...] = (),
    params: dict[str, int | float | str] | None = None,
) -> GradeOutcome:
    """Grade ``code`` against ``spec`` in ``sandbox``; never raises except ``SandboxUnavailable``.

    ``params``: the learner's variant, for the hidden tests (``None``: the exercise's default variant).
    """
    started = time.monotonic()
    max_score = spec.max_score
    private: Path | None = None
    device = ""
    try:
        device = device_label(spec, sandbox, gpus=gpus)
        if work_root is not None:
            work_root.mkdir(parents=True, exist_ok=True)
        private = Path(tempfile.mkdtemp(prefix="gpulab-job-", dir=work_root))
        private.chmod(0o711)
        variant = spec.default_params if params is None else params
        job_dir = write_job_dir(private / "job", spec=spec, code=code, gpus=len(gpus), params=variant)
        run = sandbox.run(job_dir, spec.limits)
        result = read_result(job_dir / "out")
        verdict, message = decide(spec, run, result)
        tests = _test_outcomes(spec, result)
        score = min(max_score, sum(t.points for t in tests))
        if verdict is Verdict.failed and max_score > 0 and score == max_score:
            verdict = Verdict.passed
        return GradeOutcome(
            verdict=verdict,
            score=score,
            max_score=max_score,
            tests=tests,
            stdout=_decode(run.stdout, run.output_truncated),
            stderr=_decode(run.stderr, run.output_truncated),
            runtime_ms=int((time.monotonic() - started) * 1000),
            device=device,
            sandbox=sandbox.name,
            message=message,
            measurements=_measurements(spec, result),
        )
    except SandboxUnavailable:
        raise
    except Exception as exc:  # ours, not the learner's: report it as a retryable platform error
        return GradeOutcome(
            verdict=Verdict.internal_error,
            score=0.0,
            max_score=max_score,
            runtime_ms=int((time.monotonic() - started) * 1000),
            device=device,
            sandbox=sandbox.name,
            message=f"grading failed: {type(exc).__name__}: {exc}",
        )
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
