"""Turn an uploaded ``.zip`` or the browser editor's fields into exercise files, drafts, and published versions.

Contract:
- ``read_zip(data)`` reads an exercise folder from zip bytes in memory (nothing is ever written to disk from
  the archive) and refuses, with one clear ``InvalidInput`` each: archives over ``MAX_ZIP_BYTES``, more than
  ``MAX_MEMBERS`` entries, more than ``MAX_UNCOMPRESSED_BYTES`` in all, a member that inflates more than
  ``MAX_RATIO`` times (zip bombs), absolute paths, ``..``, backslashes, symbolic links, device files, FIFOs,
  encrypted members, non-UTF-8 or unsupported files (the rules of ``worker.bank.spec.read_exercise_files``).
  One top-level folder around everything is unwrapped and gives the slug.
- ``files_from_form(form, base)`` builds ``exercise.toml`` and the files from the editor's fields; files of
  ``base`` (an earlier version) that the editor does not show are carried over unchanged.
- ``add_draft`` validates with ``ExerciseSpec.from_files`` *before* writing anything, then stores a new
  version that learners do not get (``Exercise.current_version`` does not move). Identical content returns the
  existing version. ``publish`` moves ``current_version`` (a non-bank version needs a passed check first);
  ``unpublish`` hides the exercise. None of these commit.
"""

from __future__ import annotations

import io
import json
import stat
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.exercises import add_version
from app.domain.models import Exercise, ExerciseCheck, ExerciseVersion, User
from app.domain.schemas import ExerciseDetail
from worker.bank.spec import MAX_FILE_BYTES, MAX_FILES, SLUG_RE, TEXT_SUFFIXES, ExerciseSpec, discover_test_ids
from worker.core.errors import Conflict, GpulabError, InvalidInput

MAX_ZIP_BYTES = 2 * 1024 * 1024
MAX_UNCOMPRESSED_BYTES = 8 * 1024 * 1024
MAX_MEMBERS = MAX_FILES + 100  # folders and ignored files count too, but not without bound
MAX_RATIO = 100  # text rarely compresses beyond 10:1; a bomb does far more
SOURCES = ("bank", "upload", "editor")


@dataclass
class ZipFolder:
    """An exercise folder read from a zip: its files and the slug its top-level folder suggests."""

    files: dict[str, str]
    slug_hint: str


def _ignored(parts: tuple[str, ...]) -> bool:
    return any(p.startswith(".") or p in ("__pycache__", "__MACOSX") for p in parts)


def _check_name(name: str) -> tuple[str, ...]:
    """Return the path parts of a member name, refusing anything that could leave the folder."""
    if "\\" in name or "\x00" in name:
        raise InvalidInput(f"{name!r}: backslashes and NUL are not allowed in paths")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise InvalidInput(f"{name!r}: absolute paths are not allowed")
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if ".." in parts:
        raise InvalidInput(f"{name!r}: '..' is not allowed in paths")
    return parts


def _check_kind(info: zipfile.ZipInfo) -> None:
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        raise InvalidInput(f"{info.filename!r} is a symbolic link; links are not allowed")
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise InvalidInput(f"{info.filename!r} is a device, FIFO or socket; only plain files are allowed")
    if info.flag_bits & 0x1:
        raise InvalidInput(f"{info.filename!r} is encrypted; upload a plain zip")


def read_zip(data: bytes) -> ZipFolder:
    """Read an exercise folder from zip bytes, in memory, refusing anything unsafe."""
    if len(data) > MAX_ZIP_BYTES:
        raise InvalidInput(f"the zip is larger than {MAX_ZIP_BYTES // (1024 * 1024)} MB")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise InvalidInput(f"not a valid zip archive ({exc})") from exc
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise InvalidInput(f"the zip holds {len(infos)} entries; at most {MAX_MEMBERS} are allowed")
        raw: dict[tuple[str, ...], bytes] = {}
        total = 0
        for info in infos:
            parts = _check_name(info.filename)
            _check_kind(info)
            if info.is_dir() or not parts or _ignored(parts):
                continue
            if info.file_size > MAX_FILE_BYTES:
                raise InvalidInput(f"{info.filename!r} is larger than {MAX_FILE_BYTES // 1024} KiB")
            if info.file_size > 4096 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                raise InvalidInput(f"{info.filename!r} inflates more than {MAX_RATIO} times; refused as a zip bomb")
            # Never trust the declared size: read at most one byte past the limit and measure.
            try:
                with archive.open(info) as member:
                    content = member.read(MAX_FILE_BYTES + 1)
            except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError) as exc:
                raise InvalidInput(f"{info.filename!r} cannot be read ({exc})") from exc
            if len(content) > MAX_FILE_BYTES:
                raise InvalidInput(f"{info.filename!r} is larger than {MAX_FILE_BYTES // 1024} KiB")
            total += len(content)
            if total > MAX_UNCOMPRESSED_BYTES:
                raise InvalidInput(f"the zip unpacks to more than {MAX_UNCOMPRESSED_BYTES // (1024 * 1024)} MB")
            if parts in raw:
                raise InvalidInput(f"{info.filename!r} appears twice in the zip")
            raw[parts] = content
    return _as_folder(raw)


def _as_folder(raw: dict[tuple[str, ...], bytes]) -> ZipFolder:
    if not raw:
        raise InvalidInput("the zip holds no files")
    tops = {parts[0] for parts in raw}
    slug_hint = ""
    if len(tops) == 1 and all(len(parts) > 1 for parts in raw):
        slug_hint = next(iter(tops))
        raw = {parts[1:]: content for parts, content in raw.items()}
    if len(raw) > MAX_FILES:
        raise InvalidInput(f"the exercise has more than {MAX_FILES} files")
    files: dict[str, str] = {}
    for parts, content in sorted(raw.items()):
        path = "/".join(parts)
        if PurePosixPath(path).suffix not in TEXT_SUFFIXES:
            raise InvalidInput(f"{path}: unsupported file type (allowed: {' '.join(sorted(TEXT_SUFFIXES))})")
        try:
            files[path] = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path} is not UTF-8 text") from exc
    return ZipFolder(files=files, slug_hint=slug_hint)


# --- the browser editor --------------------------------------------------------------------------------------


@dataclass
class WrongForm:
    name: str
    code: str
    must_fail: list[str]
    why: str = ""


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


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # A JSON string is a TOML basic string once DEL (allowed raw in JSON, not in TOML) is escaped.
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007F")


def dump_toml(meta: dict[str, Any]) -> str:
    """Write the subset of TOML ``exercise.toml`` uses: scalars, tables of scalars, arrays of tables."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in meta.items() if not isinstance(v, dict | list) or _plain(v)]
    for key, value in meta.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]"] + [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in value.items()]
        elif isinstance(value, list) and not _plain(value):
            for entry in value:
                lines += ["", f"[[{key}]]"] + [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> bool:
    return isinstance(value, list) and not any(isinstance(v, dict) for v in value)


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
        wrong.append(entry)
    meta.pop("wrong", None)
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
    files["exercise.toml"] = dump_toml(meta)
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


def learner_view(exercise: Exercise, version: ExerciseVersion) -> ExerciseDetail:
    """Return exactly what a learner would receive for ``version`` (the API's own allow-list)."""
    return ExerciseDetail.of(exercise, version)
