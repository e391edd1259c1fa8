"""``[visibility]`` and ``default_visibility`` in ``exercise.toml``: tiers per test, defaults, clear refusals."""

from __future__ import annotations

import pytest

from tests.support import BANK
from tests.worker.test_spec import tiny
from worker.bank.spec import TIERS, ExerciseSpec, Visibility, load_bank, read_meta
from worker.core.errors import ExerciseFormatError

ONE, TWO = "test_a.py::test_one", "test_a.py::TestMore::test_two"


def spec_of(toml: str) -> ExerciseSpec:
    return ExerciseSpec.from_files("tiny-one", tiny(**{"exercise.toml": toml}))


def problem(toml: str) -> str:
    with pytest.raises(ExerciseFormatError) as caught:
        spec_of(toml)
    return caught.value.message.removeprefix("exercise 'tiny-one': ")


def test_without_tiers_every_test_is_visible_now_as_before() -> None:
    spec = spec_of('title = "x"\n')
    assert [spec.visibility(t.id) for t in spec.tests] == ["now", "now"]
    assert spec.test_visibility == Visibility()
    assert TIERS == ("now", "after_due", "never")


def test_a_table_names_tiers_and_the_rest_take_the_default() -> None:
    spec = spec_of(f'title = "x"\n[visibility]\n"{ONE}" = "never"\n')
    assert (spec.visibility(ONE), spec.visibility(TWO)) == ("never", "now")
    spec = spec_of(f'title = "x"\ndefault_visibility = "after_due"\n[visibility]\n"{ONE}" = "now"\n')
    assert (spec.visibility(ONE), spec.visibility(TWO)) == ("now", "after_due")


def test_tiers_survive_the_stored_form() -> None:
    spec = spec_of(f'title = "x"\ndefault_visibility = "never"\n[visibility]\n"{TWO}" = "after_due"\n')
    again = ExerciseSpec.from_json(spec.to_json())
    assert again.test_visibility == spec.test_visibility == Visibility("never", {TWO: "after_due"})


def test_the_metadata_alone_gives_the_same_tiers() -> None:
    toml = f'title = "x"\ndefault_visibility = "never"\n[visibility]\n"{ONE}" = "now"\n'
    assert read_meta("tiny-one", toml).visibility_rule() == spec_of(toml).test_visibility


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            f'title = "x"\n[visibility]\n"{ONE}" = "later"\n',
            f"exercise.toml: visibility.\"{ONE}\" must be 'now', 'after_due' or 'never' (got 'later')",
        ),
        (
            'title = "x"\ndefault_visibility = "hidden"\n',
            "exercise.toml: default_visibility must be 'now', 'after_due' or 'never' (got 'hidden')",
        ),
        (f'title = "x"\n[visibility]\n"{ONE}" = 1\n', f"exercise.toml: visibility.\"{ONE}\" must be 'now'"),
        ('title = "x"\nvisibility = "never"\n', "exercise.toml: visibility must be a table (got 'never')"),
        (
            'title = "x"\n[visibility]\n"test_a.py::nope" = "never"\n"test_b.py::x" = "now"\n',
            "exercise.toml: visibility names unknown tests: test_a.py::nope, test_b.py::x",
        ),
    ],
)
def test_bad_tiers_are_refused_naming_the_field(toml: str, expected: str) -> None:
    assert problem(toml).startswith(expected)


def test_a_quiz_takes_no_tiers() -> None:
    for extra in ('default_visibility = "never"\n', '[visibility]\nq1 = "never"\n'):
        files = {"exercise.toml": f'title = "Q"\nkind = "quiz"\n{extra}', "prompt.md": "Hi", "quiz.toml": ""}
        with pytest.raises(ExerciseFormatError, match=r"a quiz takes no \w+: its results show as soon as"):
            ExerciseSpec.from_files("my-quiz", files)


def test_the_bank_declares_no_tiers_yet() -> None:
    """Every shipped exercise keeps today's behaviour: all of its tests are visible at once."""
    for spec in load_bank(BANK):
        assert spec.test_visibility == Visibility(), spec.slug
