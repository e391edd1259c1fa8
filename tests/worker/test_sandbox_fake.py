"""The fake sandbox through the real pipeline: it reports what its handler says, and a bad reply is refused."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from worker.bank.spec import ExerciseSpec
from worker.core.config import Settings
from worker.core.outcome import TestOutcomeKind, Verdict
from worker.grading.pipeline import NOT_REPORTED, TRUNCATED, grade
from worker.grading.sandbox.fake import FakeJob, FakeSandbox, Reply

SpecFactory = Callable[..., ExerciseSpec]
SMALL, NEGATIVE = "test_add.py::test_small", "test_add.py::test_negative"
CODE = "def add(a, b):\n    return a + b\n"


def test_passing_passes_every_test_and_records_what_the_job_asked(tiny_spec: SpecFactory) -> None:
    fake = FakeSandbox.passing()
    outcome = grade(tiny_spec(timeout_s=7), CODE, sandbox=fake)
    assert outcome.verdict is Verdict.passed and outcome.score == outcome.max_score == 3
    assert outcome.sandbox == "fake" and outcome.device == "CPU"
    (job,) = fake.runs
    assert job.code == CODE and job.limits.timeout_s == 7
    assert [(t.id, t.points) for t in job.tests] == [(SMALL, 1.0), (NEGATIVE, 2.0)]
    assert "def test_small(submission)" in job.test_files["test_add.py"]


def test_failing_fails_the_named_tests_with_their_points(tiny_spec: SpecFactory) -> None:
    outcome = grade(tiny_spec(), CODE, sandbox=FakeSandbox.failing(NEGATIVE, message="add(-1, -1) should be -2"))
    assert outcome.verdict is Verdict.failed and outcome.score == 1
    small, negative = outcome.tests
    assert small.outcome is TestOutcomeKind.passed and small.points == 1
    assert negative.outcome is TestOutcomeKind.failed and negative.points == 0
    assert negative.message == "add(-1, -1) should be -2"
    assert grade(tiny_spec(), CODE, sandbox=FakeSandbox.failing()).score == 0


def test_the_handler_decides_from_the_code_and_may_be_replaced(tiny_spec: SpecFactory) -> None:
    def subtracts_fail(job: FakeJob) -> Reply:
        return job.reply(default="failed" if "a - b" in job.code else "passed", stdout=b"hello\n")

    fake = FakeSandbox(subtracts_fail)
    right = grade(tiny_spec(), CODE, sandbox=fake)
    wrong = grade(tiny_spec(), "def add(a, b):\n    return a - b\n", sandbox=fake)
    assert (right.verdict, wrong.verdict) == (Verdict.passed, Verdict.failed)
    assert right.stdout == "hello\n" and all(t.message for t in wrong.tests)
    fake.handler = lambda job: job.reply({SMALL: "error"})
    assert grade(tiny_spec(), CODE, sandbox=fake).tests[0].outcome is TestOutcomeKind.error
    assert [job.code for job in fake.runs] == [CODE, "def add(a, b):\n    return a - b\n", CODE]


@pytest.mark.parametrize(
    ("fake", "verdict", "says"),
    [
        (FakeSandbox.timing_out(), Verdict.timeout, "time limit of 2 s"),
        (FakeSandbox.crashing(), Verdict.crashed, "was killed by SIGKILL before the tests could report"),
        (FakeSandbox.crashing(exit_code=3), Verdict.crashed, "exited with code 3"),
        (FakeSandbox(lambda job: Reply(exit_code=-9, memory_exceeded=True)), Verdict.memory_limit, "memory limit"),
        (FakeSandbox.broken("the host fell over"), Verdict.internal_error, "PlatformError: the host fell over"),
    ],
)
def test_ready_made_failures_get_the_pipelines_verdicts(
    fake: FakeSandbox, verdict: Verdict, says: str, tiny_spec: SpecFactory
) -> None:
    outcome = grade(tiny_spec(timeout_s=2), CODE, sandbox=fake)
    assert outcome.verdict is verdict and says in outcome.message
    assert outcome.score == 0


def _valid(job: FakeJob) -> dict[str, object]:
    result = job.reply().result
    assert isinstance(result, dict)
    return result


MALFORMED: dict[str, Callable[[FakeJob], object]] = {
    "not JSON": lambda job: b"{not json",
    "not UTF-8": lambda job: b"\xff\xfe",
    "a list": lambda job: [],
    "another version": lambda job: {**_valid(job), "version": 2},
    "an unknown key": lambda job: {**_valid(job), "verdict": "passed"},
    "no error key": lambda job: {"version": 1, "tests": _valid(job)["tests"]},
    "an unknown outcome": lambda job: job.reply(default="maybe").result,
    "a test without its message": lambda job: {
        **_valid(job),
        "tests": [{"id": t.id, "outcome": "passed", "duration_ms": 0} for t in job.tests],
    },
    "timed_out as text": lambda job: {**_valid(job), "timed_out": "yes"},
}


@pytest.mark.parametrize("make", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_reply_that_breaks_the_result_schema_is_refused_like_a_real_judges(
    make: Callable[[FakeJob], object], tiny_spec: SpecFactory
) -> None:
    outcome = grade(tiny_spec(), CODE, sandbox=FakeSandbox(lambda job: Reply(result=make(job))))
    assert outcome.verdict is Verdict.crashed and "before the tests could report" in outcome.message
    assert outcome.score == 0 and {t.message for t in outcome.tests} == {NOT_REPORTED}


def test_only_expected_tests_count(tiny_spec: SpecFactory) -> None:
    def partial(job: FakeJob) -> Reply:
        tests = [
            {"id": test_id, "outcome": "passed", "message": "", "duration_ms": 0}
            for test_id in (SMALL, "test_add.py::test_invented")
        ]
        return Reply(result={"version": 1, "tests": tests, "error": None})

    outcome = grade(tiny_spec(), CODE, sandbox=FakeSandbox(partial))
    assert outcome.verdict is Verdict.failed and outcome.score == 1
    assert [t.name for t in outcome.tests] == [SMALL, NEGATIVE] and outcome.tests[1].message == NOT_REPORTED


def test_output_is_capped_like_a_backend_caps_it(tiny_spec: SpecFactory) -> None:
    fake = FakeSandbox(lambda job: job.reply(stdout=b"x" * 5000, stderr=b"warn"))
    outcome = grade(tiny_spec(output_bytes=1024), CODE, sandbox=fake)
    assert outcome.stdout == "x" * 1024 + TRUNCATED and outcome.stderr == "warn" + TRUNCATED


def test_runs_from_many_threads_are_all_recorded(tiny_spec: SpecFactory) -> None:
    fake = FakeSandbox.passing()
    start = threading.Barrier(8)
    verdicts: list[Verdict] = []

    def submit(i: int) -> None:
        start.wait()
        verdicts.append(grade(tiny_spec(), f"{CODE}# {i}\n", sandbox=fake).verdict)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert verdicts == [Verdict.passed] * 8
    assert sorted(job.code for job in fake.runs) == sorted(f"{CODE}# {i}\n" for i in range(8))


def test_settings_cannot_choose_the_fake(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Settings(mode="dev", data_dir=tmp_path, sandbox="fake")
