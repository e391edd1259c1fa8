"""Turn an uploaded ``.zip`` or the browser editor's fields into exercise files, drafts, and published versions.

Contract:
- Reading an uploaded zip is ``worker.bank.folders.read_zip`` (the bank layer owns the folder format).
- ``files_from_form(form, base)`` builds ``exercise.toml`` (``worker.bank.folders.dump_exercise_toml``) and the
  files from the editor's fields; files of ``base`` (an earlier version) that the editor does not show are
  carried over unchanged, and so are the keys of its ``exercise.toml`` the editor does not set.
- ``add_draft`` validates with ``ExerciseSpec.from_files`` *before* writing anything, then stores a new
  version that learners do not get (``Exercise.current_version`` does not move). Identical content returns the
  existing version. ``publish`` moves ``current_version`` (a non-bank version needs a passed check first);
  ``unpublish`` hides the exercise. None of these commit.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.exercises.bank import add_version
from app.domain.results import settle
from app.domain.models import Exercise, ExerciseCheck, ExerciseVersion, User
from worker.bank.folders import dump_exercise_toml
from worker.bank.spec import SLUG_RE, ExerciseSpec, discover_test_ids
from worker.core.errors import Conflict, GpulabError, InvalidInput

SOURCES = ("bank", "upload", "editor")


# --- the browser editor --------------------------------------------------------------------------------------


@dataclass
class WrongForm:
    name: str
    code: str
    must_fail: list[str]
    why: str = ""
    feedback: str = ""  # text the failure message of one of its must_fail tests must contain


@dataclass
class AuthoringForm:
    """The editor's fields; ``test_file`` is the hidden test file's name below ``tests/``."""

    slug: str
    title: str
    topic: str = "General"
    difficulty: str = "beginner"
    framework: str = "python"
    queue: str = "cpu"
    timeout_s: float = 30.0
    memory_mb: int = 1024
    prompt_md: str = ""
    starter: str = ""
    solution: str = ""
    test_file: str = "test_exercise.py"
    tests: str = ""
    wrong: list[WrongForm] = field(default_factory=list)
    rubric: str = ""  # one item per line: "points | id | text"
    rubric_comments: str = ""  # one reusable comment per line


RUBRIC_LINE_HINT = "write each rubric item as `points | id | text`, e.g. `1 | clear-names | Names say what they hold.`"


def rubric_from_text(text: str) -> list[dict[str, Any]]:
    """Read the editor's rubric lines (``points | id | text``) into ``[[rubric]]`` tables (the format checks them)."""
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split("|", 2)]
        if len(parts) != 3:
            raise InvalidInput(f"rubric line {number}: {RUBRIC_LINE_HINT}")
        try:
            points = float(parts[0])
        except ValueError:
            raise InvalidInput(f"rubric line {number}: {parts[0]!r} is not a number; {RUBRIC_LINE_HINT}") from None
        items.append({"id": parts[1], "points": points, "text": parts[2]})
    return items


def rubric_to_text(items: list[dict[str, Any]]) -> str:
    """Write ``[[rubric]]`` tables as the editor's lines."""
    return "\n".join(f"{float(i.get('points', 0)):g} | {i.get('id', '')} | {i.get('text', '')}" for i in items)


def _safe_name(name: str, what: str) -> str:
    name = name.strip()
    if not name or "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".py"):
        raise InvalidInput(f"{what} {name!r} must be a plain file name ending in .py")
    return name


def files_from_form(form: AuthoringForm, base: dict[str, str] | None = None) -> dict[str, str]:
    """Return the exercise files the editor describes, on top of ``base``'s files it does not show."""
    test_file = _safe_name(form.test_file, "test file")
    base = dict(base or {})
    meta: dict[str, Any] = {}
    if "exercise.toml" in base:
        try:
            meta = tomllib.loads(base["exercise.toml"])
        except tomllib.TOMLDecodeError:
            meta = {}
    files = {p: c for p, c in base.items() if not (p.startswith("wrong/") and p.endswith(".py"))}
    limits = dict(meta.get("limits", {}))
    limits.update(timeout_s=float(form.timeout_s), memory_mb=int(form.memory_mb))
    meta.update(
        title=form.title.strip(),
        kind="code",
        topic=form.topic.strip() or "General",
        difficulty=form.difficulty,
        framework=form.framework,
        queue=form.queue,
        limits=limits,
    )
    wrong = []
    for variant in form.wrong:
        if not variant.name.strip() and not variant.code.strip():
            continue  # an empty, unused fieldset
        path = "wrong/" + _safe_name(variant.name, "wrong variant")
        files[path] = variant.code
        entry: dict[str, Any] = {"file": path, "must_fail": [m.strip() for m in variant.must_fail if m.strip()]}
        if variant.why.strip():
            entry["why"] = variant.why.strip()
        if variant.feedback.strip():
            entry["feedback"] = variant.feedback.strip()
        wrong.append(entry)
    meta.pop("wrong", None)
    for key in ("rubric", "rubric_comments"):  # written again below, after the other keys
        meta.pop(key, None)
    rubric = rubric_from_text(form.rubric)
    comments = [c.strip() for c in form.rubric_comments.splitlines() if c.strip()]
    if comments:
        meta["rubric_comments"] = comments
    points = meta.pop("points", None)
    files.update({"prompt.md": form.prompt_md, "starter.py": form.starter, "solution.py": form.solution})
    files[f"tests/{test_file}"] = form.tests
    if isinstance(points, dict) and points:
        # Keep the weights of tests that still exist; a broken test file is reported by validation later.
        hidden = {p[len("tests/") :]: c for p, c in files.items() if p.startswith("tests/")}
        try:
            ids = set(discover_test_ids(form.slug, hidden))
        except GpulabError:
            ids = set()
        kept = {k: v for k, v in points.items() if k in ids}
        if kept:
            meta["points"] = kept
    if wrong:
        meta["wrong"] = wrong
    if rubric:
        meta["rubric"] = rubric
    files["exercise.toml"] = dump_exercise_toml(meta)
    return {p: c.replace("\r\n", "\n") for p, c in sorted(files.items())}


