"""The runner on its own: ``python -m runner JOB_DIR`` over temporary job directories, no sandbox."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from worker.bank.spec import discover_test_ids

WORKER_DIR = Path(__file__).resolve().parents[2] / "worker"


def make_job(
    root: Path,
    code: str,
    tests: dict[str, str],
    *,
    timeout_s: float = 10.0,
    learner_process: str | None = None,
    params: dict[str, Any] | None = None,
) -> Path:
    """Write a job directory the way the host does, with expected ids found by parsing the tests."""
    job = root / "job"
    (job / "submission").mkdir(parents=True)
    (job / "tests").mkdir()
    (job / "out").mkdir()
    (job / "ipc").mkdir()
    (job / "probes").mkdir()
    subject = {"version": 1, "module": "submission", "preload": [], "max_reply_bytes": 1 << 20}
    (job / "subject.json").write_text(json.dumps(subject))
    sources = {name: textwrap.dedent(text) for name, text in tests.items()}
    ids = discover_test_ids("runner-test", sources)
    expected = [{"id": i, "points": 1.0} for i in ids]
    spec: dict[str, Any] = {"version": 1, "timeout_s": timeout_s, "module": "submission", "tests": expected}
    if learner_process is not None:
        spec["learner_process"] = learner_process
    if params is not None:
        spec["params"] = params
    (job / "job.json").write_text(json.dumps(spec))
    (job / "submission" / "submission.py").write_text(textwrap.dedent(code))
    for name, text in sources.items():
        (job / "tests" / name).write_text(text)
    return job


def run_runner(job: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run the runner as the sandbox would; return the process and the parsed result (or None)."""
    full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(WORKER_DIR), "PYTHONDONTWRITEBYTECODE": "1", **env}
    proc = subprocess.run(
        [sys.executable, "-m", "runner", str(job)],
        cwd=job,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    result_path = job / "out" / "result.json"
    return proc, json.loads(result_path.read_text()) if result_path.exists() else None


def by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in result["tests"]}


ADD_TESTS = {
    "test_add.py": """
        def test_small(submission):
            assert submission.add(1, 2) == 3

        def test_message(submission):
            assert submission.add(2, 2) == 4, "add(2, 2) should be 4"

        def test_plain_import():
            import submission
            assert submission.add(0, 0) == 0
    """
}


def test_passing_and_failing_tests_report_teaching_messages(tmp_path: Path) -> None:
    job = make_job(tmp_path, "def add(a, b):\n    return a + b + (a == 2)\n", ADD_TESTS)
    proc, result = run_runner(job)
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result["error"] is None
    tests = by_id(result)
    assert tests["test_add.py::test_small"]["outcome"] == "passed"
    assert tests["test_add.py::test_plain_import"]["outcome"] == "passed"
    failed = tests["test_add.py::test_message"]
    assert failed["outcome"] == "failed"
    assert failed["message"] == "add(2, 2) should be 4"  # the author's sentence, never pytest's "assert 5 == 4"
    assert all(isinstance(t["duration_ms"], int) for t in result["tests"])
    assert not list((job / "out").glob(".*tmp")), "the temporary result file must be renamed away"


def test_exception_in_learner_code_names_type_and_line(tmp_path: Path) -> None:
    code = "def add(a, b):\n    return a / 0\n"
    job = make_job(tmp_path, code, {"test_x.py": "def test_div(submission):\n    submission.add(1, 2)\n"})
    _, result = run_runner(job)
    assert result is not None
    message = by_id(result)["test_x.py::test_div"]["message"]
    assert message == "Your code raised ZeroDivisionError: division by zero (your code, line 2)."
    assert "Traceback" not in message and "runner" not in message


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("x = 1\nprint(y)\n", "Your code raised NameError while being imported: name 'y' is not defined (line 2)"),
        ("def add(a, b)\n    return a + b\n", "Your code has a syntax error on line 1: expected ':'"),
        ("import sys\nsys.exit(3)\n", "Your code called exit() (exit code 3) while being imported"),
    ],
)
def test_broken_submission_fails_every_test_with_the_reason(tmp_path: Path, code: str, expected: str) -> None:
    tests = {
        **ADD_TESTS,
        "test_from.py": "from submission import add\n\ndef test_from():\n    assert add(1, 1) == 2\n",
    }
    job = make_job(tmp_path, code, tests)
    proc, result = run_runner(job)
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result["error"] is None
    assert len(result["tests"]) == 4
    for test in result["tests"]:
        assert test["outcome"] == "failed", test
        assert test["message"].startswith(expected), test


