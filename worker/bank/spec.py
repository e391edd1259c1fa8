"""Read one exercise folder into an ``ExerciseSpec``: the single description grading and the app share.

Contract (the format is documented for authors in ``exercises/README.md``):
- A folder holds ``exercise.toml``, ``prompt.md``, ``starter.py``, ``solution.py``, ``tests/`` (hidden),
  and optionally ``examples/`` (visible tests), ``wrong/`` (known-wrong variants) and ``right/``
  (alternative correct solutions). Quiz exercises hold ``quiz.toml`` instead of code files.
- ``exercise.toml`` is the pydantic model ``ExerciseMeta`` (with ``LimitsMeta`` for ``[limits]`` and ``WrongVariant``
  for each ``[[wrong]]``): keys, types, choices, ranges and defaults are declared there, an unknown key is
  refused, and values keep their TOML types. What needs the folder's other files (tests that ``[points]`` and
  ``must_fail`` name, files that ``[[wrong]]`` declares) is checked against them once the metadata is valid.
- Every problem raises ``ExerciseFormatError`` naming the file and the field
  (``exercise.toml: limits.timeout_s must be at most 600 (got 1000)``).
- ``ExerciseSpec.files`` keeps every text file of the folder by relative POSIX path, so a version stored in
  the database can be graded exactly as it was synced, long after the folder changed.
- Expected test ids (``tests/test_x.py::test_name`` minus the ``tests/`` prefix) are found by reading the
  test files' syntax tree on the host: they are known before anything runs, so a test that never reports
  is counted as failed, never as missing.
- Visibility tiers (``[visibility]``, ``default_visibility``; code exercises only) say when a learner may see a
  hidden test's outcome and message: ``now``, ``after_due`` or ``never`` (name and points only). The format
  only records them (``ExerciseSpec.visibility(test_id)``, ``Visibility.of``); ``app.domain.courses.visibility``
  applies them. No ``[visibility]`` and no ``default_visibility`` is every test ``now``, as before tiers.
- Parameters (``[params.NAME]``, ``ParamMeta``; code exercises only) give each learner a variant: ``choices`` or an
  integer ``range`` (with ``step``), and a ``default``. ``{{ params.NAME }}`` in ``prompt.md``, ``starter.py``,
  ``solution.py``, ``right/`` and ``wrong/`` is filled in per variant (``specdata.render_params``); a name that is
  not declared is an error. The hidden tests read the values from the ``params`` fixture (``job.json``).
- A leaderboard (``[leaderboard]``, ``LeaderboardMeta``; code exercises only, off when absent) names one
  measurement (``metric``), the way it ranks (``order``: ``lower`` or ``higher`` is better) and a column ``label``.
  The metric must be a name the hidden tests record literally: the first argument, a plain string, of a
  ``measure.record(...)`` or ``measure.grade(...)`` call in ``tests/`` (``recorded_names``). A name built at run
  time cannot be checked before grading, so it cannot be a board's metric. Who sees the board, and what it ranks,
  is ``app.domain.courses.leaderboard``'s.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StrictFloat, StrictInt, StringConstraints, ValidationError, field_validator, model_validator

from worker.bank.formatkit import FormatModel, Required, Text, readable_problem
from worker.bank.quiz.format import parse_quiz
from worker.bank.rubric import RubricItem
from worker.bank.specdata import (
    DEVICE_MODES,
    DIFFICULTIES,
    FRAMEWORKS,
    KINDS,
    LEARNER_PROCESS_MODES,
    MAX_FILE_BYTES,
    MAX_FILES,
    ORDERS,
    PLACEHOLDER_RE,
    PRELOADS,
    QUEUES,
    RENDERED_FILES,
    SLUG_RE,
    TEXT_SUFFIXES,
    TIERS,
    DeviceMode,
    Difficulty,
    ExerciseData,
    ExpectedTest,
    Framework,
    Kind,
    Leaderboard,
    LearnerProcess,
    Limits,
    Order,
    Param,
    Queue,
    Tier,
    Visibility,
    WrongFile,
    discover_test_ids,
    params_of,
    read_exercise_files,
)
from worker.core.errors import ExerciseFormatError

# What the rest of the project imports from here; the plain shapes live in specdata (no pydantic there).
__all__ = [
    "DEVICE_MODES", "DIFFICULTIES", "FRAMEWORKS", "KINDS", "LEARNER_PROCESS_MODES", "MAX_FILES", "MAX_FILE_BYTES",
    "ORDERS", "PRELOADS", "QUEUES", "SLUG_RE", "TEXT_SUFFIXES", "TIERS", "ExerciseMeta", "ExerciseSpec",
    "ExpectedTest", "Leaderboard", "LeaderboardMeta", "Limits", "LimitsMeta", "Param", "ParamMeta", "Visibility",
    "WrongFile", "WrongVariant", "discover_test_ids", "load_bank", "load_exercise", "read_exercise_files",
    "read_meta", "recorded_names",
]  # fmt: skip


class LimitsMeta(FormatModel):
    """``[limits]``: the ranges an author may ask for; the defaults are ``Limits``' own (``specdata``)."""

    timeout_s: Annotated[float, Field(strict=True, ge=1, le=600)] = Limits.timeout_s
    memory_mb: Annotated[int, Field(strict=True, ge=64, le=65536)] = Limits.memory_mb
    pids: Annotated[int, Field(strict=True, ge=1)] = Limits.pids
    cpus: Annotated[float, Field(strict=True, gt=0)] = Limits.cpus
    output_bytes: Annotated[int, Field(strict=True, ge=1)] = Limits.output_bytes
    tmpfs_mb: Annotated[int, Field(strict=True, ge=1)] = Limits.tmpfs_mb
    file_size_mb: Annotated[int, Field(strict=True, ge=1)] = Limits.file_size_mb

    def limits(self) -> Limits:
        """Return these limits as the plain dataclass the sandboxes take."""
        return Limits(**self.model_dump())


