"""Read one exercise folder into an ``ExerciseSpec``: the single description grading and the app share.

Contract (the format is documented for authors in ``exercises/README.md``):
- A folder holds ``exercise.toml``, ``prompt.md``, ``starter.py``, ``solution.py``, ``tests/`` (hidden),
  and optionally ``examples/`` (visible tests), ``wrong/`` (known-wrong variants) and ``right/``
  (alternative correct solutions). Quiz exercises hold ``quiz.toml`` instead of code files.
- ``exercise.toml`` is the pydantic model ``ExerciseMeta`` (with ``Limits`` for ``[limits]`` and ``WrongVariant``
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
  only records them (``ExerciseSpec.visibility(test_id)``, ``Visibility.of``); ``app.domain.visibility``
  applies them. No ``[visibility]`` and no ``default_visibility`` is every test ``now``, as before tiers.
"""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from worker.bank.quiz import FormatModel, Required, RubricItem, Text, parse_quiz, readable_problem
from worker.core.errors import ExerciseFormatError

Kind = Literal["code", "quiz"]
Queue = Literal["cpu", "gpu"]
Framework = Literal["python", "torch", "tensorflow"]
Difficulty = Literal["beginner", "intermediate", "advanced"]
# "auto": the framework's virtual devices on CPU workers (virtual CUDA for torch, logical CPUs for TensorFlow);
# "processes": one real process per replica (DistributedDataParallel over gloo), no virtual CUDA.
DeviceMode = Literal["auto", "processes"]
# "per-test": each test gets a fresh learner process (nothing leaks between tests); "per-file": the tests of one
# file share it (the learner's module is imported once per file), for exercises whose set-up dominates.
LearnerProcess = Literal["per-test", "per-file"]
# When a learner may see a hidden test's outcome and message: at once, once their deadline passed, or never
# (its name and worth only). Who decides from it is app.domain.visibility.
Tier = Literal["now", "after_due", "never"]

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$")
KINDS: tuple[str, ...] = get_args(Kind)
QUEUES: tuple[str, ...] = get_args(Queue)
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
DIFFICULTIES: tuple[str, ...] = get_args(Difficulty)
DEVICE_MODES: tuple[str, ...] = get_args(DeviceMode)
LEARNER_PROCESS_MODES: tuple[str, ...] = get_args(LearnerProcess)
TIERS: tuple[str, ...] = get_args(Tier)
MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 200
PRELOADS: dict[str, tuple[str, ...]] = {"python": (), "torch": ("torch",), "tensorflow": ("tensorflow",)}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".csv", ".cfg"}


