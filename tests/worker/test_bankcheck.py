"""``check_exercise`` on a wrong variant's feedback fragment (its message must say what it gets wrong); the path."""

from __future__ import annotations

from pathlib import Path

from tests.worker.conftest import tiny_add_files
from worker.bank.spec import ExerciseSpec
from worker.grading.bankcheck import check_exercise
from worker.grading.sandbox.fake import FakeJob, FakeSandbox, Reply

SMALL, NEGATIVE = "test_add.py::test_small", "test_add.py::test_negative"
WRONG = "def add(a, b):\n    return a - b\n"


def spec_with(feedback: str | None) -> ExerciseSpec:
    files = tiny_add_files()
    line = f'feedback = "{feedback}"\n' if feedback is not None else ""
    files["exercise.toml"] += f'\n[[wrong]]\nfile = "wrong/minus.py"\nmust_fail = ["{SMALL}"]\n{line}'
    files["wrong/minus.py"] = WRONG
    return ExerciseSpec.from_files("tiny-add", files)


def grader(message: str) -> FakeSandbox:
    """A fake judge: the wrong variant fails test_small (and test_negative, with another message)."""

    def handle(job: FakeJob) -> Reply:
        if job.code != WRONG:
            return job.reply()
        return job.reply(default="failed", messages={SMALL: message, NEGATIVE: "add(-1, -1) subtracts"})

    return FakeSandbox(handle)


def run_check(spec: ExerciseSpec, sandbox: FakeSandbox) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    return check_exercise(spec, sandbox=sandbox, echo=lines.append), lines


def test_the_fragment_in_a_must_fail_message_passes() -> None:
    problems, lines = run_check(
        spec_with("subtracts instead of adding"), grader("add(1, 2) subtracts instead of adding")
    )
    assert problems == []
    assert any(line.startswith("  ok  tiny-add/wrong/minus.py") for line in lines)


def test_a_message_without_the_fragment_is_a_problem_that_quotes_the_message() -> None:
    problems, lines = run_check(spec_with("subtracts instead of adding"), grader("add(1, 2) should be 3"))
    assert problems == [
        "tiny-add/wrong/minus.py: no failure message of its must_fail tests contains its feedback "
        "'subtracts instead of adding' (test_add.py::test_small: 'add(1, 2) should be 3')"
    ]
    assert any(line.startswith("  BAD tiny-add/wrong/minus.py") for line in lines)


def test_the_fragment_only_counts_in_a_must_fail_test_and_is_case_sensitive() -> None:
    # test_negative's message says "subtracts", but test_negative is not in must_fail.
    assert run_check(spec_with("subtracts"), grader("add(1, 2) should be 3"))[0]
    assert run_check(spec_with("Should be"), grader("add(1, 2) should be 3"))[0]


def test_a_variant_without_a_fragment_is_noted_not_failed() -> None:
    problems, lines = run_check(spec_with(None), grader("add(1, 2) should be 3"))
    assert problems == []
    assert any(
        line.startswith("  ok  tiny-add/wrong/minus.py") and "no feedback fragment declared" in line for line in lines
    )
    assert spec_with(None).wrong[0].feedback == "" and spec_with("  x ").wrong[0].feedback == "x"


def test_the_bank_check_reports_a_path_that_leaves_an_exercise_out(tmp_path: Path) -> None:
    from worker.grading.bankcheck import check_bank

    for name, text in tiny_add_files().items():
        (tmp_path / "add-two" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "add-two" / name).write_text(text, encoding="utf-8")
    (tmp_path / "path.toml").write_text('off_path = []\n[[module]]\nslug = "m-one"\ntitle = "One"\nwhy = "W."\n'
                                        'exercises = ["gone-away"]\n', encoding="utf-8")  # fmt: skip
    # Naming no exercise of the bank grades nothing: only the format is checked.
    problems = check_bank(tmp_path, ["nope"], sandbox=FakeSandbox(lambda job: None), echo=lambda line: None)
    assert problems[0] == f"no exercise called 'nope' in {tmp_path}"
    assert problems[1].startswith("path.toml: module[0] ('m-one').exercises names 'gone-away', which is no exercise")


def test_a_message_that_shows_internals_is_a_problem_even_with_its_fragment() -> None:
    shown = "add(1, 2) subtracts instead of adding\nassert -1 == 3"
    problems, _ = run_check(spec_with("subtracts instead of adding"), grader(shown))
    assert len(problems) == 1 and "shows pytest's assertion introspection" in problems[0], problems
    library = "rank 0 raised RuntimeError: Connection closed by peer [127.0.0.1]:5. GLHF!"
    problems, _ = run_check(spec_with("rank 0"), grader(library))
    assert len(problems) == 1 and "gloo's own text" in problems[0], problems


def test_variants_graded_at_once_report_in_the_order_of_the_folder() -> None:
    files = tiny_add_files()
    for i in range(5):
        files["exercise.toml"] += f'\n[[wrong]]\nfile = "wrong/minus{i}.py"\nmust_fail = ["{SMALL}"]\n'
        files[f"wrong/minus{i}.py"] = WRONG + f"# {i}\n"
    spec = ExerciseSpec.from_files("tiny-add", files)

    def handle(job: FakeJob) -> Reply:
        return job.reply(default="failed", messages={SMALL: "subtracts"}) if "# " in job.code else job.reply()

    one = run_check(spec, FakeSandbox(handle))
    lines: list[str] = []
    many = (check_exercise(spec, sandbox=FakeSandbox(handle), echo=lines.append, jobs=4), lines)
    assert one == many and len(one[1]) == 6
    assert [line.split(":")[0] for line in many[1]][1:] == [f"  ok  tiny-add/wrong/minus{i}.py" for i in range(5)]
