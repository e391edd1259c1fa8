"""The learning path as learners see it: the synced modules, the published exercises of each, a learner's standing.

Contract:
- ``current_path`` is the newest synced ``LearningPathVersion`` (``app.domain.exercises.bank.store_path``) as a
  ``LearningPath``, or None when the bank has no path (none synced, or the newest sync found no ``path.toml``).
- ``path_view`` lays the path over the published exercises: each module lists its published exercises in the
  path's order (an exercise the path names but that is not published is left out, so counts are what a learner
  can do); published exercises that no module holds (``off_path``, uploads, authored ones) are ``others``.
- With a learner's progress (``app.domain.submissions.progress``), a module counts the exercises they passed (some
  submission graded ``passed``) and has a status: ``done`` (every exercise passed), ``in_progress`` (one passed or
  attempted), ``locked`` (a module it requires is not done: ``waiting_for`` names them), or ``ready``. Locked is
  advice only: nothing refuses a submission because of the path. Without progress (staff, anonymous) statuses
  are None.
- A module with no published exercise is left out, and a prerequisite left out that way counts as done.
- ``path_for`` is what the catalogue page and ``GET /api/path`` show a user: the path with their standing when they
  are a learner (staff do not take the course), or None without a path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, LearningPathVersion, Role, User
from app.domain.submissions.progress import Progress, State, progress_by_exercise
from worker.bank.learning_path import LearningPath, PathModule


class ModuleStatus(StrEnum):
    ready = "ready"
    in_progress = "in_progress"
    done = "done"
    locked = "locked"

    @property
    def label(self) -> str:
        return {"ready": "Ready", "in_progress": "In progress", "done": "Done", "locked": "Locked"}[self.value]


@dataclass(frozen=True)
class ModuleView:
    """One module of the path with its published exercises in order, and a learner's standing when known."""

    module: PathModule
    number: int  # 1-based place in the path
    exercises: tuple[Exercise, ...]
    requires: tuple[PathModule, ...]
    passed: int | None = None
    status: ModuleStatus | None = None
    waiting_for: tuple[PathModule, ...] = ()  # prerequisites not done yet (advice; locked when nothing started)

    @property
    def total(self) -> int:
        return len(self.exercises)


@dataclass(frozen=True)
class PathView:
    modules: tuple[ModuleView, ...]
    others: tuple[Exercise, ...]  # published exercises on no module of the path


def current_path(*, session: Session) -> LearningPath | None:
    """Return the newest synced learning path, or None when the bank has none."""
    row = session.scalar(select(LearningPathVersion).order_by(LearningPathVersion.id.desc()).limit(1))
    if row is None:
        return None
    path = LearningPath.from_json(row.data, content_hash=row.content_hash)
    return path if path.modules else None


def path_view(path: LearningPath, exercises: list[Exercise], progress: dict[int, Progress] | None = None) -> PathView:
    """Lay ``path`` over the published ``exercises``; with ``progress`` (a learner's, by exercise id), their standing."""
    by_slug = {e.slug: e for e in exercises}
    placed = [(m, tuple(by_slug[s] for s in m.exercises if s in by_slug)) for m in path.modules]
    placed = [(m, rows) for m, rows in placed if rows]
    shown = {m.slug: m for m, _ in placed}
    on_path = {e.id for _, rows in placed for e in rows}
    others = tuple(e for e in sorted(exercises, key=lambda e: e.slug) if e.id not in on_path)
    done: set[str] = set()
    views: list[ModuleView] = []
    for number, (module, rows) in enumerate(placed, start=1):
        requires = tuple(shown[s] for s in module.requires if s in shown)
        if progress is None:
            views.append(ModuleView(module, number, rows, requires))
            continue
        mine = [progress.get(e.id, Progress()) for e in rows]
        passed = sum(p.state is State.passed for p in mine)
        # A prerequisite is listed before the module (the format's rule), so its status is known by now.
        waiting = tuple(r for r in requires if r.slug not in done)
        if passed == len(rows):
            status = ModuleStatus.done
            done.add(module.slug)
        elif any(p.state is not State.not_started for p in mine):
            status = ModuleStatus.in_progress
        elif waiting:
            status = ModuleStatus.locked
        else:
            status = ModuleStatus.ready
        views.append(ModuleView(module, number, rows, requires, passed, status, waiting))
    return PathView(modules=tuple(views), others=others)


def path_for(
    *, session: Session, user: User, exercises: list[Exercise], progress: dict[int, Progress] | None = None
) -> PathView | None:
    """Return the path over the published ``exercises`` as ``user`` sees it (``progress``: theirs, if already read)."""
    path = current_path(session=session)
    if path is None:
        return None
    if user.role is not Role.learner:
        return path_view(path, exercises)
    return path_view(
        path, exercises, progress if progress is not None else progress_by_exercise(session=session, user=user)
    )
