"""The editor's ``exercise.toml``: written with tomli-w, it reads back as the form's data plus what it carries over."""

from __future__ import annotations

import tomllib

from app.domain.exercises.authoring import AuthoringForm, WrongForm, files_from_form
from tests.conftest import tiny_files
from worker.bank.spec import ExerciseSpec

TITLE = 'Add "two" numbers \\ é \x7f'


def test_editor_toml_reads_back_as_the_form_and_the_carried_over_keys() -> None:
    base = tiny_files(prompt_md="Add.\n", queue="cpu", tag="toml")
    # Keys the editor does not show must survive it: a top-level one and one inside [limits].
    toml = base["exercise.toml"].replace("\n[points]\n", "replicas = 2\n[limits]\npids = 32\n[points]\n")
    assert tomllib.loads(toml)["replicas"] == 2
    base["exercise.toml"] = toml
    wrong = WrongForm(name="subtracts.py", code=base["wrong/subtracts.py"], must_fail=["test_add.py::test_small"])
    form = AuthoringForm(
        slug="tiny-toml",
        title=TITLE,
        topic="Warm-up",
        queue="gpu",
        timeout_s=12.5,
        memory_mb=512,
        starter=base["starter.py"],
        solution=base["solution.py"],
        test_file="test_add.py",
        tests=base["tests/test_add.py"],
        wrong=[wrong],
    )
    files = files_from_form(form, base=base)
    assert tomllib.loads(files["exercise.toml"]) == {
        "title": TITLE,
        "kind": "code",
        "topic": "Warm-up",
        "difficulty": "beginner",
        "framework": "python",
        "queue": "gpu",
        "replicas": 2,
        "limits": {"pids": 32, "timeout_s": 12.5, "memory_mb": 512},
        "points": {"test_add.py::test_small": 2, "test_add.py::test_negative": 3},
        "wrong": [{"file": "wrong/subtracts.py", "must_fail": ["test_add.py::test_small"]}],
    }
    spec = ExerciseSpec.from_files("tiny-toml", files)
    assert (spec.title, spec.queue, spec.replicas, spec.max_score) == (TITLE, "gpu", 2, 5)
    assert (spec.limits.timeout_s, spec.limits.memory_mb, spec.limits.pids) == (12.5, 512, 32)


def test_a_wrong_variants_feedback_fragment_survives_the_editor() -> None:
    base = tiny_files(prompt_md="Add.\n", queue="cpu", tag="fb")
    wrong = WrongForm(
        name="subtracts.py", code=base["wrong/subtracts.py"], must_fail=["test_add.py::test_small"],
        feedback=" should be 3 ",
    )  # fmt: skip
    form = AuthoringForm(
        slug="tiny-fb", title="Add", starter=base["starter.py"], solution=base["solution.py"],
        test_file="test_add.py", tests=base["tests/test_add.py"], wrong=[wrong],
    )  # fmt: skip
    files = files_from_form(form, base=base)
    assert tomllib.loads(files["exercise.toml"])["wrong"][0]["feedback"] == "should be 3"
    assert ExerciseSpec.from_files("tiny-fb", files).wrong[0].feedback == "should be 3"
