"""``[leaderboard]`` in ``exercise.toml``: off when absent, a metric the hidden tests record, clear refusals."""

from __future__ import annotations

import pytest

from tests.support import BANK
from worker.bank.spec import ExerciseSpec, Leaderboard, load_exercise, recorded_names
from worker.core.errors import ExerciseFormatError
from worker.grading.examples import examples_files

MEASURED = (
    "def test_fast(measure):\n"
    '    measure.record("bytes per step", 10.0, unit="B")\n'
    '    measure.grade("accuracy", 0.9, target=0.8, compare=">=", message="train longer")\n'
    '    measure.record(f"built {1}", 1.0)\n'
)


def files(toml: str, tests: str = MEASURED) -> dict[str, str]:
    return {
        "exercise.toml": toml,
        "prompt.md": "Do it.",
        "starter.py": "def f(): ...\n",
        "solution.py": "def f(): return 1\n",
        "tests/test_a.py": tests,
    }


def spec_of(toml: str, tests: str = MEASURED) -> ExerciseSpec:
    return ExerciseSpec.from_files("tiny-board", files(toml, tests))


def problem(toml: str, tests: str = MEASURED) -> str:
    with pytest.raises(ExerciseFormatError) as caught:
        spec_of(toml, tests)
    return caught.value.message


def test_without_the_table_there_is_no_board() -> None:
    assert spec_of('title = "x"\n').leaderboard is None


def test_the_table_names_a_recorded_metric_and_its_order() -> None:
    spec = spec_of('title = "x"\n[leaderboard]\nmetric = " bytes per step "\norder = "lower"\nlabel = "Bytes"\n')
    assert spec.leaderboard == Leaderboard(metric="bytes per step", order="lower", label="Bytes")
    assert spec.leaderboard.heading == "Bytes"
    graded = spec_of('title = "x"\n[leaderboard]\nmetric = "accuracy"\norder = "higher"\n').leaderboard
    assert graded is not None and graded.heading == "accuracy"  # no label: the metric's name
    assert graded.better(0.9, 0.8) and not graded.better(0.8, 0.9)
    assert spec.leaderboard.better(1.0, 2.0) and not spec.leaderboard.better(2.0, 2.0)


def test_the_board_survives_the_stored_form() -> None:
    spec = spec_of('title = "x"\n[leaderboard]\nmetric = "accuracy"\norder = "higher"\n')
    assert ExerciseSpec.from_json(spec.to_json()).leaderboard == spec.leaderboard


def test_only_literal_names_of_record_and_grade_calls_count() -> None:
    assert recorded_names({"test_a.py": MEASURED}) == {"bytes per step", "accuracy"}


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('metric = "seconds"\norder = "lower"', "leaderboard.metric 'seconds' is not a measurement"),
        ('metric = "built 1"\norder = "lower"', "recorded: 'accuracy', 'bytes per step'"),
        ('metric = "accuracy"\norder = "best"', "leaderboard.order"),
        ('metric = "accuracy"', "leaderboard.order"),
        ('metric = ""\norder = "lower"', "leaderboard.metric"),
        ('metric = "accuracy"\norder = "higher"\nrank_by = "x"', "rank_by"),
        (f'metric = "accuracy"\norder = "higher"\nlabel = "{"L" * 61}"', "leaderboard.label"),
    ],
)
def test_bad_tables_are_refused_naming_the_field(table: str, expected: str) -> None:
    assert expected in problem(f'title = "x"\n[leaderboard]\n{table}\n')


def test_a_quiz_takes_no_leaderboard() -> None:
    toml = 'title = "q"\nkind = "quiz"\n[leaderboard]\nmetric = "a"\norder = "lower"\n'
    with pytest.raises(ExerciseFormatError) as caught:
        ExerciseSpec.from_files("tiny-quiz", {"exercise.toml": toml, "prompt.md": "x", "quiz.toml": ""})
    assert "a quiz takes no leaderboard" in caught.value.message


def test_the_comm_tuning_exercise_opts_in_to_bytes_per_step() -> None:
    board = load_exercise(BANK / "torch-ddp-comm-tuning").leaderboard
    assert board == Leaderboard(
        metric="bytes all-reduced per optimizer step (rank 0)", order="lower", label="Bytes per step"
    )


def test_the_example_run_drops_the_board_its_tests_do_not_measure() -> None:
    spec = load_exercise(BANK / "torch-ddp-comm-tuning")
    assert ExerciseSpec.from_files(spec.slug, examples_files(spec)).leaderboard is None