class WrongVariant(FormatModel):
    """A ``[[wrong]]`` table: a known-wrong file, the hidden tests it must fail and what their message must say."""

    path: str = Field(validation_alias="file", min_length=1)  # inside the exercise folder
    must_fail: tuple[str, ...] = Field(min_length=1)
    why: Text = ""  # the mistake it stands for, in one sentence
    # Text the failure message of one of its must_fail tests must contain (exact, case-sensitive): it pins the
    # message to the cause, so that `gpulab exercises check` catches a test failing for the wrong reason.
    feedback: Text = ""


PARAM_NAME = r"^[a-z][a-z0-9_]{0,31}$"
MAX_PARAMS = 8
MAX_METRIC = 120  # runner.measure.MAX_NAME: a measurement name is kept to this many characters
MAX_LABEL = 60
MAX_PARAM_VALUES = 1000
# A value of a choice: a number, or a short one-line word or phrase (it lands in prompts and Python files).
ChoiceText = Annotated[str, StringConstraints(min_length=1, max_length=80, pattern=r"^[^\n\r{}]*$")]
ChoiceValue = StrictInt | StrictFloat | ChoiceText


class ParamMeta(FormatModel):
    """A ``[params.NAME]`` table: the values a learner's variant may take, as ``choices`` or an integer ``range``."""

    choices: tuple[ChoiceValue, ...] | None = Field(default=None, min_length=1, max_length=100)
    range: tuple[StrictInt, StrictInt] | None = None  # [first, last], both included
    step: Annotated[int, Field(strict=True, ge=1)] = 1
    default: ChoiceValue | None = None  # the default variant's value; the first value unless given

    @model_validator(mode="after")
    def _one_source(self) -> ParamMeta:
        """Refuse both or neither of ``choices`` and ``range``, repeated choices, and a ``default`` not offered."""
        if (self.choices is None) == (self.range is None):
            raise ValueError("give either choices = [...] or range = [first, last], not both or neither")
        if self.choices is not None:
            if "step" in self.model_fields_set:
                raise ValueError("step goes with range, not with choices")
            kinds = {type(v) is str for v in self.choices}
            if len(kinds) > 1:
                raise ValueError("choices mixes numbers and text; give one kind")
            if len(set(self.choices)) != len(self.choices):
                raise ValueError(f"choices repeats a value ({list(self.choices)})")
        elif self.range is not None:
            first, last = self.range
            if last < first:
                raise ValueError(f"range must go up: [{first}, {last}]")
            if (last - first) // self.step + 1 > MAX_PARAM_VALUES:
                raise ValueError(f"range offers more than {MAX_PARAM_VALUES} values; use a larger step")
        if self.default is not None and self.default not in self.values():
            raise ValueError(f"default {self.default!r} is not one of the values")
        return self

    def values(self) -> tuple[int | float | str, ...]:
        """Return every value, in order: the choices, or ``first, first + step, ...`` up to ``last``."""
        if self.choices is not None:
            return self.choices
        assert self.range is not None  # _one_source
        return tuple(range(self.range[0], self.range[1] + 1, self.step))


class LeaderboardMeta(FormatModel):
    """``[leaderboard]``: opt in to a per-assignment board of one measurement the hidden tests record."""

    # As long as runner.measure keeps a measurement's name (MAX_NAME): a longer one could never match.
    metric: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_METRIC)]
    order: Order
    label: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_LABEL)] = ""

    def leaderboard(self) -> Leaderboard:
        """Return the table as the plain data the app reads."""
        return Leaderboard(metric=self.metric, order=self.order, label=self.label)