def test_a_check_without_a_message_says_what_it_checks_never_pytests_introspection(tmp_path: Path) -> None:
    tests = {
        "test_bare.py": """
            def test_documented(submission):
                \"\"\"The shards keep the batch's order.

                More words the learner need not read.
                \"\"\"
                assert submission.add(2, 2) == 4

            def test_undocumented(submission):
                assert not [submission.add(2, 2)]
        """
    }
    _, result = run_runner(make_job(tmp_path, "def add(a, b):\n    return 5\n", tests))
    assert result is not None
    documented, undocumented = (
        by_id(result)["test_bare.py::test_documented"],
        by_id(result)["test_bare.py::test_undocumented"],
    )
    assert documented["message"] == "This check failed: the shards keep the batch's order."
    assert "gives no explanation" in undocumented["message"]
    for message in (documented["message"], undocumented["message"]):
        assert "assert" not in message and "[5]" not in message


def test_a_missing_function_is_named_and_a_known_framework_failure_is_explained(tmp_path: Path) -> None:
    code = "def add(a, b):\n    raise RuntimeError('mat1 and mat2 shapes cannot be multiplied (4x3 and 8x2)')\n"
    tests = {
        "test_k.py": """
            def test_missing(submission):
                submission.train(1)

            def test_known(submission):
                submission.add(1, 2)
        """
    }
    _, result = run_runner(make_job(tmp_path, code, tests))
    assert result is not None
    missing, known = by_id(result)["test_k.py::test_missing"], by_id(result)["test_k.py::test_known"]
    assert missing["outcome"] == "failed" and missing["message"].startswith("Your code has no `train`"), missing
    assert "LookupError" not in missing["message"] and "AttributeError" not in missing["message"]
    assert known["message"].startswith("A matrix product (a Linear layer or @) got shapes that do not fit, 4x3 and 8x2")
    assert "(your code, line 2)" in known["message"]
    assert known["details"] == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 8x2)"


def test_parametrized_cases_fold_into_their_base_id(tmp_path: Path) -> None:
    tests = {
        "test_p.py": """
            import pytest

            @pytest.mark.parametrize("n", [1, 2, 3])
            def test_double(submission, n):
                assert submission.double(n) == 2 * n, f"double({n}) should be {2 * n}"

            @pytest.mark.parametrize("n", [1, 2])
            def test_positive(submission, n):
                assert submission.double(n) > 0
        """
    }
    job = make_job(tmp_path, "def double(n):\n    return 2 * n + (n == 2)\n", tests)
    _, result = run_runner(job)
    assert result is not None
    assert [t["id"] for t in result["tests"]] == ["test_p.py::test_double", "test_p.py::test_positive"]
    tests_by_id = by_id(result)
    assert tests_by_id["test_p.py::test_double"]["outcome"] == "failed"
    assert tests_by_id["test_p.py::test_double"]["message"] == "[2] double(2) should be 4"
    assert tests_by_id["test_p.py::test_positive"]["outcome"] == "passed"


def test_broken_test_file_is_an_error_not_the_learners_failure(tmp_path: Path) -> None:
    tests = {"test_ok.py": "def test_ok():\n    pass\n", "test_bad.py": "def test_bad():\n    pass\n"}
    job = make_job(tmp_path, "x = 1\n", tests)
    (job / "tests" / "test_bad.py").write_text("def test_bad(:\n")  # broken after the ids were known
    _, result = run_runner(job)
    assert result is not None
    assert result["error"] is not None and "test_bad.py" in result["error"]
    tests_by_id = by_id(result)
    assert tests_by_id["test_ok.py::test_ok"]["outcome"] == "passed"
    assert tests_by_id["test_bad.py::test_bad"]["outcome"] == "error"


def test_skip_and_learner_output(tmp_path: Path) -> None:
    tests = {
        "test_s.py": """
            import pytest

            def test_skipped():
                pytest.skip("not today")

            def test_prints(submission):
                submission.shout()
        """
    }
    job = make_job(tmp_path, "def shout():\n    print('hello from the learner')\n", tests)
    proc, result = run_runner(job)
    assert result is not None
    assert by_id(result)["test_s.py::test_skipped"] == {
        "id": "test_s.py::test_skipped",
        "outcome": "skipped",
        "message": "not today",
        "duration_ms": by_id(result)["test_s.py::test_skipped"]["duration_ms"],
    }
    assert proc.stdout == "hello from the learner\n", "pytest itself must print nothing on stdout"


