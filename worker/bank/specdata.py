"""An exercise as plain data: what grading reads of it, importable with the standard library alone.

Contract:
- ``ExerciseData`` holds one exercise version (its files, expected tests, limits, devices, wrong variants) and
  answers what the grading pipeline asks of it; ``worker.bank.spec.ExerciseSpec`` is the same data, read and
  checked from a folder (``ExerciseSpec.from_files``), and the only way the app and workers build one.
- Nothing here imports pydantic or anything else outside the standard library, so the grading pipeline
  (``worker.grading.pipeline`` and the ``unsafe`` backend) runs on a Python that has only a framework and
  pytest: ``scripts/gpu-check`` on a bare GPU machine (``docs/gpu.md``). ``spec.py`` keeps every check of the
  format; this module keeps the shapes, their defaults and the reading of test ids and folder files.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, get_args

from worker.core.errors import ExerciseFormatError

if TYPE_CHECKING:
    from worker.bank.rubric import RubricItem

Kind = Literal["code", "quiz"]
Queue = Literal["cpu", "gpu"]
Framework = Literal["python", "torch", "tensorflow"]
Difficulty = Literal["beginner", "intermediate", "advanced"]
# "auto": the framework's virtual devices on CPU workers (virtual CUDA for torch, logical CPUs for TensorFlow);
# "processes": one real process per replica, no virtual devices: DDP ranks over gloo (runner.vdev.ddp), or
# TensorFlow workers forming a MultiWorkerMirroredStrategy cluster over gRPC on loopback (runner.vdev.tf_workers).
DeviceMode = Literal["auto", "processes"]
# "per-test": each test gets a fresh learner process (nothing leaks between tests); "per-file": the tests of one
# file share it (the learner's module is imported once per file), for exercises whose set-up dominates.
LearnerProcess = Literal["per-test", "per-file"]
# When a learner may see a hidden test's outcome and message: at once, once their deadline passed, or never
# (its name and worth only). Who decides from it is app.domain.courses.visibility.
Tier = Literal["now", "after_due", "never"]
# Which way a leaderboard ranks its metric: the smallest value first, or the largest.
Order = Literal["lower", "higher"]

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$")
KINDS: tuple[str, ...] = get_args(Kind)
QUEUES: tuple[str, ...] = get_args(Queue)
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
DIFFICULTIES: tuple[str, ...] = get_args(Difficulty)
DEVICE_MODES: tuple[str, ...] = get_args(DeviceMode)
LEARNER_PROCESS_MODES: tuple[str, ...] = get_args(LearnerProcess)
TIERS: tuple[str, ...] = get_args(Tier)
ORDERS: tuple[str, ...] = get_args(Order)
MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 200
PRELOADS: dict[str, tuple[str, ...]] = {"python": (), "torch": ("torch",), "tensorflow": ("tensorflow",)}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".csv", ".cfg"}
# A parameter's value: what ``[params.NAME]`` may offer (never a bool: TOML's true is not a number here).
ParamValue = int | float | str
# ``{{ params.NAME }}`` in a file the learner or ``exercises check`` reads; nothing else between the braces.
PLACEHOLDER_RE = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# What a variant renders: the prompt, the starter and every file graded as a learner's answer. Hidden tests,
# examples and probes read the values from the ``params`` fixture instead (they stay plain Python).
RENDERED_FILES = re.compile(r"^(prompt\.md|starter\.py|solution\.py|(right|wrong)/.+\.py)$")


@dataclass(frozen=True)
class Limits:
    """Sandbox limits of one grading run, with their defaults; ``spec.LimitsMeta`` holds what an author may ask.

    A plain dataclass: the sandboxes derive the judge's limits from it (``dataclasses.replace``), and those may
    go past what an author may ask for.
    """

    timeout_s: float = 30.0
    memory_mb: int = 1024
    pids: int = 64
    cpus: float = 1.0
    output_bytes: int = 64 * 1024
    tmpfs_mb: int = 64
    file_size_mb: int = 16


@dataclass(frozen=True)
class WrongFile:
    """A known-wrong variant: its file in the exercise folder, the hidden tests it must fail, and why."""

    path: str
    must_fail: tuple[str, ...]
    why: str = ""
    feedback: str = ""  # text one of its must_fail tests' failure messages must contain


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


@dataclass(frozen=True)
class Leaderboard:
    """``[leaderboard]``: the one measurement an assignment's board ranks its learners by, and which way."""

    metric: str  # a measurement's name exactly as the hidden tests record it (runner.measure)
    order: Order = "lower"
    label: str = ""  # what the board's column is called; the metric's name when empty

    @property
    def heading(self) -> str:
        """Return the column's heading: the label, or the metric's name."""
        return self.label or self.metric

    def better(self, a: float, b: float) -> bool:
        """Say whether ``a`` ranks strictly above ``b``."""
        return a < b if self.order == "lower" else a > b


