"""The blind corpora's coverage table in exercises/README.md says what the folders hold, exercise by exercise."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import BANK

START, END = "<!-- blind-corpus:start -->", "<!-- blind-corpus:end -->"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$")


def counts(folder: Path) -> tuple[int, int, int, int]:
    """Return the kept blind cases of ``folder``: (pass 1 wrong, pass 1 right, pass 2 wrong, pass 2 right)."""

    def n(kind: str, prefix: str) -> int:
        return len(list((folder / kind).glob(f"{prefix}_*.py"))) if (folder / kind).is_dir() else 0

    return n("wrong", "blind1"), n("right", "blind1"), n("wrong", "blind2"), n("right", "blind2")


def code_exercises() -> list[Path]:
    quiz = re.compile(r'^kind\s*=\s*"quiz"', re.M)
    return sorted(
        d
        for d in BANK.iterdir()
        if (d / "exercise.toml").is_file() and not quiz.search((d / "exercise.toml").read_text())
    )


def render() -> str:
    """Return the table as exercises/README.md holds it (``python -m tests.exercises.test_blind_corpus``)."""
    rows = [
        "| Exercise | Pass 1 wrong | Pass 1 right | Pass 2 wrong | Pass 2 right |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    rows += ["| `{}` | {} | {} | {} | {} |".format(d.name, *counts(d)) for d in code_exercises()]
    return "\n".join(rows)


def test_the_coverage_table_matches_the_folders() -> None:
    text = (BANK / "README.md").read_text()
    table = text.split(START, 1)[1].split(END, 1)[0]
    rows = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for line in table.splitlines() if (m := ROW.match(line))}
    expected = {d.name: counts(d) for d in code_exercises()}
    assert rows == expected, "update exercises/README.md's blind-corpus table (tests/exercises/test_blind_corpus.py)"


def test_every_blind_wrong_case_is_declared_with_the_feedback_that_names_its_cause() -> None:
    from worker.bank.spec import load_exercise

    for folder in code_exercises():
        blind = (
            {f"wrong/{p.name}" for p in (folder / "wrong").glob("blind*_*.py")}
            if (folder / "wrong").is_dir()
            else set()
        )
        declared = {w.path: w for w in load_exercise(folder).wrong}
        for path in sorted(blind):
            assert path in declared, f"{folder.name}: {path} is not declared in [[wrong]]"
            assert declared[path].feedback, f"{folder.name}: {path} names no feedback fragment"


if __name__ == "__main__":
    readme = BANK / "README.md"
    head, rest = readme.read_text().split(START, 1)
    readme.write_text(head + START + "\n" + render() + "\n" + END + rest.split(END, 1)[1])
    print(render())