def test_pytest_environment_and_submission_conftest_are_ignored(tmp_path: Path) -> None:
    job = make_job(tmp_path, "def add(a, b):\n    return a + b + (a == 2)\n", ADD_TESTS)
    (job / "submission" / "conftest.py").write_text("raise RuntimeError('conftest from the submission ran')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --collect-only\n")
    proc, result = run_runner(job, PYTEST_ADDOPTS="--collect-only -x", PYTEST_PLUGINS="nonexistent_plugin")
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result["error"] is None
    assert [t["outcome"] for t in result["tests"]] == ["passed", "failed", "passed"]


def test_inner_timeout_reports_the_running_test_and_stops(tmp_path: Path) -> None:
    tests = {
        "test_t.py": """
            def test_first(submission):
                assert submission.spin() is None

            def test_second():
                pass
        """
    }
    job = make_job(tmp_path, "def spin():\n    while True:\n        pass\n", tests, timeout_s=1.0)
    started = time.monotonic()
    proc, result = run_runner(job)
    assert time.monotonic() - started < 5
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result["timed_out"] is True
    tests_by_id = by_id(result)
    assert tests_by_id["test_t.py::test_first"]["outcome"] == "failed"
    assert "Time limit of 1 s" in tests_by_id["test_t.py::test_first"]["message"]
    assert tests_by_id["test_t.py::test_second"]["outcome"] == "failed"
    assert tests_by_id["test_t.py::test_second"]["message"].startswith("Not run")


def test_hard_exit_fails_every_test_but_the_judge_reports(tmp_path: Path) -> None:
    job = make_job(tmp_path, "import os\nos._exit(0)\n", ADD_TESTS)
    proc, result = run_runner(job)
    assert proc.returncode == 0
    assert result is not None
    for test in result["tests"]:
        assert test["outcome"] == "failed"
        assert test["message"] == "Your code exited while the test was running (exit code 0)"


# Each test reports which learner process ran it and how many calls that process had seen.
COUNTING_CODE = """
import os
calls = 0

def who():
    global calls
    calls += 1
    return [os.getpid(), calls]

def die():
    os._exit(3)
"""
COUNTING_TESTS = {
    "test_a.py": """
        def test_one(submission):
            assert False, repr(submission.who())

        def test_two(submission):
            assert False, repr(submission.who())

        def test_dies(submission):
            submission.die()

        def test_after_death(submission):
            assert False, repr(submission.who())
    """,
    "test_b.py": """
        def test_other_file(submission):
            assert False, repr(submission.who())
    """,
}


def _seen(result: dict[str, Any]) -> dict[str, list[int]]:
    found = {t["id"].split("::")[1]: re.match(r"\[(\d+), (\d+)\]", t["message"]) for t in result["tests"]}
    return {name: [int(m.group(1)), int(m.group(2))] for name, m in found.items() if m}


def test_each_test_gets_a_fresh_learner_process_by_default(tmp_path: Path) -> None:
    proc, result = run_runner(make_job(tmp_path, COUNTING_CODE, COUNTING_TESTS))
    assert proc.returncode == 0 and result is not None, proc.stderr
    seen = _seen(result)
    assert [calls for _, calls in seen.values()] == [1, 1, 1, 1]
    assert len({pid for pid, _ in seen.values()}) == 4


def test_per_file_learner_process_is_shared_within_a_file_and_replaced_when_it_dies(tmp_path: Path) -> None:
    job = make_job(tmp_path, COUNTING_CODE, COUNTING_TESTS, learner_process="per-file")
    proc, result = run_runner(job)
    assert proc.returncode == 0 and result is not None, proc.stderr
    seen = _seen(result)
    assert seen["test_one"][1] == 1 and seen["test_two"] == [seen["test_one"][0], 2]
    assert by_id(result)["test_a.py::test_dies"]["message"].startswith("Your code exited")
    # The dead process is replaced by a fresh one; the next file starts from a fresh one too.
    assert seen["test_after_death"][1] == 1 and seen["test_after_death"][0] != seen["test_one"][0]
    assert seen["test_other_file"][1] == 1 and seen["test_other_file"][0] not in (
        seen["test_one"][0], seen["test_after_death"][0])  # fmt: skip


SIBLING_CODE = """
import os, time

IMPORTED_AT = time.monotonic()


def imported_at():
    return IMPORTED_AT


def kill_siblings():
    # The learner's process is forked from the subject; the next test's process (forked ahead) is its sibling.
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getppid():
            os.kill(int(entry), 9)
            killed += 1
    return killed
"""

SIBLING_TESTS = {
    "test_s.py": """
        import time

        def test_kills_the_next_tests_process(submission):
            assert submission.kill_siblings() >= 1

        def test_still_runs(submission):
            started = time.monotonic()
            time.sleep(0.3)
            # Forked ahead, the process imported the learner's module only once this test asked for it.
            assert submission.imported_at() > started + 0.25
    """
}