@dataclass(frozen=True)
class Param:
    """One ``[params.NAME]``: the values a variant may take, in order, and the one the default variant uses."""

    name: str
    values: tuple[ParamValue, ...]
    default: ParamValue

    def pick(self, seed: bytes) -> ParamValue:
        """Return the value ``seed`` draws: an HMAC of the name under the seed, so each parameter draws apart."""
        digest = hmac.new(seed, self.name.encode(), hashlib.sha256).digest()
        return self.values[int.from_bytes(digest[:8], "big") % len(self.values)]


def params_of(tables: dict[str, Any]) -> tuple[Param, ...]:
    """Return ``exercise.toml``'s ``[params.NAME]`` tables as ``Param``s, sorted by name, without checking them.

    ``spec.ParamMeta`` checks the tables where the bank is authored and builds its ``Param``s here too, so a
    reader without pydantic (``worker.grading.gpucheck``) draws the same values.
    """
    found = []
    for name, table in sorted(tables.items()):
        if "choices" in table:
            values = tuple(table["choices"])
        else:
            first, last = table["range"]
            values = tuple(range(first, last + 1, table.get("step", 1)))
        found.append(Param(name, values, table.get("default", values[0])))
    return tuple(found)


def render_value(value: ParamValue) -> str:
    """Return how a value reads in a file: ints and strings as they are, floats in their shortest exact form."""
    return repr(value) if isinstance(value, float) else str(value)


def render_params(text: str, params: dict[str, ParamValue]) -> str:
    """Replace every ``{{ params.NAME }}`` by its value; a name ``params`` lacks stays as written.

    By hand, not Jinja: authors' files are Markdown and Python full of braces, and a variant needs nothing but
    named values put in place; no expression, filter or attribute of an author's text is ever evaluated.
    """

    def put(match: re.Match[str]) -> str:
        name = match.group(1)
        return render_value(params[name]) if name in params else match.group(0)

    return PLACEHOLDER_RE.sub(put, text)


@dataclass
class ExerciseData:
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
    wrong: list[WrongFile] = field(default_factory=list)
    replicas: int = 1
    devices: DeviceMode = "auto"
    learner_process: LearnerProcess = "per-test"
    test_visibility: Visibility = field(default_factory=Visibility)
    rubric: tuple[RubricItem, ...] = ()
    rubric_comments: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()  # [params.NAME]: what a learner's variant is drawn from; () for one variant
    leaderboard: Leaderboard | None = None  # [leaderboard]: the opt-in board of one measurement; None: no board

    @property
    def default_params(self) -> dict[str, ParamValue]:
        """Return the default variant: every parameter at its ``default`` (``{}`` without parameters)."""
        return {p.name: p.default for p in self.params}

    def draw_params(self, seed: bytes) -> dict[str, ParamValue]:
        """Return the variant ``seed`` draws (the same seed, the same variant, as long as the values stay)."""
        return {p.name: p.pick(seed) for p in self.params}

    def check_params(self, count: int = 3) -> list[dict[str, ParamValue]]:
        """Return the variants ``exercises check`` grades: the default and drawn ones, or all when few, no twice.

        The draws use fixed seeds, so a check is repeatable; ``[{}]`` for an exercise without parameters.
        """
        every: list[dict[str, ParamValue]] = [{}]
        for param in self.params:
            every = [{**v, param.name: value} for v in every for value in param.values]
            if len(every) > count:
                break
        if len(every) <= count:
            return sorted(every, key=lambda v: v != self.default_params)
        found = [self.default_params]
        for i in range(1, 64):
            drawn = self.draw_params(f"gpulab exercises check {i}".encode())
            if drawn not in found:
                found.append(drawn)
            if len(found) == count:
                break
        return found

    def rendered(self, path: str, params: dict[str, ParamValue]) -> str:
        """Return the file at ``path`` as the learner of variant ``params`` reads it (placeholders filled in)."""
        text = self.files[path]
        return render_params(text, params) if RENDERED_FILES.match(path) else text

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
        """Return the form stored in the database; ``ExerciseSpec.from_files`` rebuilds it from ``files`` alone."""
        return {"slug": self.slug, "files": self.files}


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