@dataclass(frozen=True)
class Limits:
    """Sandbox limits of one grading run: ``[limits]``, read by pydantic with the ranges below.

    A plain dataclass, not a model: the sandboxes derive the judge's limits from it (``dataclasses.replace``),
    and those may go past what an author may ask for.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")

    timeout_s: Annotated[float, Field(strict=True, ge=1, le=600)] = 30.0
    memory_mb: Annotated[int, Field(strict=True, ge=64, le=65536)] = 1024
    pids: Annotated[int, Field(strict=True, ge=1)] = 64
    cpus: Annotated[float, Field(strict=True, gt=0)] = 1.0
    output_bytes: Annotated[int, Field(strict=True, ge=1)] = 64 * 1024
    tmpfs_mb: Annotated[int, Field(strict=True, ge=1)] = 64
    file_size_mb: Annotated[int, Field(strict=True, ge=1)] = 16


class WrongVariant(FormatModel):
    """A ``[[wrong]]`` table: a known-wrong file, the hidden tests it must fail and what their message must say."""

    path: str = Field(validation_alias="file", min_length=1)  # inside the exercise folder
    must_fail: tuple[str, ...] = Field(min_length=1)
    why: Text = ""  # the mistake it stands for, in one sentence
    # Text the failure message of one of its must_fail tests must contain (exact, case-sensitive): it pins the
    # message to the cause, so that `gpulab exercises check` catches a test failing for the wrong reason.
    feedback: Text = ""


@dataclass(frozen=True)
class ExpectedTest:
    id: str
    points: float


@dataclass(frozen=True)
class Visibility:
    """The tier of every hidden test: the ones ``[visibility]`` names, ``default`` for the rest."""

    default: Tier = "now"
    tiers: dict[str, Tier] = field(default_factory=dict)

    def of(self, test_id: str) -> Tier:
        """Return the tier of ``test_id``."""
        return self.tiers.get(test_id, self.default)


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
    limits: Limits = Limits()
    points: dict[str, Annotated[float, Field(strict=True, gt=0, le=100)]] = {}  # test id -> weight; default 1
    default_visibility: Tier = "now"
    visibility: dict[str, Tier] = {}  # test id -> tier; default default_visibility
    wrong: tuple[WrongVariant, ...] = ()
    # Staff grading of a code submission on top of its tests: [[rubric]] items, and comments graders reuse.
    rubric: tuple[RubricItem, ...] = ()
    rubric_comments: tuple[Required, ...] = ()

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
        misplaced = sorted({"points", "wrong", "rubric", "rubric_comments"} & self.model_fields_set)
        if misplaced:
            raise ValueError(f"a quiz takes no {' or '.join(misplaced)}: its questions in quiz.toml carry the points")
        tiers = sorted({"default_visibility", "visibility"} & self.model_fields_set)
        if tiers:
            # A quiz attempt shows each answered question's explanation at once (app.domain.quiz).
            raise ValueError(f"a quiz takes no {' or '.join(tiers)}: its results show as soon as it is answered")
        return self

    def visibility_rule(self) -> Visibility:
        """Return the tiers ``[visibility]`` and ``default_visibility`` declare."""
        return Visibility(default=self.default_visibility, tiers=dict(self.visibility))


@dataclass
class ExerciseSpec:
    slug: str
    title: str
    kind: Kind
    topic: str
    difficulty: Difficulty
    framework: Framework
    queue: Queue
    limits: Limits
    files: dict[str, str] = field(default_factory=dict)
    tests: list[ExpectedTest] = field(default_factory=list)
    wrong: list[WrongVariant] = field(default_factory=list)
    replicas: int = 1
    devices: DeviceMode = "auto"
    learner_process: LearnerProcess = "per-test"
    test_visibility: Visibility = field(default_factory=Visibility)
    rubric: tuple[RubricItem, ...] = ()
    rubric_comments: tuple[str, ...] = ()

    @property
    def rubric_points(self) -> float:
        """Return what staff grading can add: the sum of the rubric's positive items (0 without a rubric)."""
        return float(sum(r.points for r in self.rubric if r.points > 0))

    def visibility(self, test_id: str) -> Tier:
        """Return when a learner may see ``test_id``'s outcome and message: "now", "after_due" or "never"."""
        return self.test_visibility.of(test_id)

    @property
    def prompt_md(self) -> str:
        return self.files.get("prompt.md", "")

    @property
    def starter(self) -> str:
        return self.files.get("starter.py", "")

    @property
    def solution(self) -> str:
        return self.files.get("solution.py", "")

    @property
    def max_score(self) -> float:
        return float(sum(t.points for t in self.tests))

    @property
    def hidden_test_files(self) -> dict[str, str]:
        """Return the hidden test files keyed by their path below ``tests/``."""
        return {p[len("tests/") :]: c for p, c in self.files.items() if p.startswith("tests/")}

    @property
    def probe_files(self) -> dict[str, str]:
        """Return the probe module(s) that run next to the learner's code, keyed by name below ``probes/``."""
        return {p: c for p, c in self.files.items() if p == "probes.py"}

    @property
    def vdev_framework(self) -> str:
        """Return which framework's virtual devices the subject prepares ("none" for one plain CPU)."""
        if self.replicas < 2 or self.devices == "processes" or self.framework == "python":
            return "none"
        return self.framework

    @property
    def preload(self) -> tuple[str, ...]:
        """Return the modules the subject imports once, before it forks a process per test."""
        return PRELOADS[self.framework]

    @property
    def example_test_files(self) -> dict[str, str]:
        return {p[len("examples/") :]: c for p, c in self.files.items() if p.startswith("examples/")}

    @property
    def right_solutions(self) -> dict[str, str]:
        return {p: c for p, c in self.files.items() if p.startswith("right/") and p.endswith(".py")}

    @property
    def content_hash(self) -> str:
        """Return a stable hash of everything that defines this version."""
        digest = hashlib.sha256()
        for path in sorted(self.files):
            digest.update(path.encode())
            digest.update(b"\0")
            digest.update(self.files[path].encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def to_json(self) -> dict[str, Any]:
        """Return the form stored in the database; ``from_files`` rebuilds the spec from ``files`` alone."""
        return {"slug": self.slug, "files": self.files}

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
        limits=meta.limits,
        files=dict(files),
        replicas=meta.replicas,
        devices=meta.devices,
        learner_process=meta.learner_process,
        test_visibility=meta.visibility_rule(),
        rubric=meta.rubric,
        rubric_comments=meta.rubric_comments,
    )
    if meta.kind == "code":
        for required in ("starter.py", "solution.py"):
            if required not in files:
                raise ExerciseFormatError(slug, f"{required} is missing")
        ids = discover_test_ids(slug, spec.hidden_test_files)
        if not ids:
            raise ExerciseFormatError(slug, "tests/ holds no test functions")
        _check_references(slug, meta, files, set(ids))
        spec.tests = [ExpectedTest(id=i, points=meta.points.get(i, 1.0)) for i in ids]
        spec.wrong = list(meta.wrong)
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


