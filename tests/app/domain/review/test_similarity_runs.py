"""Similarity checks: the engine (``app.domain.review.similarity``, copydetect) and the job
(``app.domain.review.similarity_runs``).

The code compared is the bank's own: ``torch-allreduce-grads``'s starter, reference solution and its flat-buffer
variant (an implementation that shares little with the solution), so the boilerplate is real.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Exercise,
    Role,
    SimilarityPair,
    SimilarityRun,
    Submission,
    SubmissionStatus,
    User,
)
from app.domain.review import similarity
from app.domain.review.similarity import Pair, Params, clusters, compare
from app.domain.review.similarity_runs import (
    claim_run,
    counted_submissions,
    create_run,
    redispatchable_runs,
    run_similarity,
    segments,
)
from tests.conftest import tiny_files
from tests.support import bank_file, wait_for
from worker.bank.spec import ExerciseSpec
from worker.core.errors import InvalidInput
from worker.core.outcome import Verdict

SLUG = "torch-allreduce-grads"
STARTER = bank_file(SLUG, "starter.py")
SOLUTION = bank_file(SLUG, "solution.py")
FLAT = bank_file(SLUG, "right/flat_buffer.py")  # one all_reduce over a flattened buffer
RENAMED = FLAT.replace("flat", "buffer").replace("grads", "gradients").replace("offset", "at")
COMMENTED = FLAT.replace("\n    flat.div_", "\n    # divide by the number of ranks\n    flat.div_")
# Only the starter with a one-line change: nothing beyond the given code.
STARTER_ONLY_1 = STARTER.replace("# TODO", "# TODO: later", 1)
STARTER_ONLY_2 = STARTER.replace("# TODO", "# not done", 1)


# --- the engine ---------------------------------------------------------------------------------------------


def test_an_identical_pair_ranks_first_and_a_renamed_copy_still_scores_high() -> None:
    half = FLAT.split("def train")[0] + "def train(rank, world_size):\n    return {}\n"
    documents = [("half", half), ("flat", FLAT), ("solution-like", SOLUTION), ("copy", FLAT), ("renamed", RENAMED)]
    pairs = compare(documents, boilerplate=[STARTER])
    assert pairs, "the copies must be found"
    first = pairs[0]
    assert {first.a, first.b} in ({"flat", "copy"}, {"flat", "renamed"}, {"copy", "renamed"})
    assert first.score == pytest.approx(1.0)
    by_keys = {frozenset((p.a, p.b)): p for p in pairs}
    assert by_keys[frozenset(("flat", "renamed"))].score > 0.95  # names are tokens: renaming hides nothing
    half_pair = by_keys[frozenset(("half", "flat"))]
    assert half_pair.share_a > half_pair.share_b  # half of flat is in half; less than half of flat is in half
    assert [p.score for p in pairs] == sorted((p.score for p in pairs), reverse=True)
    for pair in pairs:  # matched fragments are character slices of the original text
        assert pair.slices_a and all(0 <= s < e <= len(dict(documents)[pair.a]) for s, e in pair.slices_a)


def test_a_pair_sharing_only_the_starter_code_scores_nothing() -> None:
    documents = [("one", STARTER_ONLY_1), ("two", STARTER_ONLY_2)]
    without = compare(documents, params=Params(display_t=0.0))
    assert without and without[0].score > 0.9  # the same starter: copydetect alone calls them copies
    assert compare(documents, boilerplate=[STARTER], params=Params(display_t=0.0)) == []
    # The reference solution is boilerplate too: two learners who both wrote it share nothing of their own.
    solved = [("one", SOLUTION), ("two", SOLUTION.replace("# every rank now holds the sum", ""))]
    assert compare(solved, boilerplate=[STARTER, SOLUTION], params=Params(display_t=0.0)) == []


def test_clusters_join_three_or_more_over_pairs_at_the_threshold() -> None:
    def pair(a: str, b: str, score: float) -> Pair:
        return Pair(a=a, b=b, share_a=score, share_b=score / 2, tokens=100, slices_a=[], slices_b=[])

    pairs = [pair("a", "b", 0.9), pair("b", "c", 0.6), pair("d", "e", 0.95), pair("c", "f", 0.4), pair("x", "y", 1)]
    assert clusters(pairs, threshold=0.5) == [["a", "b", "c"]]  # d-e and x-y are pairs, not clusters
    assert clusters(pairs, threshold=0.4) == [["a", "b", "c", "f"]]
    documents = [("s1", FLAT), ("s2", RENAMED), ("s3", COMMENTED), ("s4", STARTER_ONLY_1), ("s5", STARTER_ONLY_2)]
    found = compare(documents, boilerplate=[STARTER, SOLUTION])
    assert clusters(found, threshold=0.5) == [["s1", "s2", "s3"]]


def test_parameters_out_of_range_are_named() -> None:
    assert Params().problems() == []
    assert Params(noise_t=40, guarantee_t=30).problems() == ["guarantee_t must be at least noise_t and at most 400"]
    assert len(Params(noise_t=1, display_t=2, cluster_t=-1).problems()) == 3


def test_segments_split_code_into_matched_and_plain_runs() -> None:
    code = "ab cd ef gh ij"
    assert segments(code, [[3, 4], [4, 7], [12, 99], [-5, 0]]) == [
        ("ab ", False), ("cd ef", True), (" gh ", False), ("ij", True),
    ]  # fmt: skip  # a slice inside a name is widened to the name
    assert segments(code, [[2, 3]]) == [("ab", False), (" ", True), ("cd ef gh ij", False)]
    assert segments(code, []) == [(code, False)]


# --- the job ------------------------------------------------------------------------------------------------


@dataclass
class Class:
    """An exercise with the bank's starter and solution, and learners' graded submissions to it."""

    exercise: Exercise
    learners: dict[str, User]
    submissions: dict[str, Submission]


def _exercise(db: Session) -> Exercise:
    tag = uuid.uuid4().hex[:12]
    files = tiny_files(prompt_md="# Average the gradients\n", queue="cpu", tag=tag)
    files["starter.py"], files["solution.py"] = STARTER, SOLUTION
    exercise, _ = upsert_exercise(session=db, spec=ExerciseSpec.from_files(f"sim-{tag}", files))
    db.commit()
    return exercise


def _submit(db: Session, exercise: Exercise, user: User, code: str, **fields: object) -> Submission:
    assert exercise.current_version is not None
    values: dict[str, object] = {
        "status": SubmissionStatus.graded, "verdict": Verdict.passed, "score": 5.0, "max_score": 5.0, **fields
    }  # fmt: skip
    submission = Submission(user_id=user.id, exercise_version_id=exercise.current_version.id, code=code, **values)
    db.add(submission)
    db.commit()
    return submission


@pytest.fixture
def klass(db_session: Session, make_user: Callable[..., User]) -> Class:
    exercise = _exercise(db_session)
    codes = {"ada": FLAT, "bob": RENAMED, "cy": COMMENTED, "dee": STARTER_ONLY_1, "eve": STARTER_ONLY_2}
    learners = {name: make_user(Role.learner) for name in codes}
    old = datetime.now(UTC) - timedelta(hours=1)
    # An older submission of ada's that is not what counts (the newest does), and a platform failure of eve's.
    _submit(db_session, exercise, learners["ada"], STARTER_ONLY_2, created_at=old)
    _submit(db_session, exercise, learners["eve"], FLAT, status=SubmissionStatus.error, verdict=None, score=None)
    submissions = {name: _submit(db_session, exercise, learners[name], code) for name, code in codes.items()}
    return Class(exercise=exercise, learners=learners, submissions=submissions)


Factory = Callable[[], AbstractContextManager[Session]]


@pytest.fixture
def factory(db_session: Session) -> Factory:
    """What the runner opens sessions with: the test's session, one thread at a time."""
    lock = threading.RLock()

    @contextmanager
    def shared() -> Iterator[Session]:
        with lock:
            yield db_session

    return shared


