"""The coverage table of ``exercises/README.md`` names only exercises and questions that exist."""

from __future__ import annotations

import re

from tests.support import BANK
from worker.bank.quiz.format import parse_quiz
from worker.bank.spec import load_bank

REF_RE = re.compile(r"`([a-z0-9-]+)(?:::([a-z0-9_-]+))?`")


def _coverage_rows() -> list[str]:
    text = (BANK / "README.md").read_text(encoding="utf-8")
    section = text.split("## Coverage of the study cards", 1)[1]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Card item")]


def test_every_reference_in_the_coverage_table_exists() -> None:
    specs = {s.slug: s for s in load_bank(BANK)}
    questions = {
        slug: {q.id for q in parse_quiz(slug, s.files["quiz.toml"]).questions}
        for slug, s in specs.items()
        if s.kind == "quiz"
    }
    rows = _coverage_rows()
    assert len(rows) >= 30, "both cards' items should be listed"
    problems = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        taught_by = cells[-1]
        if "(planned)" in taught_by:
            continue
        refs = REF_RE.findall(taught_by)
        if not refs:
            problems.append(f"row without an exercise: {row}")
        for slug, qid in refs:
            if slug not in specs:
                problems.append(f"{slug} is not an exercise ({cells[0]})")
            elif qid and qid not in questions.get(slug, set()):
                problems.append(f"{slug} has no question {qid} ({cells[0]})")
    assert not problems, "\n".join(problems)


def test_every_quiz_question_is_cited() -> None:
    cited = set(REF_RE.findall("\n".join(_coverage_rows())))
    missing = [
        f"{s.slug}::{q.id}"
        for s in load_bank(BANK)
        if s.kind == "quiz"
        for q in parse_quiz(s.slug, s.files["quiz.toml"]).questions
        if (s.slug, q.id) not in cited
    ]
    assert not missing, f"questions not linked to a card item: {missing}"
