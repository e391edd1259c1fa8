"""Read one exercise folder into an ``ExerciseSpec``: the single description grading and the app share.

Contract (the format is documented for authors in ``exercises/README.md``):
- A folder holds ``exercise.toml``, ``prompt.md``, ``starter.py``, ``solution.py``, ``tests/`` (hidden),
  and optionally ``examples/`` (visible tests), ``wrong/`` (known-wrong variants) and ``right/``
  (alternative correct solutions). Quiz exercises hold ``quiz.toml`` instead of code files.
- ``ExerciseSpec.files`` keeps every text file of the folder by relative POSIX path, so a version stored in
  the database can be graded exactly as it was synced, long after the folder changed.
- Expected test ids (``tests/test_x.py::test_name`` minus the ``tests/`` prefix) are found by reading the
  test files' syntax tree on the host: they are known before anything runs, so a test that never reports
  is counted as failed, never as missing.
"""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from worker.bank.quiz import parse_quiz
from worker.core.errors import ExerciseFormatError

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$")
KINDS = ("code", "quiz")
QUEUES = ("cpu", "gpu")
FRAMEWORKS = ("python", "torch", "tensorflow")
DIFFICULTIES = ("beginner", "intermediate", "advanced")
MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 200
# "auto": the framework's virtual devices on CPU workers (virtual CUDA for torch, logical CPUs for TensorFlow);
# "processes": one real process per replica (DistributedDataParallel over gloo), no virtual CUDA.
DEVICE_MODES = ("auto", "processes")
# "per-test": each test gets a fresh learner process (nothing leaks between tests); "per-file": the tests of one
# file share it (the learner's module is imported once per file), for exercises whose set-up dominates.
LEARNER_PROCESS_MODES = ("per-test", "per-file")
PRELOADS: dict[str, tuple[str, ...]] = {"python": (), "torch": ("torch",), "tensorflow": ("tensorflow",)}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".csv", ".cfg"}


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 30.0
    memory_mb: int = 1024
    pids: int = 64
    cpus: float = 1.0
    output_bytes: int = 64 * 1024
    tmpfs_mb: int = 64
    file_size_mb: int = 16


@dataclass(frozen=True)
class WrongVariant:
    path: str
    must_fail: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class ExpectedTest:
    id: str
    points: float


@dataclass
class ExerciseSpec:
    slug: str
    title: str
    kind: str
    topic: str
    difficulty: str
    framework: str
    queue: str
    limits: Limits
    files: dict[str, str] = field(default_factory=dict)
    tests: list[ExpectedTest] = field(default_factory=list)
    wrong: list[WrongVariant] = field(default_factory=list)
    replicas: int = 1
    devices: str = "auto"
    learner_process: str = "per-test"

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
        try:
            meta = tomllib.loads(files["exercise.toml"])
        except tomllib.TOMLDecodeError as exc:
            raise ExerciseFormatError(slug, f"exercise.toml is not valid TOML: {exc}") from exc
        return _build(slug, meta, files)


def _choice(slug: str, meta: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = meta.get(key, default)
    if value not in allowed:
        raise ExerciseFormatError(slug, f"{key} must be one of {', '.join(allowed)} (got {value!r})")
    return str(value)


def _replicas(slug: str, meta: dict[str, Any]) -> int:
    value = meta.get("replicas", 1)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 8:
        raise ExerciseFormatError(slug, f"replicas must be a whole number from 1 to 8 (got {value!r})")
    return value


def _build(slug: str, meta: dict[str, Any], files: dict[str, str]) -> ExerciseSpec:
    title = meta.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ExerciseFormatError(slug, "exercise.toml needs a non-empty title")
    kind = _choice(slug, meta, "kind", KINDS, "code")
    limits_raw = meta.get("limits", {})
    try:
        limits = Limits(**limits_raw)
    except TypeError as exc:
        raise ExerciseFormatError(slug, f"[limits] has an unknown key: {exc}") from exc
    if not 1 <= limits.timeout_s <= 600 or not 64 <= limits.memory_mb <= 65536:
        raise ExerciseFormatError(slug, "limits out of range (timeout_s 1..600, memory_mb 64..65536)")
    spec = ExerciseSpec(
        slug=slug,
        title=title.strip(),
        kind=kind,
        topic=str(meta.get("topic", "General")),
        difficulty=_choice(slug, meta, "difficulty", DIFFICULTIES, "beginner"),
        framework=_choice(slug, meta, "framework", FRAMEWORKS, "python"),
        queue=_choice(slug, meta, "queue", QUEUES, "cpu"),
        limits=limits,
        files=dict(files),
        replicas=_replicas(slug, meta),
        devices=_choice(slug, meta, "devices", DEVICE_MODES, "auto"),
        learner_process=_choice(slug, meta, "learner_process", LEARNER_PROCESS_MODES, "per-test"),
    )
    if "prompt.md" not in files:
        raise ExerciseFormatError(slug, "prompt.md is missing")
    if kind == "code":
        for required in ("starter.py", "solution.py"):
            if required not in files:
                raise ExerciseFormatError(slug, f"{required} is missing")
        points = meta.get("points", {})
        if not isinstance(points, dict):
            raise ExerciseFormatError(slug, "[points] must map test ids to numbers")
        ids = discover_test_ids(slug, spec.hidden_test_files)
        if not ids:
            raise ExerciseFormatError(slug, "tests/ holds no test functions")
        unknown = set(points) - set(ids)
        if unknown:
            raise ExerciseFormatError(slug, f"[points] names unknown tests: {', '.join(sorted(unknown))}")
        spec.tests = [ExpectedTest(id=i, points=float(points.get(i, 1))) for i in ids]
        spec.wrong = _wrong_variants(slug, meta, files, set(ids))
    elif kind == "quiz":
        # Quizzes are graded in the app, without a sandbox; each question counts as one "test" for the score.
        if "quiz.toml" not in files:
            raise ExerciseFormatError(slug, "quiz.toml is missing")
        quiz = parse_quiz(slug, files["quiz.toml"])
        spec.tests = [ExpectedTest(id=q.id, points=q.points) for q in quiz.questions]
    return spec


def _wrong_variants(slug: str, meta: dict[str, Any], files: dict[str, str], ids: set[str]) -> list[WrongVariant]:
    variants = []
    declared = meta.get("wrong", [])
    if not isinstance(declared, list):
        raise ExerciseFormatError(slug, "[[wrong]] must be an array of tables")
    for entry in declared:
        path = entry.get("file", "")
        if path not in files:
            raise ExerciseFormatError(slug, f"wrong variant {path!r} does not exist")
        must_fail = tuple(entry.get("must_fail", []))
        if not must_fail:
            raise ExerciseFormatError(slug, f"wrong variant {path!r} must name the tests it fails (must_fail)")
        bad = set(must_fail) - ids
        if bad:
            raise ExerciseFormatError(slug, f"wrong variant {path!r} names unknown tests: {', '.join(sorted(bad))}")
        variants.append(WrongVariant(path=path, must_fail=must_fail, why=str(entry.get("why", ""))))
    undeclared = {p for p in files if p.startswith("wrong/") and p.endswith(".py")} - {v.path for v in variants}
    if undeclared:
        raise ExerciseFormatError(slug, f"wrong/ files without a [[wrong]] entry: {', '.join(sorted(undeclared))}")
    return variants


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
