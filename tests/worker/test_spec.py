"""Reading exercise folders: the real bank loads, and every kind of malformed folder gets a clear error."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from tests.support import BANK
from worker.bank.spec import ExerciseMeta, ExerciseSpec, Limits, discover_test_ids, load_bank, load_exercise
from worker.core.errors import ExerciseFormatError
from worker.grading.jobdir import write_job_dir

TOML = 'title = "Tiny"\n[points]\n"test_a.py::test_one" = 3\n'
TESTS = "def test_one(submission):\n    assert True\n\nclass TestMore:\n    def test_two(self):\n        pass\n"


def tiny(**overrides: str) -> dict[str, str]:
    files = {
        "exercise.toml": TOML,
        "prompt.md": "Do it.",
        "starter.py": "def f(): ...\n",
        "solution.py": "def f(): return 1\n",
        "tests/test_a.py": TESTS,
    }
    files.update(overrides)
    return {k: v for k, v in files.items() if v is not None}


def test_real_bank_loads_with_tests_wrong_and_right_variants() -> None:
    specs = load_bank(BANK)
    assert len(specs) >= 2
    frameworks = {s.framework for s in specs}
    assert {"python", "torch"} <= frameworks
    for spec in [s for s in specs if s.kind == "code"]:
        assert spec.tests and spec.max_score > 0, spec.slug
        assert spec.wrong, f"{spec.slug} ships no known-wrong variants"
        assert spec.starter and spec.solution and spec.prompt_md


def test_ids_points_and_hash() -> None:
    spec = ExerciseSpec.from_files("tiny-one", tiny())
    assert [(t.id, t.points) for t in spec.tests] == [
        ("test_a.py::test_one", 3.0),
        ("test_a.py::TestMore::test_two", 1.0),
    ]
    assert spec.max_score == 4.0
    changed = ExerciseSpec.from_files("tiny-one", tiny(**{"prompt.md": "Do it well."}))
    assert changed.content_hash != spec.content_hash
    assert ExerciseSpec.from_files("tiny-one", tiny()).content_hash == spec.content_hash


def test_stored_form_round_trips() -> None:
    spec = ExerciseSpec.from_files("tiny-one", tiny())
    again = ExerciseSpec.from_json(spec.to_json())
    assert again.tests == spec.tests and again.content_hash == spec.content_hash


@pytest.mark.parametrize(
    ("slug", "files", "problem"),
    [
        ("Bad Slug", tiny(), "slug must be"),
        ("tiny-one", tiny(**{"exercise.toml": "title = "}), "not valid TOML"),
        ("tiny-one", tiny(**{"exercise.toml": 'title = "x"\nkind = "essay"'}), "kind must be 'code' or 'quiz'"),
        ("tiny-one", tiny(**{"exercise.toml": 'title = "x"\n[points]\n"test_a.py::nope" = 1'}), "unknown tests"),
        ("tiny-one", tiny(**{"exercise.toml": 'title = "x"\n[limits]\nbogus = 1'}), "limits.bogus is not a known key"),
        (
            "tiny-one",
            tiny(**{"exercise.toml": 'title = "x"\n[limits]\ntimeout_s = 100000'}),
            "exercise.toml: limits.timeout_s must be at most 600 (got 100000)",
        ),
        ("tiny-one", tiny(**{"tests/test_a.py": "def helper():\n    pass\n"}), "no test functions"),
        ("tiny-one", tiny(**{"exercise.toml": 'title = "x"\nlearner_process = "never"'}), "learner_process must be"),
        ("tiny-one", tiny(**{"tests/test_a.py": "def test_(:\n"}), "syntax error"),
        ("tiny-one", tiny(**{"wrong/w.py": "x = 1\n"}), "without a [[wrong]] entry"),
        (
            "tiny-one",
            tiny(**{"exercise.toml": TOML + '[[wrong]]\nfile = "wrong/w.py"\nmust_fail = ["test_a.py::test_one"]\n'}),
            "does not exist",
        ),
    ],
)
def test_malformed_exercises_are_refused_clearly(slug: str, files: dict[str, str], problem: str) -> None:
    with pytest.raises(ExerciseFormatError) as caught:
        ExerciseSpec.from_files(slug, files)
    assert problem in caught.value.message


def test_a_wrong_variant_may_declare_the_feedback_its_message_must_contain() -> None:
    declared = '[[wrong]]\nfile = "wrong/w.py"\nmust_fail = ["test_a.py::test_one"]\n'
    plain = ExerciseSpec.from_files("tiny-one", tiny(**{"exercise.toml": TOML + declared, "wrong/w.py": "x = 1\n"}))
    assert plain.wrong[0].feedback == ""
    spec = ExerciseSpec.from_files(
        "tiny-one", tiny(**{"exercise.toml": TOML + declared + 'feedback = " set_epoch "\n', "wrong/w.py": "x = 1\n"})
    )
    assert spec.wrong[0].feedback == "set_epoch"


def test_missing_solution_is_refused() -> None:
    files = tiny()
    del files["solution.py"]
    with pytest.raises(ExerciseFormatError, match=r"solution\.py is missing"):
        ExerciseSpec.from_files("tiny-one", files)


def test_folder_with_a_symlink_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-one"
    for rel, text in tiny().items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    assert load_exercise(folder).slug == "tiny-one"
    os.symlink("/etc/passwd", folder / "tests" / "data.txt")
    with pytest.raises(ExerciseFormatError, match="symbolic link"):
        load_exercise(folder)


def test_discovery_ignores_non_test_files_and_helpers() -> None:
    ids = discover_test_ids("x", {"helpers.py": "def test_no(): pass", "test_b.py": "def test_yes(): pass\nx = 1\n"})
    assert ids == ["test_b.py::test_yes"]


def test_learner_process_defaults_to_per_test_and_reaches_job_json(tmp_path: Path) -> None:
    assert ExerciseSpec.from_files("tiny-one", tiny()).learner_process == "per-test"
    spec = ExerciseSpec.from_files("tiny-one", tiny(**{"exercise.toml": 'learner_process = "per-file"\n' + TOML}))
    assert spec.learner_process == "per-file"
    write_job_dir(tmp_path / "job", spec=spec, code="def f(): return 1\n")
    assert json.loads((tmp_path / "job" / "job.json").read_text())["learner_process"] == "per-file"


def test_probes_and_preloads_follow_the_framework() -> None:
    files = {**tiny(), "probes.py": "def seen(submission):\n    return 1\n"}
    spec = ExerciseSpec.from_files("tiny-one", files)
    assert spec.probe_files == {"probes.py": files["probes.py"]}
    assert spec.preload == ()
    toml = 'framework = "torch"\n' + files["exercise.toml"]
    torch_spec = ExerciseSpec.from_files("tiny-one", {**files, "exercise.toml": toml})
    assert torch_spec.preload == ("torch",)


def _meta_problem(toml: str, **files: str) -> str:
    with pytest.raises(ExerciseFormatError) as caught:
        ExerciseSpec.from_files("tiny-one", tiny(**{"exercise.toml": toml, **files}))
    return caught.value.message.removeprefix("exercise 'tiny-one': ")


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('titel = "x"\n', "exercise.toml: title is required; titel is not a known key"),
        ('title = "  "\n', "exercise.toml: title must not be empty (got '  ')"),
        ('title = "x"\ntopic = 3\n', "exercise.toml: topic must be a string (got 3)"),
        (
            'title = "x"\n[limits]\nmemory_mb = "256"\n',
            "exercise.toml: limits.memory_mb must be a whole number (got '256')",
        ),
        (
            'title = "x"\n[limits]\nmemory_mb = 256.0\n',
            "exercise.toml: limits.memory_mb must be a whole number (got 256.0)",
        ),
        ('title = "x"\n[limits]\ncpus = 0\n', "exercise.toml: limits.cpus must be above 0 (got 0)"),
        ('title = "x"\nlimits = 3\n', "exercise.toml: limits must be a table (got 3)"),
        (
            'title = "x"\n[points]\n"test_a.py::test_one" = "3"\n',
            "exercise.toml: points.\"test_a.py::test_one\" must be a number (got '3')",
        ),
        (
            'title = "x"\n[points]\n"test_a.py::test_one" = 0\n',
            'exercise.toml: points."test_a.py::test_one" must be above 0 (got 0)',
        ),
        ('title = "x"\n[[wrong]]\nfile = "wrong/w.py"\n', "exercise.toml: wrong[0].must_fail is required"),
        (
            'title = "x"\n[[wrong]]\nfile = "wrong/w.py"\nmust_fail = []\n',
            "exercise.toml: wrong[0].must_fail needs at least 1 entry (got 0)",
        ),
        (
            'title = "x"\n[[wrong]]\npath = "wrong/w.py"\nmust_fail = ["t"]\n',
            "exercise.toml: wrong[0].file is required; wrong[0].path is not a known key",
        ),
        (
            'title = "x"\n' + '[[wrong]]\nfile = "wrong/w.py"\nmust_fail = ["test_a.py::test_one"]\n' * 2,
            "exercise.toml: wrong declares 'wrong/w.py' more than once; one [[wrong]] table per file",
        ),
        (
            'title = "x"\n[[wrong]]\nfile = "wrong/w.py"\nmust_fail = ["test_a.py::nope"]\n',
            "exercise.toml: wrong[0].must_fail names unknown tests: test_a.py::nope",
        ),
    ],
)
def test_metadata_problems_name_the_file_and_the_field(toml: str, problem: str) -> None:
    assert _meta_problem(toml, **{"wrong/w.py": "x = 1\n"}) == problem


def test_a_quiz_takes_no_points_or_wrong_variants() -> None:
    files = {"exercise.toml": 'title = "Q"\nkind = "quiz"\n[points]\none = 2\n', "prompt.md": "Hi", "quiz.toml": ""}
    with pytest.raises(ExerciseFormatError, match=r"a quiz takes no points: its questions in quiz\.toml carry"):
        ExerciseSpec.from_files("my-quiz", files)


def test_limits_default_and_stay_a_dataclass_the_sandboxes_can_derive_from() -> None:
    spec = ExerciseSpec.from_files("tiny-one", tiny())
    assert spec.limits == Limits()
    assert isinstance(spec.limits.timeout_s, float)
    # The judge gets more than an author may ask for: deriving its limits must not re-validate them.
    judge = dataclasses.replace(spec.limits, memory_mb=65536 + 512)
    assert judge.memory_mb == 65536 + 512
    toml = 'title = "x"\n[limits]\ntimeout_s = 20\npids = 128\n'
    limits = ExerciseSpec.from_files("tiny-one", tiny(**{"exercise.toml": toml})).limits
    assert (limits.timeout_s, limits.pids, limits.memory_mb) == (20.0, 128, 1024)


def test_readme_documents_exactly_the_models_keys() -> None:
    readme = (BANK / "README.md").read_text()
    toml_table = readme.split("## `exercise.toml`", 1)[1].split("### `[limits]`", 1)[0]
    documented = set(re.findall(r"^\| `\[*(\w+)\]*` \|", toml_table, re.MULTILINE))
    assert documented == set(ExerciseMeta.model_fields)
    limits_table = readme.split("### `[limits]`", 1)[1].split("###", 1)[0]
    documented_limits = set(re.findall(r"^\| `(\w+)` \|", limits_table, re.MULTILINE))
    assert documented_limits == {f.name for f in dataclasses.fields(Limits)}
