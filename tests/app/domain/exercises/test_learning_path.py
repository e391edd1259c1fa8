"""The learning path in the database: synced with the bank, laid over the published exercises, a learner's standing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.exercises.bank import list_published, store_path, sync_bank
from app.domain.exercises.learning_path import ModuleStatus, PathView, current_path, path_view
from app.domain.models import LearningPathVersion, SubmissionStatus, User
from app.domain.submissions.lifecycle import create_submission
from app.domain.submissions.progress import progress_by_exercise
from tests.conftest import TinyExercise, tiny_files
from worker.bank.learning_path import LearningPath, parse_path
from worker.core.errors import PathFormatError
from worker.core.outcome import Verdict

pytestmark = pytest.mark.postgres


def path_of(modules: list[tuple[str, list[str], list[str]]], off_path: list[str] | None = None) -> LearningPath:
    """Return a parsed path of ``(slug, exercise slugs, required module slugs)`` modules."""
    text = f"off_path = {off_path or []!r}\n".replace("'", '"')
    for slug, exercises, requires in modules:
        text += (
            f'[[module]]\nslug = "{slug}"\ntitle = "Module {slug}"\nwhy = "Why {slug}."\n'
            f"exercises = {exercises!r}\nrequires = {requires!r}\n"
        ).replace("'", '"')
    return parse_path(text)


def grade(session: Session, user: User, ex: TinyExercise, verdict: Verdict) -> None:
    submission = create_submission(session=session, user=user, exercise=ex.exercise, code="x", max_bytes=9999)
    submission.status, submission.verdict = SubmissionStatus.graded, verdict
    submission.score = 5.0 if verdict is Verdict.passed else 1.0
    session.commit()


def write_bank(root: Path, slugs: list[str], path_text: str | None) -> None:
    for slug in slugs:
        for name, text in tiny_files(prompt_md="x", queue="cpu", tag=slug).items():
            (root / slug / name).parent.mkdir(parents=True, exist_ok=True)
            (root / slug / name).write_text(text, encoding="utf-8")
    if path_text is not None:
        (root / "path.toml").write_text(path_text, encoding="utf-8")


def test_sync_stores_the_path_once_per_change_and_forgets_a_removed_one(db_session: Session, tmp_path: Path) -> None:
    text = '[[module]]\nslug = "basics"\ntitle = "Basics"\nwhy = "First."\nexercises = ["ex-one", "ex-two"]\n'
    write_bank(tmp_path, ["ex-one", "ex-two"], text)
    assert sync_bank(session=db_session, root=tmp_path).path == "new"
    stored = current_path(session=db_session)
    assert stored is not None and [m.exercises for m in stored.modules] == [("ex-one", "ex-two")]
    assert sync_bank(session=db_session, root=tmp_path).path == "unchanged"
    assert db_session.scalar(select(func.count()).select_from(LearningPathVersion)) == 1

    (tmp_path / "path.toml").unlink()
    assert sync_bank(session=db_session, root=tmp_path).path == "removed"
    assert current_path(session=db_session) is None


def test_sync_refuses_a_path_that_leaves_an_exercise_out_and_stores_nothing(
    db_session: Session, tmp_path: Path
) -> None:
    text = '[[module]]\nslug = "basics"\ntitle = "Basics"\nwhy = "First."\nexercises = ["ex-one"]\n'
    write_bank(tmp_path, ["ex-one", "ex-two"], text)
    with pytest.raises(PathFormatError, match="'ex-two' is in no module"):
        sync_bank(session=db_session, root=tmp_path)
    assert current_path(session=db_session) is None
    assert all(e.slug not in ("ex-one", "ex-two") for e in list_published(session=db_session))


def view_for(session: Session, learner: User | None, path: LearningPath) -> PathView:
    store_path(session=session, path=path)
    progress = progress_by_exercise(session=session, user=learner) if learner else None
    return path_view(path, list_published(session=session), progress)


def test_a_learners_standing_per_module(
    db_session: Session, learner: User, make_exercise: Callable[..., TinyExercise]
) -> None:
    a1, a2, b1, c1, d1, other = (make_exercise() for _ in range(6))
    path = path_of(
        [
            ("aaa", [a1.slug, a2.slug], []),
            ("bbb", [b1.slug], ["aaa"]),
            ("ccc", [c1.slug], ["aaa", "bbb"]),
            ("ddd", [d1.slug], []),
        ]
    )
    fresh = view_for(db_session, learner, path)
    assert [(m.module.slug, m.passed, m.total, m.status) for m in fresh.modules] == [
        ("aaa", 0, 2, ModuleStatus.ready),
        ("bbb", 0, 1, ModuleStatus.locked),
        ("ccc", 0, 1, ModuleStatus.locked),
        ("ddd", 0, 1, ModuleStatus.ready),
    ]
    assert [m.slug for m in fresh.modules[2].waiting_for] == ["aaa", "bbb"]
    assert [e.slug for e in fresh.others] == [other.slug]  # published, on no module

    grade(db_session, learner, a1, Verdict.passed)
    grade(db_session, learner, c1, Verdict.failed)  # started ahead of its prerequisites: advice, not a lock
    middle = view_for(db_session, learner, path)
    assert [(m.passed, m.status) for m in middle.modules] == [
        (1, ModuleStatus.in_progress), (0, ModuleStatus.locked), (0, ModuleStatus.in_progress), (0, ModuleStatus.ready)
    ]  # fmt: skip
    assert [m.slug for m in middle.modules[2].waiting_for] == ["aaa", "bbb"]

    grade(db_session, learner, a2, Verdict.failed)
    grade(db_session, learner, a2, Verdict.passed)  # the best attempt counts
    done = view_for(db_session, learner, path)
    assert [(m.passed, m.status) for m in done.modules[:3]] == [
        (2, ModuleStatus.done), (0, ModuleStatus.ready), (0, ModuleStatus.in_progress)
    ]  # fmt: skip
    assert [m.slug for m in done.modules[2].waiting_for] == ["bbb"]


def test_without_progress_the_path_has_no_standing_and_skips_what_is_not_published(
    db_session: Session, make_exercise: Callable[..., TinyExercise]
) -> None:
    a1, b1 = make_exercise(), make_exercise()
    b1.exercise.is_published = False
    db_session.commit()
    path = path_of([("aaa", ["gone-away", a1.slug], []), ("bbb", [b1.slug], ["aaa"]), ("ccc", [a1.slug + "x"], [])])
    view = view_for(db_session, None, path)
    # "bbb" holds nothing published and "ccc" nothing that exists: neither is shown.
    assert [(m.module.slug, [e.slug for e in m.exercises], m.status, m.passed) for m in view.modules] == [
        ("aaa", [a1.slug], None, None)
    ]
