"""``GET /api/path``: the learning path's modules, with the caller's standing when they are a learner."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.domain.exercises.bank import store_path
from app.domain.models import User
from tests.app.domain.exercises.test_learning_path import grade, path_of
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def test_the_path_with_my_standing(
    learner_client: TestClient, learner: User, make_exercise: Callable[..., TinyExercise], db_session: Session
) -> None:
    assert learner_client.get("/api/path").json() == {"modules": [], "others": []}  # no path synced
    one, two, loose = make_exercise(), make_exercise(), make_exercise()
    store_path(session=db_session, path=path_of([("basics", [one.slug], []), ("next-step", [two.slug], ["basics"])]))
    grade(db_session, learner, one, Verdict.passed)
    body = learner_client.get("/api/path").json()
    assert body["others"] == [loose.slug]
    assert body["modules"] == [
        {"slug": "basics", "number": 1, "title": "Module basics", "why": "Why basics.", "exercises": [one.slug],
         "requires": [], "total": 1, "passed": 1, "status": "done", "waiting_for": []},
        {"slug": "next-step", "number": 2, "title": "Module next-step", "why": "Why next-step.",
         "exercises": [two.slug], "requires": ["basics"], "total": 1, "passed": 0, "status": "ready",
         "waiting_for": []},
    ]  # fmt: skip


def test_staff_get_the_path_without_a_standing_and_strangers_get_401(
    client: TestClient, instructor: User, login: Callable[..., None], make_exercise: Callable[..., TinyExercise],
    db_session: Session,
) -> None:  # fmt: skip
    one = make_exercise()
    store_path(session=db_session, path=path_of([("basics", [one.slug], [])]))
    db_session.commit()
    assert client.get("/api/path").status_code == 401
    login(client, instructor)
    (module,) = client.get("/api/path").json()["modules"]
    assert module["exercises"] == [one.slug] and module["status"] is None and module["passed"] is None


def test_the_schema_documents_the_path(app: FastAPI) -> None:
    operation = app.openapi()["paths"]["/api/path"]["get"]
    assert set(operation["responses"]) >= {"200", "401"}
    module = app.openapi()["components"]["schemas"]["PathModuleOut"]["properties"]
    assert module["status"]["anyOf"][0]["enum"] == ["ready", "in_progress", "done", "locked"]
