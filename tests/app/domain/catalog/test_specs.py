"""``app.domain.catalog.specs``: a stored version's spec is parsed once per process and kept by slug and content
hash."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.domain.catalog import specs
from app.domain.exercises.bank import upsert_exercise
from tests.support import BANK
from worker.bank.spec import load_exercise

pytestmark = pytest.mark.postgres


def test_a_version_is_parsed_once_and_another_version_on_its_own(
    db_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = specs.ExerciseSpec.from_files
    monkeypatch.setattr(specs, "_SPECS", specs.OrderedDict())
    monkeypatch.setattr(specs.ExerciseSpec, "from_files", lambda slug, files: parsed.append(slug) or real(slug, files))
    exercise, _ = upsert_exercise(session=db_session, spec=load_exercise(BANK / "python-split-batch"))
    db_session.flush()
    version = exercise.current_version
    assert version is not None
    first = specs.spec_of(version)
    parsed.clear()  # storing the version may have read its spec already
    assert specs.spec_of(version) is first and specs.spec_of(version) is first and parsed == []
    assert first.content_hash == version.content_hash and first.slug == "python-split-batch"
    other, _ = upsert_exercise(session=db_session, spec=load_exercise(BANK / "torch-lr-scaling"))
    db_session.flush()
    assert other.current_version is not None
    assert specs.spec_of(other.current_version).slug == "torch-lr-scaling"
    assert specs.spec_of(version) is first and parsed.count("python-split-batch") == 0
