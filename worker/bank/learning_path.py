"""Read the bank's learning path, ``path.toml``: the exercises ordered into modules with prerequisites.

Contract (the format is documented for authors in ``exercises/README.md``):
- ``path.toml`` is the pydantic model ``PathMeta``: ``[[module]]`` tables (``ModuleMeta``: ``slug``, ``title``, ``why``,
  ``exercises`` in order, ``requires`` other modules' slugs) and ``off_path``, the exercises that belong to no
  module on purpose. An unknown key is an error and values keep their TOML types, as in ``exercise.toml``.
- Within the file: module slugs are unique, ``requires`` names modules of the file (not the module itself), the
  prerequisites never go round in a circle, and a module comes after every module it requires (the file's order
  is the order learners see). Against the bank (``check_against``): every exercise named exists, and every
  exercise of the bank is in exactly one module or in ``off_path``.
- Every problem raises ``PathFormatError`` (an ``ExerciseFormatError``), naming the field
  (``path.toml: module[2] ('ddp').requires names 'nope', which is no module of this file``).
- ``LearningPath`` is the plain result (no pydantic), stored by the app as JSON (``as_json``/``from_json``) with the
  file's ``content_hash``, so a synced path stays what it was when the bank folder changes.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints, ValidationError, model_validator

from worker.bank.formatkit import FormatModel, Required, first_repeat, naming_entries, readable_problem
from worker.bank.specdata import SLUG_RE
from worker.core.errors import PathFormatError

PATH_FILE = "path.toml"
MAX_MODULES = 50
MAX_WHY_CHARS = 200


def _slug(value: str) -> str:
    """Refuse a name that cannot be an exercise's or a module's slug."""
    if not SLUG_RE.match(value):
        raise ValueError(f"{value!r} is not a slug (3-64 characters of a-z, 0-9 and '-', as the folder names)")
    return value


Slug = Annotated[str, AfterValidator(_slug)]


class ModuleMeta(FormatModel):
    """A ``[[module]]`` table: one step of the path, its exercises in order and the modules to finish first."""

    slug: Slug
    title: Required
    why: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_WHY_CHARS)]
    exercises: tuple[Slug, ...] = Field(min_length=1)
    requires: tuple[Slug, ...] = ()

    @model_validator(mode="after")
    def _no_repeats(self) -> ModuleMeta:
        """Refuse an exercise or a prerequisite named twice, and a module that requires itself."""
        twice = first_repeat(self.exercises)
        if twice:
            raise ValueError(f"exercises names {twice!r} twice")
        twice = first_repeat(self.requires)
        if twice:
            raise ValueError(f"requires names {twice!r} twice")
        if self.slug in self.requires:
            raise ValueError(f"requires names the module itself ({self.slug!r})")
        return self


class PathMeta(FormatModel):
    """``path.toml``: the modules in the order learners take them, and the exercises left off the path."""

    module: tuple[ModuleMeta, ...] = Field(min_length=1, max_length=MAX_MODULES)
    off_path: tuple[Slug, ...] = ()

    @model_validator(mode="after")
    def _graph(self) -> PathMeta:
        """Refuse repeated modules, unknown, circular or later-listed prerequisites, and doubled exercises."""
        slugs = [m.slug for m in self.module]
        twice = first_repeat(slugs)
        if twice:
            raise ValueError(f"two modules have the slug {twice!r}; module slugs are unique")
        for index, module in enumerate(self.module):
            for needed in module.requires:
                if needed not in slugs:
                    raise ValueError(
                        f"module[{index}] ({module.slug!r}).requires names {needed!r}, which is no module of this file"
                    )
        cycle = _cycle({m.slug: m.requires for m in self.module})
        if cycle:
            raise ValueError(f"the prerequisites go round in a circle: {' -> '.join(cycle)}")
        for index, module in enumerate(self.module):
            for needed in module.requires:
                if slugs.index(needed) > index:
                    raise ValueError(
                        f"module[{index}] ({module.slug!r}) requires {needed!r}, which comes later in the file; "
                        "list a module after the modules it requires"
                    )
        owner: dict[str, str] = {}
        for module in self.module:
            for slug in module.exercises:
                if slug in owner:
                    raise ValueError(
                        f"exercise {slug!r} is in modules {owner[slug]!r} and {module.slug!r}; "
                        "an exercise belongs to one module"
                    )
                owner[slug] = module.slug
        for slug in self.off_path:
            if slug in owner:
                raise ValueError(f"off_path names {slug!r}, which is in module {owner[slug]!r}")
        twice = first_repeat(self.off_path)
        if twice:
            raise ValueError(f"off_path names {twice!r} twice")
        return self


def _cycle(requires: Mapping[str, Collection[str]]) -> list[str]:
    """Return one circle of prerequisites as ``[a, b, ..., a]``, or an empty list when there is none."""
    done: set[str] = set()

    def visit(slug: str, trail: list[str]) -> list[str]:
        if slug in trail:
            return [*trail[trail.index(slug) :], slug]
        if slug in done:
            return []
        for needed in requires.get(slug, ()):
            found = visit(needed, [*trail, slug])
            if found:
                return found
        done.add(slug)
        return []

    for start in requires:
        found = visit(start, [])
        if found:
            return found
    return []


@dataclass(frozen=True)
class PathModule:
    """One module of a synced path."""

    slug: str
    title: str
    why: str
    exercises: tuple[str, ...]
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class LearningPath:
    """The bank's path: its modules in order, the exercises left off it on purpose, and the file's hash."""

    modules: tuple[PathModule, ...]
    off_path: tuple[str, ...] = ()
    content_hash: str = ""

    def as_json(self) -> dict[str, Any]:
        """Return the path as JSON-ready data (what the app stores)."""
        return {
            "modules": [
                {"slug": m.slug, "title": m.title, "why": m.why, "exercises": list(m.exercises),
                 "requires": list(m.requires)}
                for m in self.modules
            ],
            "off_path": list(self.off_path),
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any], content_hash: str = "") -> LearningPath:
        """Rebuild a path that ``as_json`` wrote."""
        modules = tuple(
            PathModule(m["slug"], m["title"], m["why"], tuple(m["exercises"]), tuple(m["requires"]))
            for m in data.get("modules", ())
        )
        return cls(modules=modules, off_path=tuple(data.get("off_path", ())), content_hash=content_hash)


def parse_path(text: str) -> LearningPath:
    """Read the text of ``path.toml`` (no check against the bank); raise ``PathFormatError``."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PathFormatError(f"{PATH_FILE} is not valid TOML: {exc}") from exc
    try:
        meta = PathMeta.model_validate(raw)
    except ValidationError as exc:
        raise PathFormatError(readable_problem(PATH_FILE, exc, naming_entries(raw, "module", "slug"))) from exc
    modules = tuple(PathModule(m.slug, m.title, m.why, m.exercises, m.requires) for m in meta.module)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return LearningPath(modules=modules, off_path=meta.off_path, content_hash=digest)


