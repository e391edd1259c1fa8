"""``exercise.toml`` written back with tomli-w reads as the same data; both writers' callers keep their behaviour."""

from __future__ import annotations

import tomllib
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

from worker.bank.folders import dump_exercise_toml
from worker.bank.spec import ExerciseSpec, discover_test_ids, load_exercise
from worker.grading.examples import HIDDEN_ONLY_KEYS, examples_files

BANK = Path(__file__).resolve().parents[2] / "exercises"
FOLDERS = sorted(p.parent for p in BANK.glob("*/exercise.toml"))


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_every_bank_exercise_toml_round_trips(folder: Path) -> None:
    meta = tomllib.loads((folder / "exercise.toml").read_text())
    assert tomllib.loads(dump_exercise_toml(meta)) == meta


def test_awkward_values_keep_their_types_and_characters() -> None:
    meta: dict[str, Any] = {
        "title": 'Quotes " and \\ backslash, tab\t, DEL \x7f, newline\n, é and 漢字',
        "timeout": 30.0,
        "count": 3,
        "flag": False,
        "big": float("inf"),
        "tags": ["a", "b"],
        "released": date(2024, 5, 1),
        "at": datetime(2024, 5, 1, 12, 30),
        "limits": {"timeout_s": 20.0, "memory_mb": 256},
        "points": {"test_x.py::test_a": 2, "test_x.py::test_b[1-2]": 1.5, "odd key = x": 1},
        "wrong": [
            {"file": "wrong/a.py", "must_fail": ["test_x.py::test_a"], "why": "off by one"},
            {"file": "wrong/b.py", "must_fail": []},
        ],
    }
    text = dump_exercise_toml(meta)
    assert tomllib.loads(text) == meta
    assert text.index("tags") < text.index("[limits]") < text.index("[points]") < text.index("[[wrong]]")


def test_examples_files_keep_everything_but_the_hidden_tests_data() -> None:
    with_examples = [f for f in FOLDERS if (f / "examples").is_dir()]
    assert with_examples, "the bank has no exercise with example tests"
    for folder in with_examples:
        spec = load_exercise(folder)
        meta = tomllib.loads(spec.files["exercise.toml"])
        files = examples_files(spec)
        assert tomllib.loads(files["exercise.toml"]) == {k: v for k, v in meta.items() if k not in HIDDEN_ONLY_KEYS}
        rebuilt = ExerciseSpec.from_files(spec.slug, files)
        assert (rebuilt.title, rebuilt.queue, rebuilt.framework) == (spec.title, spec.queue, spec.framework)
        assert {t.id for t in rebuilt.tests} == set(discover_test_ids(spec.slug, spec.example_test_files))
