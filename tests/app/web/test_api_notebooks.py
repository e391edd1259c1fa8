"""The notebook round trip: an exercise downloaded as .ipynb, a notebook submitted, malformed ones refused."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import nbformat
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.exercises import notebooks
from app.domain.models import Exercise, Submission, User
from tests.app.web.test_api_courses import _assignment, course, logout  # noqa: F401  (course: a fixture)
from tests.app.web.test_api_quiz import quiz  # noqa: F401  (a fixture)
from tests.conftest import RecordingDispatcher, TinyExercise
from worker.core import humane

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

ANSWER = "def add(a, b):\n    return a + b"


def _download(client: TestClient, slug: str) -> Any:
    answer = client.get(f"/api/exercises/{slug}/notebook")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-ipynb+json"
    assert answer.headers["content-disposition"] == f'attachment; filename="{slug}.ipynb"'
    return nbformat.reads(answer.text, as_version=4)


def _with_answer(notebook: Any, answer: str = ANSWER) -> str:
    for cell in notebook.cells:
        if "solution" in cell.metadata.get("tags", []):
            cell.source = answer
    return str(nbformat.writes(notebook))


def _count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Submission)) or 0)


def test_the_download_holds_the_prompt_the_tagged_starter_and_the_examples_but_no_secret(
    learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    notebook = _download(learner_client, tiny_exercise.slug)
    nbformat.validate(notebook)
    assert notebook.metadata["gpulab"] == {"exercise": tiny_exercise.slug, "version": 1}
    assert notebook.metadata["kernelspec"]["language"] == "python"
    solution = [c for c in notebook.cells if "solution" in c.metadata.get("tags", [])]
    assert len(solution) == 1 and solution[0].cell_type == "code"
    assert solution[0].source == tiny_exercise.files["starter.py"]
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "Write `add(a, b)`." in markdown
    text = nbformat.writes(notebook)
    assert tiny_exercise.example_marker in text
    for secret in tiny_exercise.secret_markers:
        assert secret not in text
    examples = [c for c in notebook.cells if "examples" in c.metadata.get("tags", [])]
    harness, *runs = examples
    assert "def gpulab_examples(" in harness.source and harness.source.count("\n") > 40
    assert harness.metadata["jupyter"] == {"source_hidden": True}  # collapsed: the learner's work comes first
    assert runs and all("jupyter" not in c.metadata and c.source.startswith("gpulab_examples(") for c in runs)


def test_the_example_cells_run_against_what_the_notebook_defined(
    learner_client: TestClient, make_exercise: Callable[..., TinyExercise], db_session: Session
) -> None:
    exercise = make_exercise()
    version = exercise.exercise.current_version
    assert version is not None
    # An example that calls the learner's code, through the fixture and through `import submission`.
    files = dict(version.files)
    files["examples/test_example.py"] = (
        "import submission as imported\n\n\ndef test_adds(submission):\n    assert submission.add(2, 3) == 5, "
        "'add(2, 3) should be 5'\n\n\ndef test_import():\n    assert imported.add(1, 1) == 2, 'add(1, 1) should be 2'\n"
    )
    version.files = files
    db_session.commit()
    notebook = _download(learner_client, exercise.slug)

    def run(answer: str) -> str:
        namespace: dict[str, Any] = {}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for cell in notebook.cells:
                if cell.cell_type == "code":
                    tags = cell.metadata.get("tags", [])
                    exec(compile(answer if "solution" in tags else cell.source, "<cell>", "exec"), namespace)  # noqa: S102
        return out.getvalue()

    assert "PASS test_adds" in run(ANSWER) and "PASS test_import" in run(ANSWER)
    failed = run("def add(a, b):\n    return a - b\n")
    assert "FAIL test_adds: AssertionError: add(2, 3) should be 5" in failed and "0 passed, 2 failed" in failed


def test_a_notebook_is_graded_as_the_code_of_its_tagged_cells(
    learner_client: TestClient, tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session
) -> None:
    notebook = nbformat.reads(_with_answer(_download(learner_client, tiny_exercise.slug)), as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("print(add(1, 2))"))  # untagged: not graded
    notebook.cells.append(nbformat.v4.new_code_cell("HELPER = 1  \n\n", metadata={"tags": ["solution", "x"]}))
    answer = learner_client.post(
        f"/api/exercises/{tiny_exercise.slug}/notebook-submissions", json={"notebook": nbformat.writes(notebook)}
    )
    assert answer.status_code == 202, answer.text
    row = db_session.get(Submission, answer.json()["id"])
    # Exactly as written, trailing blanks included; one newline between two cells, as a cell ends a line.
    assert row is not None and row.code == ANSWER + "\nHELPER = 1  \n\n"
    assert dispatcher.calls == [(row.id, "cpu")]
    history = learner_client.get(f"/exercises/{tiny_exercise.slug}/history")
    assert "HELPER" in history.text and "print" not in history.text  # highlighted: the names, not the line


def _notebook(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [{"cell_type": "code", "id": "a1", "metadata": {"tags": ["solution"]}, "source": ANSWER,
                   "outputs": [], "execution_count": None}],
    }  # fmt: skip
    data.update(changes)
    return data


def _refusals(slug: str) -> list[tuple[str, int, str]]:
    r_kernel = {"kernelspec": {"name": "ir", "display_name": "R", "language": "R"}}
    untagged = [{"cell_type": "code", "id": "a1", "metadata": {}, "source": ANSWER, "outputs": [],
                 "execution_count": None}]  # fmt: skip
    markdown_tagged = [{"cell_type": "markdown", "id": "a1", "metadata": {"tags": ["solution"]}, "source": ANSWER}]
    empty = [{**untagged[0], "metadata": {"tags": ["solution"]}, "source": "  \n"}]
    magic = [{**untagged[0], "metadata": {"tags": ["solution"]}, "source": "%timeit add(1, 2)\n" + ANSWER}]
    many = [{**untagged[0], "id": f"c{i}"} for i in range(notebooks.MAX_CELLS + 1)]
    return [
        ("print('hello')", 422, "not JSON"),
        ("[1, 2]", 422, "no \"nbformat\" version"),
        (json.dumps({"nbformat": 4, "cells": []}), 422, "not valid nbformat 4"),
        (json.dumps(_notebook(nbformat=99)), 422, "the notebook is in nbformat 99; gpulab reads nbformat 4"),
        (json.dumps(_notebook(nbformat="4")), 422, 'the notebook\'s "nbformat" must be the number 4 (or 3), and it '
         "is the text '4'"),
        (json.dumps(_notebook())[:-40], 422, "this is not a complete notebook: its text stops in the middle"),
        (json.dumps(_notebook(cells={"a": 1})), 422, 'the notebook\'s "cells" must be a list of cell objects, and it '
         "is an object"),
        (json.dumps(_notebook(cells=["x"])), 422, "and it is a list holding a text"),
        (json.dumps(_notebook(metadata=r_kernel)), 422, "kernel runs 'R'"),
        (json.dumps(_notebook(metadata={"gpulab": {"exercise": "other-one", "version": 1}})), 422,
         f"for exercise 'other-one', not '{slug}'"),
        (json.dumps(_notebook(cells=untagged)), 422, "no code cell is tagged 'solution'"),
        (json.dumps(_notebook(cells=markdown_tagged)), 422, "no code cell is tagged 'solution'"),
        (json.dumps(_notebook(cells=empty)), 422, "are empty"),
        (json.dumps(_notebook(cells=magic)), 422, "line 1 of the solution cells is IPython"),
        (json.dumps(_notebook(cells=many)), 422, f"{notebooks.MAX_CELLS + 1} cells; at most"),
        (json.dumps(_notebook(metadata={"pad": "x" * notebooks.MAX_NOTEBOOK_BYTES})), 413,
         "; the limit is 4 MB. Outputs (plots, printed data) make a notebook large and are never graded: clear them"),
        ("[" * 100_000 + "]" * 100_000, 422, "not a notebook"),
    ]  # fmt: skip


def test_malformed_notebooks_are_refused_naming_the_problem_and_store_nothing(
    learner_client: TestClient, tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session
) -> None:
    before = _count(db_session)
    url = f"/api/exercises/{tiny_exercise.slug}/notebook-submissions"
    for text, status, reason in _refusals(tiny_exercise.slug):
        answer = learner_client.post(url, json={"notebook": text})
        assert answer.status_code == status, (text[:80], answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert reason in answer.json()["detail"], (reason, answer.json()["detail"])
    assert _count(db_session) == before and dispatcher.calls == []
    good = learner_client.post(url, json={"notebook": json.dumps(_notebook())})
    assert good.status_code == 202, good.text


def test_parser_words_never_reach_people_and_a_byte_order_mark_is_accepted(
    learner_client: TestClient, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    url = f"/api/exercises/{tiny_exercise.slug}/notebook-submissions"
    for text, _, _ in _refusals(tiny_exercise.slug):
        detail = learner_client.post(url, json={"notebook": text}).json()["detail"]
        for parser_words in ("Unterminated string", "at at line", "object has no attribute", "Unsupported nbformat"):
            assert parser_words not in detail, detail
    with_bom = learner_client.post(url, json={"notebook": "\ufeff" + json.dumps(_notebook())})
    assert with_bom.status_code == 202, with_bom.text
    row = db_session.get(Submission, with_bom.json()["id"])
    assert row is not None and row.code == ANSWER
    latin1 = b'{"notebook": "' + "caf\u00e9".encode("latin-1") + b'"}'
    not_utf8 = learner_client.post(url, content=latin1, headers={"Content-Type": "application/json"})
    assert not_utf8.status_code == 400 and "not text in UTF-8" in not_utf8.json()["detail"], not_utf8.text
    assert "error parsing the body" not in not_utf8.json()["detail"]


def test_a_notebook_too_large_for_the_body_limit_is_told_what_the_check_tells_a_smaller_one(
    learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    url = f"/api/exercises/{tiny_exercise.slug}/notebook-submissions"
    limit = notebooks.MAX_NOTEBOOK_BYTES
    huge = learner_client.post(url, json={"notebook": json.dumps(_notebook(metadata={"pad": "x" * 7 * limit}))})
    over = learner_client.post(url, json={"notebook": json.dumps(_notebook(metadata={"pad": "x" * (limit + 9)}))})
    assert huge.status_code == over.status_code == 413
    assert huge.json()["detail"] == humane.notebook_too_large(None, limit)  # the body limit's words ...
    text = json.dumps(_notebook(metadata={"pad": "x" * (limit + 9)}))
    assert over.json()["detail"] == humane.notebook_too_large(len(text), limit)  # ... are the check's
    assert "4 MB" in huge.json()["detail"] and "MiB" not in huge.json()["detail"]


def test_a_refused_notebook_costs_no_attempt_of_an_assignment(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, max_attempts=1)
    logout(client)
    login(client, learner)
    url = f"/api/exercises/{tiny_exercise.slug}/notebook-submissions"
    refused = client.post(url, json={"notebook": "{}", "assignment_id": made["id"]})
    assert refused.status_code == 422
    accepted = client.post(url, json={"notebook": json.dumps(_notebook()), "assignment_id": made["id"]})
    assert accepted.status_code == 202, accepted.text
    spent = client.post(url, json={"notebook": json.dumps(_notebook()), "assignment_id": made["id"]})
    assert spent.status_code == 403 and "no attempts left" in spent.json()["detail"]


def test_a_quiz_has_no_notebook_and_strangers_get_404_or_401(
    client: TestClient,
    learner: User,
    login: Callable[..., None],
    quiz: Exercise,  # noqa: F811
) -> None:
    login(client, learner)
    refused = client.get(f"/api/exercises/{quiz.slug}/notebook")
    assert refused.status_code == 422 and "not a code exercise" in refused.json()["detail"]
    assert client.get("/api/exercises/no-such-exercise/notebook").status_code == 404
    assert (
        client.post(
            f"/api/exercises/{quiz.slug}/notebook-submissions", json={"notebook": json.dumps(_notebook())}
        ).status_code
        == 422
    )
    logout(client)
    assert client.get(f"/api/exercises/{quiz.slug}/notebook").status_code == 401
