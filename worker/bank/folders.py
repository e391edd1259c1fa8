"""The files of an exercise folder as bytes and text: ``exercise.toml`` written back, folders read from a zip.

Contract:
- ``dump_exercise_toml(meta)`` writes a dict (as ``tomllib`` reads ``exercise.toml``, possibly changed) as TOML
  with tomli-w; ``tomllib.loads`` of the result equals ``meta`` (values keep their types). Scalars and arrays of
  scalars come first, then ``[tables]`` and ``[[arrays of tables]]``; key order within each is kept.
- ``read_zip(data)`` reads an exercise folder from zip bytes in memory (nothing is ever written to disk from
  the archive) and refuses, with one clear ``InvalidInput`` each: archives over ``MAX_ZIP_BYTES``, more than
  ``MAX_MEMBERS`` entries, more than ``MAX_UNCOMPRESSED_BYTES`` in all, a member that inflates more than
  ``MAX_RATIO`` times (zip bombs), absolute paths, ``..``, backslashes, symbolic links, device files, FIFOs,
  encrypted members, non-UTF-8 or unsupported files (the rules of ``worker.bank.spec.read_exercise_files``).
  Hidden entries (``.*``, ``__pycache__``, ``__MACOSX``) are skipped. One top-level folder around everything is
  unwrapped and gives the slug hint. Whether the files make a valid exercise is ``ExerciseSpec``'s to say.
"""

from __future__ import annotations

import io
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import tomli_w

from worker.bank.spec import MAX_FILE_BYTES, MAX_FILES, TEXT_SUFFIXES
from worker.core.errors import InvalidInput

MAX_ZIP_BYTES = 2 * 1024 * 1024
MAX_UNCOMPRESSED_BYTES = 8 * 1024 * 1024
MAX_MEMBERS = MAX_FILES + 100  # folders and ignored files count too, but not without bound
MAX_RATIO = 100  # text rarely compresses beyond 10:1; a bomb does far more


def dump_exercise_toml(meta: Mapping[str, Any]) -> str:
    """Return ``meta`` as the text of an ``exercise.toml``."""
    return tomli_w.dumps(meta)


# --- zip archives --------------------------------------------------------------------------------------------


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
    """Refuse links, devices, FIFOs, sockets and encrypted members."""
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
    """Unwrap one top-level folder and decode the files, refusing unsupported and non-UTF-8 ones."""
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