def form_from_version(version: ExerciseVersion) -> AuthoringForm:
    """Return the editor's fields filled from a stored version (the first hidden test file is editable)."""
    files: dict[str, str] = dict(version.files)
    meta = tomllib.loads(files.get("exercise.toml", ""))
    limits = meta.get("limits", {})
    tests = sorted(p for p in files if p.startswith("tests/") and PurePosixPath(p).name.startswith("test_"))
    test_path = tests[0] if tests else "tests/test_exercise.py"
    wrong = [
        WrongForm(
            name=e["file"].removeprefix("wrong/"),
            code=files.get(e["file"], ""),
            must_fail=list(e.get("must_fail", [])),
            why=str(e.get("why", "")),
            feedback=str(e.get("feedback", "")),
        )
        for e in meta.get("wrong", [])
    ]
    return AuthoringForm(
        slug=version.exercise.slug,
        title=version.title,
        topic=version.topic,
        difficulty=version.difficulty,
        framework=version.framework,
        queue=version.queue,
        timeout_s=float(limits.get("timeout_s", 30.0)),
        memory_mb=int(limits.get("memory_mb", 1024)),
        prompt_md=files.get("prompt.md", ""),
        starter=files.get("starter.py", ""),
        solution=files.get("solution.py", ""),
        test_file=test_path.removeprefix("tests/"),
        tests=files.get(test_path, ""),
        wrong=wrong,
        rubric=rubric_to_text(list(meta.get("rubric", []))),
        rubric_comments="\n".join(str(c) for c in meta.get("rubric_comments", [])),
    )


def carried_over(files: dict[str, str]) -> list[str]:
    """List the files of a version the editor does not show (kept as they are in a new draft)."""
    shown = {"exercise.toml", "prompt.md", "starter.py", "solution.py"}
    tests = sorted(p for p in files if p.startswith("tests/") and PurePosixPath(p).name.startswith("test_"))
    if tests:
        shown.add(tests[0])
    return sorted(p for p in files if p not in shown and not (p.startswith("wrong/") and p.endswith(".py")))


# --- drafts, publishing -------------------------------------------------------------------------------------


def validate(slug: str, files: dict[str, str]) -> ExerciseSpec:
    """Return the spec of ``files`` or raise ``ExerciseFormatError`` saying what is wrong."""
    slug = slug.strip()
    if not SLUG_RE.match(slug):
        raise InvalidInput(f"slug {slug!r} must be 3-64 characters of a-z, 0-9 and '-', not starting with '-'")
    return ExerciseSpec.from_files(slug, files)


def add_draft(*, session: Session, spec: ExerciseSpec, source: str, user: User | None) -> tuple[ExerciseVersion, bool]:
    """Store ``spec`` as a new unpublished version; return it and whether it is new (same content: the old one)."""
    if source not in SOURCES:
        raise InvalidInput(f"unknown source {source!r}")
    exercise = session.scalar(select(Exercise).where(Exercise.slug == spec.slug))
    if exercise is None:
        exercise = Exercise(slug=spec.slug, is_published=False)
        session.add(exercise)
        session.flush()
    same = session.scalar(
        select(ExerciseVersion).where(
            ExerciseVersion.exercise_id == exercise.id, ExerciseVersion.content_hash == spec.content_hash
        )
    )
    if same is not None:
        return same, False
    version = add_version(session=session, exercise=exercise, spec=spec, source=source, created_by=user)
    return version, True


def latest_check(*, session: Session, version: ExerciseVersion) -> ExerciseCheck | None:
    stmt = (
        select(ExerciseCheck)
        .where(ExerciseCheck.exercise_version_id == version.id)
        .order_by(ExerciseCheck.id.desc())
        .limit(1)
    )
    return session.scalar(stmt)


def publish(*, session: Session, exercise: Exercise, version: ExerciseVersion) -> None:
    """Make ``version`` what learners get; a version not from the bank must have passed its check."""
    if version.exercise_id != exercise.id:
        raise InvalidInput("that version belongs to another exercise")
    if version.source != "bank" and version.kind == "code":
        check = latest_check(session=session, version=version)
        if check is None or check.status != "passed":
            raise Conflict(f"version {version.number} has no passed check yet; run the check first")
    exercise.current_version = version
    exercise.is_published = True
    settle.version_changed(session=session, exercise=exercise, version=version)  # refuses dropping graded rubric items


def unpublish(*, exercise: Exercise) -> None:
    """Hide the exercise from learners; its versions and submissions stay."""
    exercise.is_published = False


def version_state(exercise: Exercise, version: ExerciseVersion) -> str:
    """Say what learners see of ``version``: ``live``, ``current, hidden`` or ``draft``."""
    if exercise.current_version_id != version.id:
        return "draft"
    return "live" if exercise.is_published else "hidden"


def get_version(*, session: Session, exercise: Exercise, number: int) -> ExerciseVersion | None:
    stmt = select(ExerciseVersion).where(ExerciseVersion.exercise_id == exercise.id, ExerciseVersion.number == number)
    return session.scalar(stmt)