def test_a_learner_process_that_kills_the_next_tests_process_costs_that_test_nothing(tmp_path: Path) -> None:
    proc, result = run_runner(make_job(tmp_path, SIBLING_CODE, SIBLING_TESTS))
    assert proc.returncode == 0 and result is not None, proc.stderr
    tests = by_id(result)
    assert tests["test_s.py::test_kills_the_next_tests_process"]["outcome"] == "passed", tests
    assert tests["test_s.py::test_still_runs"]["outcome"] == "passed", tests


def test_unknown_learner_process_mode_is_a_bad_job(tmp_path: Path) -> None:
    proc, result = run_runner(make_job(tmp_path, COUNTING_CODE, COUNTING_TESTS, learner_process="per-run"))
    assert proc.returncode != 0 and result is None
    assert "learner_process" in proc.stderr


@pytest.mark.parametrize("job_json", [None, "not json", '{"version": 2, "timeout_s": 1}', '{"version": 1}'])
def test_bad_job_file_exits_nonzero_without_result(tmp_path: Path, job_json: str | None) -> None:
    job = make_job(tmp_path, "x = 1\n", {"test_a.py": "def test_a():\n    pass\n"})
    if job_json is None:
        (job / "job.json").unlink()
    else:
        (job / "job.json").write_text(job_json)
    proc, result = run_runner(job)
    assert proc.returncode != 0
    assert result is None
    assert "job.json" in proc.stderr


def test_a_long_message_is_trimmed_on_a_word_boundary() -> None:
    from worker.runner.plugin import MAX_MESSAGE, _trim

    text = " ".join(["checkpoint"] * 400)
    trimmed = _trim(text)
    head, tail = trimmed.split("\n")
    assert tail == "... (trimmed)" and len(trimmed) <= MAX_MESSAGE
    assert head.split(" ")[-1] == "checkpoint", "the cut must not end mid-word"


PARAMS_TESTS = {
    "test_params.py": """
        def test_sees_the_variant(submission, params):
            assert params == {"n": 7, "word": "beta"}, params
            assert submission.times(3) == 3 * params["n"], "times(3) is 3 * n"

        def test_gets_its_own_copy(params):
            params["n"] = 0

        def test_after_a_change(params):
            assert params["n"] == 7, "a test's change of params does not reach the next one"
    """
}


def test_the_params_fixture_is_the_variant_of_job_json(tmp_path: Path) -> None:
    job = make_job(tmp_path, "def times(k):\n    return 7 * k\n", PARAMS_TESTS, params={"n": 7, "word": "beta"})
    _, result = run_runner(job)
    assert result is not None and {t["id"]: t["outcome"] for t in result["tests"]} == {
        "test_params.py::test_sees_the_variant": "passed",
        "test_params.py::test_gets_its_own_copy": "passed",
        "test_params.py::test_after_a_change": "passed",
    }, result


def test_without_params_the_fixture_is_empty(tmp_path: Path) -> None:
    tests = {"test_p.py": "def test_empty(params):\n    assert params == {}, params\n"}
    _, result = run_runner(make_job(tmp_path, "x = 1\n", tests))
    assert result is not None and result["tests"][0]["outcome"] == "passed", result


def test_a_learner_process_that_never_starts_is_a_platform_error_not_a_time_limit(tmp_path: Path) -> None:
    """The judge alone (no subject connects): its wait for the subject runs out long before the time limit."""
    job = make_job(tmp_path, "def add(a, b):\n    return a + b\n", ADD_TESTS, timeout_s=30)
    spec = json.loads((job / "job.json").read_text())
    (job / "job.json").write_text(json.dumps({**spec, "accept_wait_s": 0.5}))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(WORKER_DIR), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "runner.judge", str(job)], cwd=job, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "out" / "result.json").read_text())
    assert "timed_out" not in result  # the learner's 30 s were not spent: no time limit was reached
    assert result["platform_error"] == (
        "Not graded: the process that runs your code did not start within 0.5 s (the grader, not your code)"
    )
    assert all(t["outcome"] != "passed" for t in result["tests"])


def test_a_job_with_a_bad_accept_wait_is_a_bad_job(tmp_path: Path) -> None:
    job = make_job(tmp_path, "def add(a, b):\n    return a + b\n", ADD_TESTS)
    spec = json.loads((job / "job.json").read_text())
    (job / "job.json").write_text(json.dumps({**spec, "accept_wait_s": 0}))
    proc, result = run_runner(job)
    assert proc.returncode != 0 and result is None and "accept_wait_s" in proc.stderr
