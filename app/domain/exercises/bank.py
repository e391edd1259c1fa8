"""Exercises in the database: sync the bank folder into immutable versions, and look them up.

Contract: ``sync_bank`` creates an ``Exercise`` for each new slug and a new ``ExerciseVersion`` whenever a
folder's content hash differs from the current version's; unchanged folders are left alone, so syncing is
idempotent. Exercises that vanished from the folder are unpublished, never deleted (their submissions stay),
unless their current version came from an upload or the browser editor (``source`` other than ``bank``).
The bank's learning path (``path.toml``, ``worker.bank.learning_path``) is checked against the folder's exercises and
synced with them: a changed file (or a removed one) becomes a new ``LearningPathVersion`` row, read by
``app.domain.exercises.learning_path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.results import settle
from app.domain.models import Exercise, ExerciseVersion, LearningPathVersion, User
from worker.bank.learning_path import LearningPath, load_path
from worker.bank.spec import ExerciseSpec, load_bank
from worker.core.errors import NotFound


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)
    path: str = "unchanged"  # the learning path: "new", "removed" or "unchanged"


def add_version(
    *, session: Session, exercise: Exercise, spec: ExerciseSpec, source: str = "bank", created_by: User | None = None
) -> ExerciseVersion:
    """Add ``spec`` as the next numbered version of ``exercise`` (never changing an existing one)."""
    last = session.scalar(select(func.max(ExerciseVersion.number)).where(ExerciseVersion.exercise_id == exercise.id))
    version = ExerciseVersion(
        exercise_id=exercise.id,
        number=(last or 0) + 1,
        content_hash=spec.content_hash,
        title=spec.title,
        kind=spec.kind,
        topic=spec.topic,
        difficulty=spec.difficulty,
        framework=spec.framework,
        queue=spec.queue,
        max_score=spec.max_score,
        files=dict(spec.files),
        source=source,
        created_by_id=created_by.id if created_by else None,
    )
    session.add(version)
    session.flush()
    return version


def upsert_exercise(*, session: Session, spec: ExerciseSpec) -> tuple[Exercise, bool]:
    """Store ``spec`` as the current version of its exercise; return it and whether a version was added."""
    exercise = session.scalar(select(Exercise).where(Exercise.slug == spec.slug))
    if exercise is None:
        exercise = Exercise(slug=spec.slug)
        session.add(exercise)
        session.flush()
    current = exercise.current_version
    if current is not None and current.content_hash == spec.content_hash:
        if not exercise.is_published:
            exercise.is_published = True
        return exercise, False
    version = add_version(session=session, exercise=exercise, spec=spec)
    exercise.current_version = version
    exercise.is_published = True
    settle.version_changed(session=session, exercise=exercise, version=version)  # refuses dropping graded rubric items
    return exercise, True


def sync_bank(*, session: Session, root: Path) -> SyncReport:
    """Load every exercise below ``root`` and its learning path (all must be valid) and upsert them."""
    specs = load_bank(root)
    path = load_path(root, [s.slug for s in specs])  # checked before anything is stored
    report = SyncReport()
    for spec in specs:
        known = session.scalar(select(Exercise.id).where(Exercise.slug == spec.slug)) is not None
        _, added = upsert_exercise(session=session, spec=spec)
        if not added:
            report.unchanged.append(spec.slug)
        elif known:
            report.updated.append(spec.slug)
        else:
            report.created.append(spec.slug)
    slugs = {s.slug for s in specs}
    for exercise in session.scalars(select(Exercise).where(Exercise.is_published.is_(True))):
        # Exercises whose live version was uploaded or authored in the browser are not the folder's to retire.
        from_bank = exercise.current_version is None or exercise.current_version.source == "bank"
        if exercise.slug not in slugs and from_bank:
            exercise.is_published = False
            report.unpublished.append(exercise.slug)
    report.path = store_path(session=session, path=path)
    return report


def store_path(*, session: Session, path: LearningPath | None) -> str:
    """Store ``path`` (None: the bank has none) as the newest path unless it is the one stored; say what changed."""
    digest = path.content_hash if path is not None else ""
    newest = session.scalar(select(LearningPathVersion).order_by(LearningPathVersion.id.desc()).limit(1))
    if (newest.content_hash if newest is not None else "") == digest:
        return "unchanged"
    data = path.as_json() if path is not None else {"modules": [], "off_path": []}
    session.add(LearningPathVersion(content_hash=digest, data=data))
    session.flush()
    return "new" if path is not None else "removed"


def list_published(*, session: Session) -> list[Exercise]:
    stmt = (
        select(Exercise)
        .where(Exercise.is_published.is_(True), Exercise.current_version_id.is_not(None))
        .order_by(Exercise.slug)
    )
    return list(session.scalars(stmt))


def get_published(*, session: Session, slug: str) -> Exercise:
    """Return the published exercise ``slug`` or raise ``NotFound``."""
    exercise = session.scalar(select(Exercise).where(Exercise.slug == slug))
    if exercise is None or not exercise.is_published or exercise.current_version is None:
        raise NotFound(f"no exercise called {slug!r}")
    return exercise
