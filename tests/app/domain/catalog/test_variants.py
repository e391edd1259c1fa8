"""A variant per learner: the seed, what each learner reads, what staff see, and grading in each one's own variant."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

import app.jobs.tasks
from app.domain.accounts.passwords import create_user
from app.domain.catalog.variants import params_to_grade, variant_seed, version_params
from app.domain.exercises.bank import get_published, sync_bank, upsert_exercise
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    Role,
    Submission,
    SubmissionStatus,
)
from app.domain.models import User as UserRow
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.domain.submissions.lifecycle import create_submission
from tests.support import configure
from tests.worker.conftest import local_sandbox, sandbox_user  # noqa: F401  (the real sandbox, for grading)
from worker.bank.spec import ExerciseSpec
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from app.domain.models import User
    from app.settings import Settings
    from worker.grading.sandbox.local import LocalSandbox

FILES = {
    "exercise.toml": 'title = "Your number"\n[params.n]\nrange = [11, 99]\n[limits]\ntimeout_s = 20\nmemory_mb = 256\n',
    "prompt.md": "Your number is **{{ params.n }}**. Write `square()` returning its square.\n",
    "starter.py": "# Your number: {{ params.n }}\ndef square():\n    raise NotImplementedError\n",
    "solution.py": "def square():\n    return {{ params.n }} ** 2\n",
    "tests/test_square.py": (
        "def test_square(submission, params):\n"
        "    got = submission.square()\n"
        "    want = params['n'] ** 2\n"
        "    where = f\"your number (in your prompt) is {params['n']}\"\n"
        '    assert got == want, f"square() returned {got!r}; {where}: expected {want}"\n'
    ),
    "examples/test_example.py": (
        "def test_my_square(submission, params):\n"
        "    assert submission.square() == params['n'] ** 2, f\"square() should be {params['n'] ** 2}\"\n"
    ),
}


def hard_coded(n: int) -> str:
    """Return an answer hard-coded for the learner whose number is ``n``."""
    return f"def square():\n    return {n * n}\n"


# --- the seed --------------------------------------------------------------------------------------------------


def test_the_seed_is_stable_and_differs_by_learner_assignment_exercise_and_secret() -> None:
    def seed(secret: str = "s" * 40, user_id: int = 1, assignment_id: int | None = 7, slug: str = "ex") -> bytes:
        return variant_seed(secret=secret, user_id=user_id, assignment_id=assignment_id, slug=slug)

    assert seed() == seed() and len(seed()) == 32
    others = [seed(user_id=2), seed(assignment_id=8), seed(assignment_id=None), seed(slug="ex2"), seed(secret="t" * 40)]
    assert len({seed(), *others}) == 6, "each id, and the secret, changes the seed"
    # Practice is its own context, not assignment 0 or the empty one.
    assert seed(assignment_id=None) != seed(assignment_id=0)


def test_learners_spread_over_the_values() -> None:
    spec = ExerciseSpec.from_files("your-number", FILES)
    drawn = {
        spec.draw_params(variant_seed(secret="s" * 40, user_id=user_id, assignment_id=3, slug=spec.slug))["n"]
        for user_id in range(1, 201)
    }
    assert drawn <= set(range(11, 100)) and len(drawn) > 50, drawn


# --- what learners read and staff see (PostgreSQL, the web app) --------------------------------------------------


@pytest.fixture
def variant_course(
    db_session: Session, make_user: Callable[..., User], settings: Settings
) -> tuple[Exercise, Assignment, list[User]]:
    """Sync the exercise, hold it in an open assignment, enrol learners; return two whose numbers differ first."""
    spec = ExerciseSpec.from_files(f"your-number-{uuid.uuid4().hex[:8]}", FILES)
    exercise, _ = upsert_exercise(session=db_session, spec=spec)
    course = Course(slug=f"course-{uuid.uuid4().hex[:10]}", title="GPU programming")
    assignment = Assignment(course=course, title="Week 1")
    assignment.items.append(AssignmentItem(exercise=exercise, position=0))
    db_session.add(assignment)
    db_session.flush()
    learners: list[User] = []
    numbers: set[object] = set()
    while len(learners) < 2:  # two learners share a number 1 time in 89: take the next one then
        learner = make_user()
        n = _number(exercise, learner, assignment.id)
        if n not in numbers:
            numbers.add(n)
            learners.append(learner)
    for learner in learners:
        db_session.add(CourseMember(course=course, user=learner, role=CourseRole.learner))
    db_session.commit()
    return exercise, assignment, learners


def _number(exercise: Exercise, user: User, assignment_id: int | None) -> object:
    assert exercise.current_version is not None
    return version_params(version=exercise.current_version, user=user, assignment_id=assignment_id)["n"]


def _shown_number(html: str) -> int:
    found = re.findall(r"Your number is <strong>(\d+)</strong>", html)
    assert len(found) == 1, html[:2000]
    return int(found[0])


def test_two_learners_of_one_assignment_read_their_own_numbers(
    client: TestClient, login: Callable[..., None], variant_course: tuple[Exercise, Assignment, list[User]]
) -> None:
    exercise, assignment, (ada, bob) = variant_course
    url = f"/courses/{assignment.course.slug}/assignments/{assignment.id}/exercises/{exercise.slug}"
    shown = {}
    for learner in (ada, bob):
        login(client, learner)
        page = client.get(url)
        assert page.status_code == 200, page.text[:500]
        shown[learner.id] = _shown_number(page.text)
        assert f"# Your number: {shown[learner.id]}" in page.text, "the starter in the editor has their number too"
        assert shown[learner.id] == _number(exercise, learner, assignment.id)
        # The same learner sees the same number on every visit.
        assert _shown_number(client.get(url).text) == shown[learner.id]
    assert shown[ada.id] != shown[bob.id]


def test_practice_is_another_variant_and_the_api_says_which(
    client: TestClient, login: Callable[..., None], variant_course: tuple[Exercise, Assignment, list[User]]
) -> None:
    exercise, _assignment, (ada, _bob) = variant_course
    login(client, ada)
    body = client.get(f"/api/exercises/{exercise.slug}").json()
    practice = _number(exercise, ada, None)
    assert body["params"] == {"n": practice}
    assert f"Your number is **{practice}**" in body["prompt_md"]
    assert f"# Your number: {practice}" in body["starter_code"]
    assert _shown_number(client.get(f"/exercises/{exercise.slug}").text) == practice
    notebook = client.get(f"/api/exercises/{exercise.slug}/notebook").json()
    assert f"# Your number: {practice}" in "".join(notebook["cells"][3]["source"])
    assert f"Your number is **{practice}**" in "".join(notebook["cells"][1]["source"])


def test_staff_see_the_variant_a_submission_was_made_in(
    client: TestClient,
    login: Callable[..., None],
    db_session: Session,
    admin: User,
    variant_course: tuple[Exercise, Assignment, list[User]],
) -> None:
    exercise, assignment, (ada, _bob) = variant_course
    submission = create_submission(
        session=db_session, user=ada, exercise=exercise, code=hard_coded(5), max_bytes=65536,
        assignment_id=assignment.id,
    )  # fmt: skip
    db_session.commit()
    number = _number(exercise, ada, assignment.id)
    assert submission.params == {"n": number}
    login(client, admin)
    page = client.get(f"/instructor/submissions/{submission.id}")
    assert page.status_code == 200
    assert f"variant: <code>n={number}</code>" in page.text
    login(client, ada)
    assert client.get(f"/api/submissions/{submission.id}").json()["params"] == {"n": number}


def test_the_unchanged_starter_of_the_learners_own_variant_costs_no_attempt(
    db_session: Session, variant_course: tuple[Exercise, Assignment, list[User]]
) -> None:
    from worker.core.errors import InvalidInput

    exercise, assignment, (ada, _bob) = variant_course
    starter = f"# Your number: {_number(exercise, ada, assignment.id)}\ndef square():\n    raise NotImplementedError\n"
    with pytest.raises(InvalidInput, match="the starter code, unchanged"):
        create_submission(
            session=db_session, user=ada, exercise=exercise, code=starter, max_bytes=65536, assignment_id=assignment.id
        )


def test_example_runs_use_the_variant_of_the_page_they_run_on(
    client: TestClient,
    login: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    local_sandbox: LocalSandbox,  # noqa: F811
    variant_course: tuple[Exercise, Assignment, list[User]],
) -> None:
    import worker.grading.sandbox

    monkeypatch.setattr(worker.grading.sandbox, "get_sandbox", lambda _settings: local_sandbox)
    exercise, assignment, (ada, bob) = variant_course
    login(client, ada)
    url = f"/api/exercises/{exercise.slug}/runs"
    mine, bobs = _number(exercise, ada, assignment.id), _number(exercise, bob, assignment.id)
    assert isinstance(mine, int) and isinstance(bobs, int)
    own = client.post(url, json={"code": hard_coded(mine), "assignment_id": assignment.id})
    assert own.status_code == 200 and own.json()["verdict"] == "passed", own.text
    copied = client.post(url, json={"code": hard_coded(bobs), "assignment_id": assignment.id}).json()
    assert copied["verdict"] == "failed" and f"should be {mine * mine}" in copied["tests"][0]["message"]
    practice = _number(exercise, ada, None)
    assert isinstance(practice, int)
    assert client.post(url, json={"code": hard_coded(practice)}).json()["verdict"] == "passed"
    elsewhere = client.post(url, json={"code": hard_coded(mine), "assignment_id": 2**31 - 1})
    assert elsewhere.status_code == 404, elsewhere.text


def test_the_similarity_pair_shows_each_sides_variant_and_each_variant_is_boilerplate(
    client: TestClient,
    login: Callable[..., None],
    db_session: Session,
    admin: User,
    variant_course: tuple[Exercise, Assignment, list[User]],
) -> None:
    from app.domain.models import SimilarityPair, SimilarityRun
    from app.domain.review.similarity import Params
    from app.domain.review.similarity_runs import _boilerplate

    exercise, assignment, (ada, bob) = variant_course
    made = {}
    for learner in (ada, bob):
        made[learner.id] = create_submission(
            session=db_session, user=learner, exercise=exercise, code=hard_coded(7), max_bytes=65536,
            assignment_id=assignment.id,
        )  # fmt: skip
    db_session.commit()
    numbers = [_number(exercise, learner, assignment.id) for learner in (ada, bob)]
    # Each learner's own starter is what they were given: neither is evidence of copying.
    texts = _boilerplate(list(made.values()))
    assert {f"# Your number: {n}\ndef square():\n    raise NotImplementedError\n" for n in numbers} <= set(texts)
    run = SimilarityRun(exercise_id=exercise.id, status="done", params=Params().as_dict())
    run.pairs.append(SimilarityPair(
        rank=1, exercise_id=exercise.id, submission_a_id=made[ada.id].id, submission_b_id=made[bob.id].id,
        score=1.0, share_a=1.0, share_b=1.0, tokens=10, fragments={"a": [], "b": []},
    ))  # fmt: skip
    db_session.add(run)
    db_session.commit()
    login(client, admin)
    for url in (f"/instructor/similarity/{run.id}/pairs/1", f"/instructor/similarity/{run.id}"):
        page = client.get(url)
        assert page.status_code == 200, page.text[:300]
        for n in numbers:
            assert f"variant: <code>n={n}</code>" in page.text, url


# --- grading in each learner's own variant (SQLite, the grading task, the real local sandbox) ----------------------


@pytest.fixture
def graded_bank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_sandbox: LocalSandbox) -> Iterator[int]:  # noqa: F811
    """A fresh database holding the exercise in an open assignment; gradings go to the local sandbox."""
    bank = tmp_path / "bank" / "your-number"
    for path, text in FILES.items():
        (bank / path).parent.mkdir(parents=True, exist_ok=True)
        (bank / path).write_text(text)
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path / "data"), secret_key="k" * 40)
    monkeypatch.setattr(app.jobs.tasks, "get_sandbox", lambda _settings: local_sandbox)
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=bank.parent)
        exercise = get_published(session=session, slug="your-number")
        assignment = Assignment(course=Course(slug="gpu", title="GPU programming"), title="Week 1")
        assignment.items.append(AssignmentItem(exercise=exercise, position=0))
        session.add(assignment)
        session.flush()
        assignment_id = assignment.id
    yield assignment_id


def _learners_with_different_numbers(assignment_id: int) -> list[tuple[int, int]]:
    """Create learners until two have different numbers under the assignment; return their (id, number)."""
    found: list[tuple[int, int]] = []
    with session_scope() as session:
        exercise = get_published(session=session, slug="your-number")
        for i in range(20):
            user = create_user(session=session, email=f"l{i}@example.com", password="correct horse", role=Role.learner)
            session.flush()
            n = _number(exercise, user, assignment_id)
            assert isinstance(n, int)
            if all(n != other for _, other in found):
                found.append((user.id, n))
            if len(found) == 2:
                return found
    raise AssertionError("20 learners drew one number")


def _submit_and_grade(user_id: int, assignment_id: int, code: str) -> Submission:
    with session_scope() as session:
        user = session.get(UserRow, user_id)
        exercise = get_published(session=session, slug="your-number")
        submission_id = create_submission(
            session=session, user=user, exercise=exercise, code=code, max_bytes=65536, assignment_id=assignment_id
        ).id
    app.jobs.tasks.grade_submission(submission_id)
    with session_scope() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        submission.tests  # noqa: B018  (load them before the session closes)
        session.expunge_all()
        return submission


@pytest.mark.slow
def test_each_learner_is_graded_in_their_own_variant_and_another_ones_answer_fails(graded_bank: int) -> None:
    (ada, ada_n), (bob, bob_n) = _learners_with_different_numbers(graded_bank)
    own = _submit_and_grade(ada, graded_bank, hard_coded(ada_n))
    assert own.verdict is Verdict.passed and own.params == {"n": ada_n}, own.message
    bobs = _submit_and_grade(bob, graded_bank, hard_coded(bob_n))
    assert bobs.verdict is Verdict.passed and bobs.params == {"n": bob_n}, bobs.message
    copied = _submit_and_grade(ada, graded_bank, hard_coded(bob_n))  # Bob's answer, handed in by Ada
    assert copied.verdict is Verdict.failed and copied.score == 0
    assert copied.tests[0].message.splitlines()[0] == (
        f"square() returned {bob_n * bob_n}; your number (in your prompt) is {ada_n}: expected {ada_n * ada_n}"
    )


@pytest.mark.slow
def test_grading_again_uses_the_stored_variant(graded_bank: int) -> None:
    (ada, ada_n), (_bob, bob_n) = _learners_with_different_numbers(graded_bank)
    first = _submit_and_grade(ada, graded_bank, hard_coded(bob_n))
    assert first.verdict is Verdict.failed
    with session_scope() as session:  # pretend it was made in Bob's variant (as if Ada's seed had been his then)
        stored = session.get(Submission, first.id)
        assert stored is not None
        stored.params = {"n": bob_n}
        stored.status = SubmissionStatus.queued
        assert params_to_grade(spec=ExerciseSpec.from_files("your-number", FILES), submission=stored) == {"n": bob_n}
    app.jobs.tasks.grade_submission(first.id)
    with session_scope() as session:
        again = session.get(Submission, first.id)
        assert again is not None and again.verdict is Verdict.passed and again.params == {"n": bob_n}
    assert ada_n != bob_n
