"""The grading pipeline end to end through the real local sandbox (and the unsafe one)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from worker.bank.spec import ExerciseSpec, Limits
from worker.core.config import Settings
from worker.core.errors import SandboxUnavailable
from worker.core.outcome import GradeOutcome, TestOutcomeKind, Verdict
from worker.grading.pipeline import NOT_REPORTED, grade
from worker.grading.sandbox import get_sandbox
from worker.grading.sandbox.base import SandboxRun
from worker.grading.sandbox.local import LocalSandbox
from worker.grading.sandbox.unsafe import UnsafeSandbox

SpecFactory = Callable[..., ExerciseSpec]
CORRECT = "def add(a, b):\n    return a + b\n"


def outcomes(result: GradeOutcome) -> dict[str, tuple[TestOutcomeKind, str]]:
    return {t.name: (t.outcome, t.message) for t in result.tests}


def test_correct_code_passes(local_sandbox: LocalSandbox, tiny_spec: SpecFactory, tmp_path: Path) -> None:
    result = grade(tiny_spec(timeout_s=5), CORRECT, sandbox=local_sandbox, work_root=tmp_path)
    assert result.verdict is Verdict.passed, result
    assert result.score == result.max_score == 3.0
    assert result.sandbox == "local" and result.device == "CPU"
    assert [t.points for t in result.tests] == [1.0, 2.0]
    assert result.runtime_ms > 0
    assert list(tmp_path.iterdir()) == [], "the job directory holds hidden tests and must be deleted"


def test_incorrect_code_fails_with_messages(local_sandbox: LocalSandbox, tiny_spec: SpecFactory) -> None:
    code = "def add(a, b):\n    print('adding', a, b)\n    return a + b if a > 0 else 0\n"
    result = grade(tiny_spec(timeout_s=5), code, sandbox=local_sandbox)
    assert result.verdict is Verdict.failed
    assert result.score == 1.0
    seen = outcomes(result)
    assert seen["test_add.py::test_small"] == (TestOutcomeKind.passed, "")
    kind, message = seen["test_add.py::test_negative"]
    assert kind is TestOutcomeKind.failed
    assert message == "add(-1, -1) should be -2"  # the author's sentence alone: no "assert 0 == -2"
    assert "adding 1 2" in result.stdout


def test_crashing_import_fails_every_test(local_sandbox: LocalSandbox, tiny_spec: SpecFactory) -> None:
    result = grade(tiny_spec(timeout_s=5), "def add(a, b):\n    return a + b\nundefined_name\n", sandbox=local_sandbox)
    assert result.verdict is Verdict.failed and result.score == 0.0
    for kind, message in outcomes(result).values():
        assert kind is TestOutcomeKind.failed
        assert message == (
            "Your code raised NameError while being imported: name 'undefined_name' is not defined (line 3)"
        )


def test_endless_loop_times_out(local_sandbox: LocalSandbox, tiny_spec: SpecFactory) -> None:
    code = "def add(a, b):\n    while True:\n        pass\n"
    result = grade(tiny_spec(timeout_s=1), code, sandbox=local_sandbox)
    assert result.verdict is Verdict.timeout
    assert "time limit of 1 s" in result.message
    assert result.runtime_ms < (1 + local_sandbox.timeout_margin_s + 2) * 1000


def test_hard_exit_fails_the_running_test_only(local_sandbox: LocalSandbox, tiny_spec: SpecFactory) -> None:
    # Each test gets a fresh learner process: an exit fails the test it happened in, the next one still runs.
    code = "import os\n\ndef add(a, b):\n    if a < 0:\n        os._exit(0)\n    return a + b\n"
    result = grade(tiny_spec(timeout_s=5), code, sandbox=local_sandbox)
    assert result.verdict is Verdict.failed
    assert result.score == 1.0
    assert outcomes(result)["test_add.py::test_negative"] == (
        TestOutcomeKind.failed,
        "Your code exited while the test was running (exit code 0)",
    )


def test_judge_that_never_reports_is_a_crash(tiny_spec: SpecFactory) -> None:
    class SilentSandbox:
        name = "silent"
        isolated = True

        def check(self) -> None:
            pass

        def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
            return SandboxRun(exit_code=-9)

    result = grade(tiny_spec(timeout_s=5), CORRECT, sandbox=SilentSandbox())
    assert result.verdict is Verdict.crashed
    assert "was killed by SIGKILL" in result.message
    assert {message for _, message in outcomes(result).values()} == {NOT_REPORTED}


def test_a_subject_that_never_started_is_a_platform_error_even_when_the_clock_ran_out(tiny_spec: SpecFactory) -> None:
    """The runner's ``platform_error`` (no learner code ran) outranks every verdict that would blame the learner."""
    reported = "Not graded: the process that runs your code did not start within 60 s (the grader, not your code)"

    class StalledSandbox:
        name = "stalled"
        isolated = True

        def check(self) -> None:
            pass

        def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
            tests = [{"id": t, "outcome": "error", "message": reported, "duration_ms": 1} for t in ("test_add",)]
            result = {"version": 1, "tests": tests, "error": None, "platform_error": reported, "timed_out": True}
            (job_dir / "out" / "result.json").write_text(json.dumps(result))
            return SandboxRun(exit_code=0, timed_out=True)

    result = grade(tiny_spec(timeout_s=5), CORRECT, sandbox=StalledSandbox())
    assert result.verdict is Verdict.internal_error and result.verdict.is_platform_error
    assert result.message == reported
    assert "time limit" not in result.message


