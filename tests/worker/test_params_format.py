"""`[params.NAME]` in exercise.toml: the format, its placeholders, the draw, what `exercises check` grades."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from worker.bank.spec import ExerciseSpec, load_bank, read_meta
from worker.bank.specdata import Param, params_of, render_params
from worker.core.errors import ExerciseFormatError
from worker.grading.bankcheck import variants
from worker.grading.jobdir import write_job_dir
from worker.runner.judge import read_job

if TYPE_CHECKING:
    from worker.grading.sandbox.local import LocalSandbox

BANK = Path(__file__).resolve().parents[2] / "exercises"
TOML = 'title = "T"\n'


def _files(toml: str, *, solution: str = "def answer():\n    return {{ params.n }}\n") -> dict[str, str]:
    return {
        "exercise.toml": TOML + toml,
        "prompt.md": "Return **{{ params.n }}** ({{ params.word }}).\n",
        "starter.py": "def answer():\n    raise NotImplementedError\n",
        "solution.py": solution,
        "tests/test_a.py": "def test_a(submission, params):\n    assert submission.answer() == params['n']\n",
    }


PARAMS = '[params.n]\nrange = [2, 10]\nstep = 2\ndefault = 4\n[params.word]\nchoices = ["alpha", "beta"]\n'


def test_choices_and_ranges_become_values_with_a_default() -> None:
    spec = ExerciseSpec.from_files("tiny-params", _files(PARAMS))
    assert spec.params == (Param("n", (2, 4, 6, 8, 10), 4), Param("word", ("alpha", "beta"), "alpha"))
    assert spec.default_params == {"n": 4, "word": "alpha"}
    assert spec.rendered("prompt.md", {"n": 8, "word": "beta"}) == "Return **8** (beta).\n"
    assert spec.rendered("solution.py", {"n": 8, "word": "beta"}) == "def answer():\n    return 8\n"
    # The hidden tests are never rendered: they read the params fixture.
    assert "params['n']" in spec.rendered("tests/test_a.py", {"n": 8, "word": "beta"})


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('[params.n]\nchoices = [1, "x"]\n', "params.n choices mixes numbers and text"),
        ("[params.n]\nrange = [5, 1]\n", "params.n range must go up: [5, 1]"),
        ("[params.n]\nchoices = [1]\nrange = [1, 2]\n", "give either choices = [...] or range = [first, last]"),
        ("[params.n]\n", "give either choices = [...] or range = [first, last]"),
        ("[params.n]\nchoices = [1, 1]\n", "params.n choices repeats a value"),
        ("[params.n]\nchoices = [1, 2]\ndefault = 3\n", "params.n default 3 is not one of the values"),
        ("[params.n]\nchoices = [1, 2]\nstep = 2\n", "step goes with range, not with choices"),
        ("[params.n]\nrange = [1, 5000]\n", "range offers more than 1000 values"),
        ("[params.n]\nchoices = [true]\n", "params.n.choices[0]"),
        ("[params.n]\nchoices = [1]\nwhat = 2\n", "params.n.what"),
        ('[params.n]\nchoices = ["{{ x }}"]\n', "params.n.choices[0]"),
        ("[params.Big]\nchoices = [1]\n", "params.Big"),
    ],
)
def test_a_bad_params_table_is_refused_naming_the_field(toml: str, problem: str) -> None:
    with pytest.raises(ExerciseFormatError) as caught:
        read_meta("tiny-params", TOML + toml)
    assert problem in str(caught.value)


def test_a_placeholder_of_an_undeclared_parameter_is_refused() -> None:
    with pytest.raises(ExerciseFormatError) as caught:
        ExerciseSpec.from_files("tiny-params", _files(PARAMS, solution="X = {{ params.batch }}\n"))
    assert "solution.py uses {{ params.batch }} but exercise.toml declares no [params.batch]" in str(caught.value)
    assert "(declared: n, word)" in str(caught.value)


def test_a_quiz_takes_no_params() -> None:
    with pytest.raises(ExerciseFormatError, match="a quiz takes no params"):
        read_meta("tiny-quiz", 'title = "Q"\nkind = "quiz"\n[params.n]\nchoices = [1, 2]\n')


def test_render_fills_only_params_placeholders_and_leaves_other_braces() -> None:
    text = "{{ params.n }} {{params.n}} {{ other }} {{ params.missing }} {'a': {1}} {{ params.lr }}"
    assert render_params(text, {"n": 3, "lr": 0.1}) == "3 3 {{ other }} {{ params.missing }} {'a': {1}} 0.1"


def test_the_draw_is_stable_spread_and_within_the_values() -> None:
    spec = ExerciseSpec.from_files("tiny-params", _files(PARAMS))
    seeds = [bytes([i]) * 32 for i in range(64)]
    drawn = [spec.draw_params(seed) for seed in seeds]
    assert drawn == [spec.draw_params(seed) for seed in seeds], "the same seed draws the same variant"
    assert all(d["n"] in (2, 4, 6, 8, 10) and d["word"] in ("alpha", "beta") for d in drawn)
    assert {d["n"] for d in drawn} == {2, 4, 6, 8, 10} and {d["word"] for d in drawn} == {"alpha", "beta"}


def test_check_params_takes_the_default_first_then_distinct_draws_or_all_when_few() -> None:
    spec = ExerciseSpec.from_files("tiny-params", _files(PARAMS))
    checked = spec.check_params()
    assert checked[0] == {"n": 4, "word": "alpha"} and len(checked) == 3
    assert len({json.dumps(c, sort_keys=True) for c in checked}) == 3
    few = ExerciseSpec.from_files("tiny-few", _files('[params.n]\nchoices = [1, 2]\n[params.word]\nchoices = ["a"]\n'))
    assert few.check_params() == [{"n": 1, "word": "a"}, {"n": 2, "word": "a"}]
    plain = ExerciseSpec.from_files("tiny-plain", {**_files(""), "prompt.md": "p", "solution.py": "x = 1\n"})
    assert plain.params == () and plain.check_params() == [{}]


def test_exercises_check_grades_every_file_in_each_checked_variant() -> None:
    spec = ExerciseSpec.from_files("tiny-params", _files(PARAMS))
    found = variants(spec)
    assert [(v.path, v.params["n"]) for v in found] == [("solution.py", c["n"]) for c in spec.check_params()]
    assert all(v.code == f"def answer():\n    return {v.params['n']}\n" for v in found)
    assert found[0].label == "solution.py [n=4, word='alpha']"


def test_the_judge_reads_the_variant_from_job_json(tmp_path: Path) -> None:
    spec = ExerciseSpec.from_files("tiny-params", _files(PARAMS))
    job_dir = write_job_dir(tmp_path / "job", spec=spec, code="x = 1\n", params={"n": 6, "word": "beta"})
    assert read_job(job_dir).params == {"n": 6, "word": "beta"}
    data = json.loads((job_dir / "job.json").read_text())
    for bad in ({"n": True}, {"n": [1]}, ["n"]):
        (job_dir / "job.json").write_text(json.dumps({**data, "params": bad}))
        with pytest.raises(ValueError, match=r"job\.json params must map names to numbers or strings"):
            read_job(job_dir)


def test_the_stdlib_reader_draws_what_the_format_does() -> None:
    """gpu-check reads [params] without pydantic (params_of): the bank's parameters read the same both ways."""
    import tomllib

    checked = [s for s in load_bank(BANK) if s.params]
    assert {s.slug for s in checked} >= {"torch-lr-scaling", "tf-global-batch"}
    for spec in checked:
        assert params_of(tomllib.loads(spec.files["exercise.toml"]).get("params", {})) == spec.params, spec.slug


def test_exercises_check_grades_each_variant_and_names_the_one_a_file_is_wrong_in(local_sandbox: LocalSandbox) -> None:
    """A wrong file that hard-codes the default variant's answer is caught in the other variants, and named."""
    from worker.grading.bankcheck import check_exercise

    files = _files(PARAMS)
    files["exercise.toml"] += '\n[[wrong]]\nfile = "wrong/hard_coded.py"\nmust_fail = ["test_a.py::test_a"]\n'
    files["wrong/hard_coded.py"] = "def answer():\n    return 4\n"  # right in the default variant only
    spec = ExerciseSpec.from_files("tiny-params", files)
    lines: list[str] = []
    problems = check_exercise(spec, sandbox=local_sandbox, echo=lines.append)
    checked = spec.check_params()
    assert any(c["n"] != 4 for c in checked), "some checked variant has another answer"
    assert problems == [
        f"tiny-params/wrong/hard_coded.py [n=4, word={c['word']!r}] must fail test_a.py::test_a but passes "
        "test_a.py::test_a"
        for c in checked
        if c["n"] == 4
    ], problems
    assert problems, "the default variant (n=4) is among them"
    assert sum(line.startswith("  ok  tiny-params/solution.py [") for line in lines) == 3, lines
