"""Schemathesis fuzzes every operation of the OpenAPI schema, in process, as each role: no answer is a server error,
and every answer is one the schema documents (status code, content type, body schema, headers).

Contract:
- One test per role (anonymous, learner, instructor, admin, and a learner's access token with the read and
  submit scopes sent as ``Authorization: Bearer``, no cookie); each runs every operation of ``/openapi.json`` as a
  subtest: schemathesis' coverage phase (boundary and invalid values of each parameter) and then
  ``FUZZ_EXAMPLES`` generated cases (``GPULAB_TEST_FUZZ_EXAMPLES``, default 8), derandomised, so CI runs the same
  cases every time.
- The app is the ``app`` fixture's: the test database, rolled back after the test, and the recording dispatcher;
  example runs grade with ``fake_sandbox``, so no learner code runs. Generated path parameters are replaced, in
  a share of the cases, by ids that exist (an exercise, a quiz, a submission, a check, a regrade, a user, a
  similarity run and its pair), so the routes past the load-or-404 are fuzzed too.
- Half the generated accounts to create get a valid e-mail address, so creating one succeeds too.
- Requests are what a correct client sends: a role's session cookie, and ``Content-Type: application/json`` on
  a state-changing call without a body (the CSRF rule); after a logout the role logs in again. Event streams are
  read up to their first event.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.python.asgi import ASGIClient
from sqlalchemy.orm import Session

from app.domain.accounts.passwords import LoginLimiter
from app.domain.models import SubmissionStatus, User
from tests.conftest import PASSWORD, RecordingDispatcher, TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi import FastAPI

    from worker.grading.sandbox.fake import FakeSandbox

pytestmark = pytest.mark.postgres

ROLES = ("anonymous", "learner", "instructor", "admin", "token")
FUZZ_EXAMPLES = int(os.environ.get("GPULAB_TEST_FUZZ_EXAMPLES", "8"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
QUIZ_FILES = {
    "exercise.toml": 'title = "A quiz"\nkind = "quiz"\ntopic = "Quizzes"\n',
    "prompt.md": "Answer.",
    "quiz.toml": '[[question]]\nid = "q1"\ntype = "single"\nprompt = "Pick one"\nanswer = ["b"]\n'
    'options = [{ id = "a", text = "A" }, { id = "b", text = "B" }]\nexplanation = "B it is."\n',
}


@pytest.fixture(params=ROLES)
def role(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def existing(
    tiny_exercise: TinyExercise, learner: User, instructor: User, admin: User, db_session: Session
) -> dict[str, list[Any]]:
    """Make rows for every kind of path id; return the ids that exist, by path parameter name."""
    from app.domain.exercises.bank import upsert_exercise
    from app.domain.exercises.checks import create_check
    from app.domain.models import SimilarityPair
    from app.domain.review.similarity import Params
    from app.domain.review.similarity_runs import create_run
    from app.domain.submissions.lifecycle import create_submission
    from app.domain.submissions.regrade import start_regrade
    from worker.bank.spec import ExerciseSpec

    quiz, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files("fuzz-quiz", QUIZ_FILES))
    exercise = tiny_exercise.exercise
    version = exercise.current_version
    assert version is not None
    graded, regraded, queued = (
        create_submission(session=db_session, user=learner, exercise=exercise, code="x = 1\n", max_bytes=4096)
        for _ in range(3)
    )
    for settled in (graded, regraded):
        settled.status, settled.verdict, settled.score = SubmissionStatus.graded, Verdict.failed, 0.0
    db_session.flush()
    check = create_check(session=db_session, version=version, user=instructor)
    regrade, _ = start_regrade(
        session=db_session, exercise=exercise, target=version, submissions=[regraded], user=admin
    )
    run = create_run(session=db_session, user=instructor, params=Params(), exercise=exercise)
    run.status, run.submissions, run.pairs_found = "done", 2, 1
    run.pairs.append(
        SimilarityPair(
            rank=1, exercise_id=exercise.id, submission_a_id=graded.id, submission_b_id=regraded.id, score=1.0,
            share_a=1.0, share_b=1.0, tokens=6, fragments={"a": [[0, 5]], "b": [[0, 5]]},
        )
    )  # fmt: skip
    db_session.commit()
    return {
        "slug": [exercise.slug, quiz.slug],
        "submission_id": [graded.id, regraded.id, queued.id],  # its events end at once, or after the first
        "number": [version.number],
        "check_id": [check.id],
        "regrade_id": [regrade.id],
        "run_id": [run.id],  # a done similarity run, with one pair
        "rank": [1],
        "user_id": [learner.id],
    }


def _log_in(client: ASGIClient, user: User) -> None:
    response = client.post("/api/auth/login", json={"email": user.email, "password": PASSWORD})
    assert response.status_code == 200, response.text


@pytest.fixture
def role_user(role: str, learner: User, instructor: User, admin: User) -> User | None:
    return {"learner": learner, "instructor": instructor, "admin": admin}.get(role)


@pytest.fixture
def role_token(role: str, learner: User, db_session: Session) -> str | None:
    """The token role's access token: the learner's, with the read and submit scopes."""
    if role != "token":
        return None
    from app.domain.accounts.tokens import Scope, create_token

    _row, token = create_token(session=db_session, user=learner, name="fuzz", scopes=[Scope.read, Scope.submit])
    db_session.commit()
    return token


@pytest.fixture
def fuzz_client(
    app: FastAPI, role_user: User | None, dispatcher: RecordingDispatcher, fake_sandbox: FakeSandbox
) -> ASGIClient:
    """Return a client of ``app`` that holds ``role_user``'s session cookie (none for anonymous)."""
    app.state.dispatcher = dispatcher  # as after start-up: /readyz answers 200 (its 503 is not fuzzed)
    limiter = app.state.login_limiter  # fuzzed log-ins fail by the hundred; the role must still log in
    app.state.login_limiter = LoginLimiter(10**6, limiter.window_s, limiter=limiter.limiter)
    # An event stream is read up to its first event. (The app is an ASGI app; schemathesis types them its own way.)
    client = ASGIClient(app, max_stream_events=1)  # type: ignore[arg-type]
    if role_user is not None:
        _log_in(client, role_user)
    return client