def test_memory_bomb_is_memory_limit(local_sandbox: LocalSandbox, tiny_spec: SpecFactory) -> None:
    code = "hog = [bytearray(16 * 1024 * 1024) for _ in range(64)]\n"
    result = grade(tiny_spec(timeout_s=5, memory_mb=128), code, sandbox=local_sandbox)
    assert result.verdict is Verdict.memory_limit
    assert "128 MB" in result.message


def test_output_flood_is_a_crash_with_truncated_output(local_sandbox: LocalSandbox, tiny_spec: SpecFactory) -> None:
    code = "import sys\nwhile True:\n    sys.stdout.write('z' * 65536)\n"
    result = grade(tiny_spec(timeout_s=5, output_bytes=1024), code, sandbox=local_sandbox)
    assert result.verdict is Verdict.crashed
    assert "output" in result.message
    assert result.stdout.startswith("z" * 1024) and result.stdout.endswith("[output truncated]")


def test_platform_failure_is_internal_error(tiny_spec: SpecFactory, tmp_path: Path) -> None:
    class BrokenSandbox:
        name = "broken"
        isolated = True

        def check(self) -> None:
            """Nothing to check."""

        def run(self, job_dir: Path, limits: object) -> object:
            raise RuntimeError("disk on fire")

    result = grade(tiny_spec(), CORRECT, sandbox=BrokenSandbox(), work_root=tmp_path)  # type: ignore[arg-type]
    assert result.verdict is Verdict.internal_error
    assert "disk on fire" in result.message
    assert list(tmp_path.iterdir()) == []


def test_unavailable_sandbox_propagates(tiny_spec: SpecFactory) -> None:
    class MissingSandbox:
        name = "missing"
        isolated = True

        def check(self) -> None:
            raise SandboxUnavailable("no bwrap here")

        def run(self, job_dir: Path, limits: object) -> object:
            self.check()
            return None

    with pytest.raises(SandboxUnavailable):
        grade(tiny_spec(), CORRECT, sandbox=MissingSandbox())  # type: ignore[arg-type]