def discover_test_ids(slug: str, test_files: dict[str, str]) -> list[str]:
    """List ``file.py::test`` and ``file.py::Class::test`` ids by parsing (never importing) the test files."""
    ids: list[str] = []
    for path in sorted(test_files):
        name = PurePosixPath(path).name
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        try:
            tree = ast.parse(test_files[path], filename=path)
        except SyntaxError as exc:
            raise ExerciseFormatError(slug, f"tests/{path} has a syntax error: {exc}") from exc
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                ids.append(f"{path}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids.extend(
                    f"{path}::{node.name}::{item.name}"
                    for item in node.body
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test")
                )
    return ids


def read_exercise_files(folder: Path) -> dict[str, str]:
    """Read a folder's text files, refusing links, binaries and oversized or too many files."""
    files: dict[str, str] = {}
    root = folder.resolve()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_symlink():
            raise ExerciseFormatError(folder.name, f"{rel} is a symbolic link; links are not allowed")
        if path.is_dir():
            continue
        if path.suffix not in TEXT_SUFFIXES:
            raise ExerciseFormatError(folder.name, f"{rel} has an unsupported file type")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ExerciseFormatError(folder.name, f"{rel} is larger than {MAX_FILE_BYTES // 1024} KiB")
        try:
            files[rel.as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ExerciseFormatError(folder.name, f"{rel} is not UTF-8 text") from exc
        if len(files) > MAX_FILES:
            raise ExerciseFormatError(folder.name, f"more than {MAX_FILES} files")
    return files


def load_exercise(folder: Path) -> ExerciseSpec:
    """Load one exercise folder."""
    return ExerciseSpec.from_files(folder.name, read_exercise_files(folder))


def load_bank(root: Path) -> list[ExerciseSpec]:
    """Load every exercise folder below ``root`` (folders holding an ``exercise.toml``), sorted by slug."""
    return [load_exercise(p.parent) for p in sorted(root.glob("*/exercise.toml"))]