class ExerciseMeta(FormatModel):
    """``exercise.toml``: what the exercise is, where and how it is graded, and what its tests are worth."""

    title: Required
    kind: Kind = "code"
    topic: Required = "General"
    difficulty: Difficulty = "beginner"
    framework: Framework = "python"
    queue: Queue = "cpu"
    replicas: Annotated[int, Field(strict=True, ge=1, le=8)] = 1
    devices: DeviceMode = "auto"
    learner_process: LearnerProcess = "per-test"
    limits: LimitsMeta = LimitsMeta()
    points: dict[str, Annotated[float, Field(strict=True, gt=0, le=100)]] = {}  # test id -> weight; default 1
    default_visibility: Tier = "now"
    visibility: dict[str, Tier] = {}  # test id -> tier; default default_visibility
    wrong: tuple[WrongVariant, ...] = ()
    # Staff grading of a code submission on top of its tests: [[rubric]] items, and comments graders reuse.
    rubric: tuple[RubricItem, ...] = ()
    rubric_comments: tuple[Required, ...] = ()
    # [params.NAME]: the variant each learner gets (``ParamMeta``); names are keys of the prompt's placeholders.
    params: dict[Annotated[str, StringConstraints(pattern=PARAM_NAME)], ParamMeta] = Field(
        default={}, max_length=MAX_PARAMS
    )
    leaderboard: LeaderboardMeta | None = None

    @field_validator("rubric")
    @classmethod
    def _rubric_ids_once(cls, rubric: tuple[RubricItem, ...]) -> tuple[RubricItem, ...]:
        """Refuse two rubric items with one id."""
        ids = [r.id for r in rubric]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"uses the item id {twice[0]!r} twice; rubric item ids are unique")
        return rubric

    @field_validator("wrong")
    @classmethod
    def _one_entry_per_file(cls, wrong: tuple[WrongVariant, ...]) -> tuple[WrongVariant, ...]:
        """Refuse two ``[[wrong]]`` tables for one file."""
        paths = [v.path for v in wrong]
        twice = sorted({p for p in paths if paths.count(p) > 1})
        if twice:
            raise ValueError(f"declares {', '.join(map(repr, twice))} more than once; one [[wrong]] table per file")
        return wrong

    @model_validator(mode="after")
    def _tests_only_for_code(self) -> ExerciseMeta:
        """Refuse ``[points]``, ``[[wrong]]`` and visibility tiers on a quiz: it has no hidden tests."""
        if self.kind != "quiz":
            return self
        misplaced = sorted(
            {"points", "wrong", "rubric", "rubric_comments", "params", "leaderboard"} & self.model_fields_set
        )
        if misplaced:
            raise ValueError(f"a quiz takes no {' or '.join(misplaced)}: its questions in quiz.toml carry the points")
        tiers = sorted({"default_visibility", "visibility"} & self.model_fields_set)
        if tiers:
            # A quiz attempt shows each answered question's explanation at once (app.domain.submissions.quiz).
            raise ValueError(f"a quiz takes no {' or '.join(tiers)}: its results show as soon as it is answered")
        return self

    def visibility_rule(self) -> Visibility:
        """Return the tiers ``[visibility]`` and ``default_visibility`` declare."""
        return Visibility(default=self.default_visibility, tiers=dict(self.visibility))


class ExerciseSpec(ExerciseData):
    """An exercise version read from its folder's files and checked against the format (``from_files``)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExerciseSpec:
        return cls.from_files(data["slug"], data["files"])

    @classmethod
    def from_files(cls, slug: str, files: dict[str, str]) -> ExerciseSpec:
        """Build a spec from a folder's text files; raise ``ExerciseFormatError`` on any problem."""
        if not SLUG_RE.match(slug):
            raise ExerciseFormatError(slug, "slug must be 3-64 characters of a-z, 0-9 and '-'")
        if "exercise.toml" not in files:
            raise ExerciseFormatError(slug, "exercise.toml is missing")
        return _build(slug, read_meta(slug, files["exercise.toml"]), files)


