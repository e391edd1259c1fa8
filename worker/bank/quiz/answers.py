"""Checking a quiz attempt's answers before they are graded or stored.

Contract:
- ``check_answers`` turns a request's ``{question id: [option ids] | text}`` into a canonical mapping (choices
  sorted and without repeats, text as sent, questions in id order) or raises ``InvalidInput`` (unknown question
  or option, wrong shape, more than one pick for a single-choice question, text too long or with a NUL
  character, nothing answered).
- ``canonical_json`` is the stored form of canonical answers: the same answers always give the same text.
"""

from __future__ import annotations

import json
from typing import Any

from worker.bank.quiz.format import Quiz, SingleQuestion, TextQuestion
from worker.core.errors import InvalidInput


def check_answers(quiz: Quiz, answers: dict[str, Any]) -> dict[str, list[str] | str]:
    """Return the answers in canonical form (choices sorted, text as sent); raise ``InvalidInput`` if malformed."""
    questions = quiz.by_id()
    unknown = sorted(set(answers) - set(questions))
    if unknown:
        raise InvalidInput(f"unknown question(s): {', '.join(unknown)}; this quiz has {', '.join(questions)}")
    canonical: dict[str, list[str] | str] = {}
    for qid, value in answers.items():
        question = questions[qid]
        if isinstance(question, TextQuestion):
            if not isinstance(value, str):
                raise InvalidInput(f"question {qid} takes a text answer (a string)")
            if len(value) > question.max_chars:
                raise InvalidInput(f"the answer to {qid} is longer than {question.max_chars} characters; shorten it")
            if "\x00" in value:
                raise InvalidInput(f"the answer to {qid} contains a NUL character")
            canonical[qid] = value
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(f'question {qid} takes a list of option ids, e.g. ["a"]')
        picked = sorted(set(value))
        valid = [o.id for o in question.options]
        bad = [v for v in picked if v not in valid]
        if bad:
            raise InvalidInput(f"question {qid} has no option {bad[0]!r}; its options are {', '.join(valid)}")
        if isinstance(question, SingleQuestion) and len(picked) > 1:
            raise InvalidInput(f"question {qid} takes exactly one option, not {len(picked)}")
        canonical[qid] = picked
    if not any(v.strip() if isinstance(v, str) else v for v in canonical.values()):
        raise InvalidInput("answer at least one question")
    return dict(sorted(canonical.items()))


def canonical_json(answers: dict[str, list[str] | str]) -> str:
    """Return the stored form of an attempt's answers."""
    return json.dumps(answers, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
