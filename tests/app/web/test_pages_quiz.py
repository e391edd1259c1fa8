"""The quiz page: accessible fieldsets per question, the self-assessment notice, and no key in the HTML."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from app.domain.models import Exercise
from tests.app.web.test_api_quiz import quiz  # noqa: F401  (fixture)

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def test_quiz_page_renders_questions_without_keys(learner_client: TestClient, quiz: Exercise) -> None:  # noqa: F811
    response = learner_client.get(f"/exercises/{quiz.slug}")
    assert response.status_code == 200
    html = response.text
    assert html.count("<fieldset") == 3 and html.count("<legend") == 3
    assert 'type="radio" name="q1" value="b"' in html and 'type="checkbox" name="q2" value="c"' in html
    assert 'id="answer-q3"' in html and "Practice, self-assessed" in html and 'maxlength="300"' in html
    assert "/static/quiz.js" in html and "Answer the <strong>questions</strong>." in html
    assert "SECRET-" not in html