def test_unsafe_sandbox_grades_and_says_so(tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULAB_SECRET_KEY", "host-secret-that-must-not-leak-0123456789")
    code = CORRECT + "import os\nprint(sorted(k for k in os.environ if k.startswith('GPULAB')))\n"
    result = grade(tiny_spec(timeout_s=5), code, sandbox=UnsafeSandbox(timeout_margin_s=1.0))
    assert result.verdict is Verdict.passed
    assert result.sandbox == "unsafe" and result.device == "CPU (unsandboxed)"
    assert "[]" in result.stdout


def test_unsafe_sandbox_passes_only_the_named_host_variables(
    tiny_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    monkeypatch.setenv("GPULAB_SECRET_KEY", "host-secret-that-must-not-leak-0123456789")
    code = CORRECT + "import os\nprint(sorted(k for k in os.environ if k in ('LD_LIBRARY_PATH','GPULAB_SECRET_KEY')))\n"
    box = UnsafeSandbox(timeout_margin_s=1.0, pass_env=("LD_LIBRARY_PATH", "GPULAB_SECRET_KEY_UNSET_NAME"))
    result = grade(tiny_spec(timeout_s=5), code, sandbox=box)
    assert result.verdict is Verdict.passed
    assert "['LD_LIBRARY_PATH']" in result.stdout


def test_unsafe_sandbox_times_out(tiny_spec: SpecFactory) -> None:
    code = "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\ntime.sleep(3600)\n"
    result = grade(tiny_spec(timeout_s=1), code, sandbox=UnsafeSandbox(timeout_margin_s=0.5))
    assert result.verdict is Verdict.timeout
    assert result.runtime_ms < 4000


def test_get_sandbox_picks_backends(tmp_path: Path) -> None:
    env = {"mode": "dev", "data_dir": tmp_path}
    assert isinstance(get_sandbox(Settings(sandbox="local", **env)), LocalSandbox)  # type: ignore[arg-type]
    assert isinstance(get_sandbox(Settings(sandbox="unsafe", **env)), UnsafeSandbox)  # type: ignore[arg-type]
    assert get_sandbox(Settings(sandbox="docker", **env)).name == "docker"  # type: ignore[arg-type]


def test_local_check_names_a_missing_user() -> None:
    sandbox = LocalSandbox(user="gpulab-no-such-user-xyz")
    if os.geteuid() != 0:
        pytest.skip("check() reports the missing root first when not root")
    with pytest.raises(SandboxUnavailable, match="gpulab-no-such-user-xyz"):
        sandbox.check()


@pytest.mark.parametrize("credit", [0.25, 0.9999])  # 0.9999: a miss by a hair still shows less than full points
def test_partial_credit_and_measurements_reach_the_outcome(tiny_spec: SpecFactory, credit: float) -> None:
    spec = tiny_spec(timeout_s=5)
    first, *rest = [t.id for t in spec.tests]
    measurement = {
        "test": first, "name": "bytes per step", "value": 500.0, "unit": "B", "target": 200.0, "compare": "<=",
        "met": False, "modelled": False, "basis": "", "chart": None,
    }  # fmt: skip

    class MeasuringSandbox:
        name = "measuring"
        isolated = True

        def check(self) -> None:
            pass

        def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
            tests = [{"id": first, "outcome": "failed", "message": "over budget", "duration_ms": 1, "credit": credit}]
            tests += [{"id": i, "outcome": "passed", "message": "", "duration_ms": 1} for i in rest]
            unknown = {**measurement, "test": "test_nope.py::test_not_expected"}
            result = {"version": 1, "tests": tests, "error": None, "measurements": [measurement, unknown]}
            (job_dir / "out" / "result.json").write_text(json.dumps(result))
            return SandboxRun(exit_code=0)

    result = grade(spec, CORRECT, sandbox=MeasuringSandbox())
    got = {t.name: t for t in result.tests}
    assert got[first].outcome is TestOutcomeKind.failed
    expected = min(round(got[first].max_points * credit, 2), got[first].max_points - 0.01)  # never all its points
    assert got[first].points == expected < got[first].max_points
    assert result.score == got[first].points + sum(got[i].max_points for i in rest)
    assert result.verdict is Verdict.failed
    assert result.measurements == [measurement], "only expected tests' measurements travel on"