@pytest.fixture
def api_schema(
    app: FastAPI, existing: dict[str, list[Any]], fuzz_client: ASGIClient, request: pytest.FixtureRequest
) -> Any:
    """Load the app's schema; in a share of the cases, put ids that exist in the path."""
    # schemathesis 4.32's lazy schemas read and write the node's ``_nodeid``, which pytest 9 no longer has.
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid
    config = schemathesis.Config.from_dict({"request-timeout": 10})
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)

    @schema.hook
    def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
        if not path_parameters:
            return st.just(path_parameters)
        known = {name: st.sampled_from(existing[name]) for name in path_parameters if name in existing}
        return st.one_of(st.just(path_parameters), st.fixed_dictionaries(known).map(lambda k: {**path_parameters, **k}))

    @schema.hook
    def flatmap_body(context: Any, body: Any) -> Any:
        if context.operation.label != "POST /api/admin/users" or not isinstance(body, dict):
            return st.just(body)
        # Generated e-mails are almost never deliverable addresses: half the new accounts get one that is.
        addresses = st.integers(0, 10**6).map(lambda n: {**body, "email": f"fuzz-{n}@example.com", "password": ""})
        return st.one_of(st.just(body), addresses)

    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


# Function-scoped fixtures are meant: every example of a role shares its database and session; no health check
# (too slow, filtered, ...) may stop a case that a correct client could send.
@settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
@schema.parametrize()
def test_every_operation_answers_as_documented(
    case: Any, fuzz_client: ASGIClient, role_user: User | None, role_token: str | None
) -> None:
    """Send the case as a correct client of this role would; fail on a 5xx or an answer the schema does not say."""
    headers = {}
    if role_token is not None:
        headers["Authorization"] = f"Bearer {role_token}"
    if case.method.upper() != "GET" and not case.operation.body:
        headers["Content-Type"] = "application/json"  # what the CSRF rule asks of a state-changing call
    case.call_and_validate(session=fuzz_client, headers=headers, checks=CHECKS)
    if case.path == "/api/auth/logout" and role_user is not None:
        _log_in(fuzz_client, role_user)