def read_meta(slug: str, text: str) -> ExerciseMeta:
    """Read ``exercise.toml`` alone (no check against the folder's other files); raise ``ExerciseFormatError``."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExerciseFormatError(slug, f"exercise.toml is not valid TOML: {exc}") from exc
    try:
        return ExerciseMeta.model_validate(raw)
    except ValidationError as exc:
        raise ExerciseFormatError(slug, readable_problem("exercise.toml", exc)) from exc


def _build(slug: str, meta: ExerciseMeta, files: dict[str, str]) -> ExerciseSpec:
    if "prompt.md" not in files:
        raise ExerciseFormatError(slug, "prompt.md is missing")
    spec = ExerciseSpec(
        slug=slug,
        title=meta.title,
        kind=meta.kind,
        topic=meta.topic,
        difficulty=meta.difficulty,
        framework=meta.framework,
        queue=meta.queue,
        limits=meta.limits.limits(),
        files=dict(files),
        replicas=meta.replicas,
        devices=meta.devices,
        learner_process=meta.learner_process,
        test_visibility=meta.visibility_rule(),
        rubric=meta.rubric,
        rubric_comments=meta.rubric_comments,
        params=params_of({name: table.model_dump(exclude_none=True) for name, table in meta.params.items()}),
        leaderboard=meta.leaderboard.leaderboard() if meta.leaderboard is not None else None,
    )
    if meta.kind == "code":
        for required in ("starter.py", "solution.py"):
            if required not in files:
                raise ExerciseFormatError(slug, f"{required} is missing")
        ids = discover_test_ids(slug, spec.hidden_test_files)
        if not ids:
            raise ExerciseFormatError(slug, "tests/ holds no test functions")
        _check_references(slug, meta, files, set(ids))
        _check_leaderboard(slug, meta, spec.hidden_test_files)
        spec.tests = [ExpectedTest(id=i, points=meta.points.get(i, 1.0)) for i in ids]
        spec.wrong = [WrongFile(v.path, v.must_fail, v.why, v.feedback) for v in meta.wrong]
    else:
        # Quizzes are graded in the app, without a sandbox; each question counts as one "test" for the score.
        if "quiz.toml" not in files:
            raise ExerciseFormatError(slug, "quiz.toml is missing")
        quiz = parse_quiz(slug, files["quiz.toml"])
        spec.tests = [ExpectedTest(id=q.id, points=q.points) for q in quiz.questions]
    return spec


def _check_references(slug: str, meta: ExerciseMeta, files: dict[str, str], ids: set[str]) -> None:
    """Check what ``exercise.toml`` names against the folder: tests that exist, ``wrong/`` files declared."""
    for table in ("points", "visibility"):
        unknown = sorted(set(getattr(meta, table)) - ids)
        if unknown:
            raise ExerciseFormatError(slug, f"exercise.toml: {table} names unknown tests: {', '.join(unknown)}")
    for index, variant in enumerate(meta.wrong):
        if variant.path not in files:
            raise ExerciseFormatError(slug, f"exercise.toml: wrong[{index}].file {variant.path!r} does not exist")
        bad = sorted(set(variant.must_fail) - ids)
        if bad:
            raise ExerciseFormatError(
                slug, f"exercise.toml: wrong[{index}].must_fail names unknown tests: {', '.join(bad)}"
            )
    undeclared = {p for p in files if p.startswith("wrong/") and p.endswith(".py")} - {v.path for v in meta.wrong}
    if undeclared:
        raise ExerciseFormatError(slug, f"wrong/ files without a [[wrong]] entry: {', '.join(sorted(undeclared))}")
    for path in sorted(p for p in files if RENDERED_FILES.match(p)):
        unknown = sorted({m.group(1) for m in PLACEHOLDER_RE.finditer(files[path])} - set(meta.params))
        if unknown:
            declared = ", ".join(sorted(meta.params)) or "none"
            raise ExerciseFormatError(
                slug,
                f"{path} uses {{{{ params.{unknown[0]} }}}} but exercise.toml declares no [params.{unknown[0]}] "
                f"(declared: {declared})",
            )


def recorded_names(test_files: dict[str, str]) -> set[str]:
    """Return the measurement names the test files record literally: ``x.record("name", ...)``/``x.grade(...)``."""
    names: set[str] = set()
    for text in test_files.values():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # discover_test_ids names the file at fault
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("record", "grade")
                and node.args
            ):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value.strip()[:MAX_METRIC])
    return names


def _check_leaderboard(slug: str, meta: ExerciseMeta, test_files: dict[str, str]) -> None:
    """Refuse a ``[leaderboard]`` metric that no hidden test records by that literal name."""
    if meta.leaderboard is None:
        return
    recorded = recorded_names(test_files)
    if meta.leaderboard.metric not in recorded:
        known = ", ".join(repr(n) for n in sorted(recorded)) or "none"
        raise ExerciseFormatError(
            slug,
            f"exercise.toml: leaderboard.metric {meta.leaderboard.metric!r} is not a measurement the hidden tests "
            f"record by that name (measure.record/measure.grade with a literal name; recorded: {known})",
        )


def load_exercise(folder: Path) -> ExerciseSpec:
    """Load one exercise folder."""
    return ExerciseSpec.from_files(folder.name, read_exercise_files(folder))


def load_bank(root: Path) -> list[ExerciseSpec]:
    """Load every exercise folder below ``root`` (folders holding an ``exercise.toml``), sorted by slug."""
    return [load_exercise(p.parent) for p in sorted(root.glob("*/exercise.toml"))]