def check_against(path: LearningPath, exercises: Collection[str]) -> None:
    """Check ``path`` against the bank's exercise slugs: each one named exists, each exercise is placed once."""
    known = set(exercises)
    for index, module in enumerate(path.modules):
        unknown = [s for s in module.exercises if s not in known]
        if unknown:
            raise PathFormatError(
                f"{PATH_FILE}: module[{index}] ({module.slug!r}).exercises names {', '.join(map(repr, unknown))}, "
                "which is no exercise of the bank",
            )
    unknown = [s for s in path.off_path if s not in known]
    if unknown:
        raise PathFormatError(
            f"{PATH_FILE}: off_path names {', '.join(map(repr, unknown))}, which is no exercise of the bank"
        )
    placed = {s for m in path.modules for s in m.exercises} | set(path.off_path)
    missing = sorted(known - placed)
    if missing:
        raise PathFormatError(
            f"{PATH_FILE}: {', '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} in no module; "
            "add each to a module's exercises or to off_path",
        )


def load_path(root: Path, exercises: Collection[str]) -> LearningPath | None:
    """Load ``root/path.toml`` and check it against the bank's ``exercises``; None when the bank has no path."""
    file = root / PATH_FILE
    if not file.is_file():
        return None
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PathFormatError(f"{PATH_FILE} cannot be read: {exc}") from exc
    path = parse_path(text)
    check_against(path, exercises)
    return path
