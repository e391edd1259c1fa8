"""List endpoints issue a fixed number of queries, however many rows they answer with (no N+1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from app.domain.exercises.bank import store_path
from app.domain.models import Submission, SubmissionStatus, TestResult, User
from app.domain.submissions.lifecycle import create_submission
from tests.app.domain.exercises.test_learning_path import path_of
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
PATHS = ("/api/exercises", "/api/me/progress", "/api/me/submissions", "/exercises", "/api/path")


@contextmanager
def counting_selects(engine: Engine) -> Iterator[list[str]]:
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


def add_graded_attempt(session: Session, user: User, ex: TinyExercise) -> Submission:
    submission = create_submission(session=session, user=user, exercise=ex.exercise, code="x = 1\n", max_bytes=65536)
    submission.status, submission.verdict, submission.score = SubmissionStatus.graded, Verdict.failed, 1.0
    submission.tests.append(TestResult(position=0, name="t", outcome="failed", points=0.0, max_points=1.0))
    session.commit()
    return submission


def select_counts(client: TestClient, session: Session, engine: Engine) -> dict[str, int]:
    counts = {}
    for path in PATHS:
        session.expunge_all()  # nothing cached in the shared test session: each request loads what it reads
        with counting_selects(engine) as statements:
            response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        counts[path] = len(statements)
    return counts


def test_list_endpoints_do_not_query_once_per_row(
    learner_client: TestClient,
    learner: User,
    make_exercise: Callable[..., TinyExercise],
    db_session: Session,
    pg_engine: Engine,
) -> None:
    learner_id = learner.id
    made = [make_exercise() for _ in range(2)]
    for ex in made:
        add_graded_attempt(db_session, db_session.get(User, learner_id) or learner, ex)
    # The catalogue and /api/path show the learning path: its modules must not cost a query each either.
    store_path(session=db_session, path=path_of([("aaa", [made[0].slug], []), ("bbb", [made[1].slug], ["aaa"])]))
    db_session.commit()
    few = select_counts(learner_client, db_session, pg_engine)
    for _ in range(4):
        add_graded_attempt(db_session, db_session.get(User, learner_id) or learner, make_exercise())
    many = select_counts(learner_client, db_session, pg_engine)

    assert many == few
    assert all(count <= 6 for count in many.values()), many
