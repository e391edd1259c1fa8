"""My progress (best score counts), my attempts on one exercise, and the diff of an attempt against the one before."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.domain.models import Submission, SubmissionStatus, User
from app.domain.submissions.lifecycle import create_submission
from app.domain.submissions.progress import diff_lines
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def attempt(
    session: Session,
    user: User,
    ex: TinyExercise,
    *,
    code: str = "x = 1\n",
    minutes: int = 0,
    verdict: Verdict | None = None,
    score: float | None = None,
) -> Submission:
    """Add a submission made ``minutes`` after T0, graded with ``verdict``/``score`` when given."""
    submission = create_submission(session=session, user=user, exercise=ex.exercise, code=code, max_bytes=65536)
    submission.created_at = T0 + timedelta(minutes=minutes)
    if verdict is not None:
        submission.status = SubmissionStatus.graded
        submission.verdict, submission.score = verdict, score
    session.commit()
    return submission


def test_progress_states_and_best_score(
    learner_client: TestClient,
    learner: User,
    other_learner: User,
    make_exercise: Callable[..., TinyExercise],
    db_session: Session,
) -> None:
    untouched, tried, done = make_exercise(), make_exercise(), make_exercise()
    attempt(db_session, learner, tried, minutes=1, verdict=Verdict.failed, score=3)
    attempt(db_session, learner, tried, minutes=2, verdict=Verdict.failed, score=2)  # worse later: best stays 3
    attempt(db_session, learner, tried, minutes=3)  # still queued: an attempt without a score
    attempt(db_session, learner, done, minutes=1, verdict=Verdict.passed, score=5)
    attempt(db_session, learner, done, minutes=2, verdict=Verdict.failed, score=1)  # passing once is enough
    attempt(db_session, other_learner, untouched, verdict=Verdict.passed, score=5)  # someone else's

    by_slug = {p["slug"]: p for p in learner_client.get("/api/me/progress").json()}
    assert by_slug[untouched.slug] == {
        "slug": untouched.slug, "state": "not_started", "attempts": 0, "best_score": None, "best_max_score": None,
        "points": 5.0,
    }  # fmt: skip
    assert by_slug[tried.slug] | {} == {
        "slug": tried.slug, "state": "attempted", "attempts": 3, "best_score": 3.0, "best_max_score": 5.0,
        "points": 5.0,
    }  # fmt: skip
    assert by_slug[done.slug]["state"] == "passed" and by_slug[done.slug]["best_score"] == 5.0
    one = learner_client.get(f"/api/exercises/{tried.slug}/progress").json()
    assert one == by_slug[tried.slug]


def test_attempts_are_mine_newest_first(
    learner_client: TestClient, learner: User, other_learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    first = attempt(db_session, learner, tiny_exercise, minutes=1)
    second = attempt(db_session, learner, tiny_exercise, minutes=2)
    attempt(db_session, other_learner, tiny_exercise, minutes=3)
    body = learner_client.get(f"/api/exercises/{tiny_exercise.slug}/attempts").json()
    assert [a["id"] for a in body] == [second.id, first.id]


def test_diff_against_the_previous_attempt(
    learner_client: TestClient, learner: User, other_learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    first = attempt(db_session, learner, tiny_exercise, code="def add(a, b):\n    return a - b\n", minutes=1)
    attempt(db_session, other_learner, tiny_exercise, code="somebody else\n", minutes=2)
    fixed = "def add(a, b):\n    return a + b  # <fixed>\n"
    second = attempt(db_session, learner, tiny_exercise, code=fixed, minutes=3)

    body = learner_client.get(f"/api/submissions/{second.id}/diff").json()
    assert body["id"] == second.id and body["previous_id"] == first.id
    kinds = [(line["kind"], line["text"]) for line in body["lines"]]
    assert ("del", "-    return a - b") in kinds and ("add", "+    return a + b  # <fixed>") in kinds
    assert ("ctx", " def add(a, b):") in kinds and kinds[0][0] == "file" and kinds[2][0] == "hunk"
    assert "somebody else" not in str(body)

    assert learner_client.get(f"/api/submissions/{first.id}/diff").json() == {
        "id": first.id, "previous_id": None, "lines": []
    }  # fmt: skip


def test_diff_of_someone_elses_submission_is_404(
    learner_client: TestClient, other_learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    theirs = attempt(db_session, other_learner, tiny_exercise)
    assert learner_client.get(f"/api/submissions/{theirs.id}/diff").status_code == 404


def test_progress_needs_a_login(client: TestClient, tiny_exercise: TinyExercise) -> None:
    assert client.get("/api/me/progress").status_code == 401
    assert client.get(f"/api/exercises/{tiny_exercise.slug}/attempts").status_code == 401


def test_diff_lines_tags_and_keeps_text_raw() -> None:
    assert diff_lines("a\n", "a\n") == []
    lines = diff_lines("<b>\nsame\n", "<i>\nsame\n")
    assert [(d.kind, d.text) for d in lines[2:]] == [("hunk", "@@ -1,2 +1,2 @@"), ("del", "-<b>"), ("add", "+<i>"),
                                                     ("ctx", " same")]  # fmt: skip