@pytest.mark.postgres
def test_counted_submissions_are_each_learners_newest_graded_one(db_session: Session, klass: Class) -> None:
    run = create_run(session=db_session, user=None, params=Params(), exercise=klass.exercise)
    chosen = counted_submissions(session=db_session, run=run)
    assert sorted(s.id for s in chosen[klass.exercise.id]) == sorted(s.id for s in klass.submissions.values())


@pytest.mark.postgres
def test_a_run_through_the_embedded_dispatcher_ranks_pairs_and_clusters(
    db_session: Session, klass: Class, instructor: User, factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.jobs.dispatch as dispatch

    run = create_run(session=db_session, user=instructor, params=Params(), exercise=klass.exercise)
    db_session.commit()
    monkeypatch.setattr(dispatch, "session_scope", factory)
    embedded = dispatch.InProcessDispatcher(workers=1)
    try:
        embedded.start_similarity(run.id)

        def settled() -> bool:
            with factory() as session:
                session.expire_all()
                found = session.get(SimilarityRun, run.id)
                return found is not None and found.status in ("done", "failed")

        wait_for(settled, timeout_s=60)
    finally:
        embedded.shutdown()
    db_session.refresh(run)
    assert run.status == "done", run.error
    assert run.attempts == 1 and run.finished_at is not None and run.submissions == 5
    ids = {name: s.id for name, s in klass.submissions.items()}
    assert run.clusters == [sorted([ids["ada"], ids["bob"], ids["cy"]])]
    pairs = list(run.pairs)
    assert [p.rank for p in pairs] == list(range(1, len(pairs) + 1))
    assert {frozenset((p.submission_a_id, p.submission_b_id)) for p in pairs} == {
        frozenset((ids["ada"], ids["bob"])), frozenset((ids["ada"], ids["cy"])), frozenset((ids["bob"], ids["cy"])),
    }  # the two starter-only submissions share nothing beyond the starter  # fmt: skip
    assert pairs[0].score >= pairs[-1].score and pairs[0].score > 0.9
    assert pairs[0].fragments["a"] and pairs[0].fragments["b"]


@pytest.mark.postgres
def test_running_a_run_again_changes_nothing(db_session: Session, klass: Class, factory: Factory) -> None:
    run = create_run(session=db_session, user=None, params=Params(), exercise=klass.exercise)
    db_session.commit()
    run_similarity(run.id, factory=factory)
    db_session.refresh(run)
    first = [(p.id, p.rank, p.score) for p in run.pairs]
    assert run.status == "done" and first
    run_similarity(run.id, factory=factory)  # a duplicate message, or a second call
    db_session.expire_all()
    again = db_session.get(SimilarityRun, run.id)
    assert again is not None and again.attempts == 1 and again.status == "done"
    assert [(p.id, p.rank, p.score) for p in again.pairs] == first


@pytest.mark.postgres
def test_a_failing_run_records_why(
    db_session: Session, klass: Class, factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object, **_kwargs: object) -> list[Pair]:
        raise RuntimeError("the tokenizer fell over")

    monkeypatch.setattr(similarity, "compare", broken)
    run = create_run(session=db_session, user=None, params=Params(), exercise=klass.exercise)
    db_session.commit()
    run_similarity(run.id, factory=factory)
    db_session.expire_all()
    failed = db_session.get(SimilarityRun, run.id)
    assert failed is not None and failed.status == "failed" and failed.finished_at is not None
    assert failed.error == "RuntimeError: the tokenizer fell over"
    assert db_session.query(SimilarityPair).filter_by(run_id=run.id).count() == 0


@pytest.mark.postgres
def test_an_assignment_run_compares_what_counts_under_it(
    db_session: Session, klass: Class, instructor: User, factory: Factory
) -> None:
    course = membership.create_course(
        session=db_session, slug=f"sim-{uuid.uuid4().hex[:8]}", title="Similarity", creator=instructor
    )
    assignment = Assignment(course_id=course.id, title="Week 1", position=0, counts="best")
    assignment.items.append(AssignmentItem(exercise=klass.exercise, position=0, weight=1.0))
    db_session.add(assignment)
    db_session.commit()
    # Under the assignment: ada's copy scores best, bob's renamed copy and a lower-scored copy of cy's.
    ada = _submit(db_session, klass.exercise, klass.learners["ada"], FLAT, assignment_id=assignment.id)
    _submit(db_session, klass.exercise, klass.learners["ada"], STARTER_ONLY_1, assignment_id=assignment.id, score=1.0)
    bob = _submit(db_session, klass.exercise, klass.learners["bob"], RENAMED, assignment_id=assignment.id)
    run = create_run(session=db_session, user=instructor, params=Params(), assignment=assignment)
    db_session.commit()
    chosen = counted_submissions(session=db_session, run=run)
    assert sorted(s.id for s in chosen[klass.exercise.id]) == sorted([ada.id, bob.id])  # the best counts
    run_similarity(run.id, factory=factory)
    db_session.refresh(run)
    assert run.status == "done" and run.submissions == 2
    assert [(p.submission_a_id, p.submission_b_id) for p in run.pairs] in ([(ada.id, bob.id)], [(bob.id, ada.id)])


@pytest.mark.postgres
def test_bad_runs_are_refused(db_session: Session, klass: Class) -> None:
    with pytest.raises(InvalidInput, match="guarantee_t"):
        create_run(session=db_session, user=None, params=Params(noise_t=50, guarantee_t=40), exercise=klass.exercise)
    with pytest.raises(InvalidInput, match="one exercise or one assignment"):
        create_run(session=db_session, user=None, params=Params())


@pytest.mark.postgres
def test_the_sweeper_sends_lost_and_abandoned_runs_again(db_session: Session, klass: Class) -> None:
    now = datetime.now(UTC)
    old = now - timedelta(seconds=120)

    def run(**values: object) -> SimilarityRun:
        made = create_run(session=db_session, user=None, params=Params(), exercise=klass.exercise)
        for key, value in values.items():
            setattr(made, key, value)
        db_session.commit()
        return made

    fresh = run()  # just sent: its message is on its way
    lost = run(dispatched_at=old)
    alive = run(status="running", attempts=1, started_at=old, heartbeat_at=now, dispatched_at=old)
    dead = run(status="running", attempts=1, started_at=old, heartbeat_at=old, dispatched_at=old)
    spent = run(status="running", attempts=3, started_at=old, heartbeat_at=old, dispatched_at=old)
    done = run(status="done", attempts=1, started_at=old, heartbeat_at=old, dispatched_at=old)
    ours = {r.id for r in (fresh, lost, alive, dead, spent, done)}

    ids = redispatchable_runs(session=db_session, now=now, lease_s=30, stale_queued_s=15, max_attempts=3)
    db_session.commit()
    assert [i for i in ids if i in ours] == [lost.id, dead.id]
    for sent in (lost, dead):
        db_session.refresh(sent)
        assert sent.dispatched_at == now
    db_session.refresh(spent)
    assert spent.status == "failed" and spent.error is not None and "3 times" in spent.error
    soon = redispatchable_runs(session=db_session, now=now + timedelta(seconds=1), lease_s=30, stale_queued_s=15,
                               max_attempts=3)  # fmt: skip
    assert not [i for i in soon if i in ours]  # just sent: each message waits its turn
    # The dead run's next claim takes it over with a new attempt number; the live one's is refused.
    assert claim_run(session=db_session, run_id=dead.id, lease_s=30) == 2
    assert claim_run(session=db_session, run_id=alive.id, lease_s=30) is None
    assert claim_run(session=db_session, run_id=done.id, lease_s=30) is None


def test_celery_sends_the_run_id_to_the_cpu_queue_and_the_task_refuses_other_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.jobs import similarity_tasks
    from app.jobs.dispatch import CeleryDispatcher

    sent: list[tuple[str, list[object], str]] = []

    class Broker:
        def send_task(self, name: str, *, args: list[object], queue: str, retry_policy: object) -> None:
            sent.append((name, args, queue))

    CeleryDispatcher(settings=None, celery=Broker()).start_similarity(7)  # type: ignore[arg-type]
    assert sent == [("gpulab.run_similarity", [7], "cpu")]
    assert similarity_tasks.SIMILARITY_TASK in similarity_tasks.celery_app.tasks
    assert "app.jobs.similarity_tasks" in similarity_tasks.celery_app.conf.include  # every worker loads it
    ran: list[object] = []
    monkeypatch.setattr("app.domain.review.similarity_runs.run_similarity", lambda run_id, **_: ran.append(run_id))
    for bad in ("7", True, 0, None, [7]):
        similarity_tasks.run_similarity_job(bad)
    similarity_tasks.run_similarity_job(7)
    assert ran == [7]
