"""The learning path's format (``path.toml``): what it accepts, and each refusal naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import BANK
from worker.bank.learning_path import PATH_FILE, LearningPath, check_against, load_path, parse_path
from worker.bank.spec import load_bank
from worker.core.errors import ExerciseFormatError, PathFormatError

GOOD = """
[[module]]
slug = "basics"
title = "Basics"
why = "Start here."
exercises = ["split-one", "split-two"]

[[module]]
slug = "more"
title = "More"
why = "Then this."
exercises = ["more-one"]
requires = ["basics"]
"""


def module(slug: str, exercises: str, requires: str = "", extra: str = "") -> str:
    line = f"requires = [{requires}]\n" if requires else ""
    return f'[[module]]\nslug = "{slug}"\ntitle = "T {slug}"\nwhy = "Why."\nexercises = [{exercises}]\n{line}{extra}\n'


def problem(text: str) -> str:
    with pytest.raises(PathFormatError) as caught:
        parse_path(text)
    assert isinstance(caught.value, ExerciseFormatError)  # mapped like every format error (422 on upload paths)
    return caught.value.message


def test_a_good_path_keeps_order_and_round_trips_as_json() -> None:
    path = parse_path(GOOD)
    assert [m.slug for m in path.modules] == ["basics", "more"]
    assert path.modules[0].exercises == ("split-one", "split-two") and path.modules[1].requires == ("basics",)
    assert len(path.content_hash) == 64 and path.content_hash != parse_path(GOOD + "\n").content_hash
    assert LearningPath.from_json(path.as_json(), path.content_hash) == path


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (module("basics", '"Not_A_Slug"'), "module[0] ('basics').exercises[0] 'Not_A_Slug' is not a slug"),
        (module("basics", '"ab-cd"', extra='colour = "red"'), "module[0] ('basics').colour is not a known key"),
        ("off_path = []\nlevel = 1\n" + module("basics", '"ab-cd"'), "level is not a known key"),
        (module("basics", ""), "module[0] ('basics').exercises needs at least 1 entry (got 0)"),
        (module("basics", '"ab-cd"', extra="why = 3"), "path.toml is not valid TOML"),
        ('[[module]]\nslug = "basics"\ntitle = "B"\nexercises = ["ab-cd"]\n', "module[0] ('basics').why is required"),
        (module("basics", '"ab-cd"', '"basics"'), "requires names the module itself ('basics')"),
        (module("aaa", '"ab-cd"') + module("aaa", '"ef-gh"'), "two modules have the slug 'aaa'"),
        (module("aaa", '"ab-cd"', '"nope"'), "module[0] ('aaa').requires names 'nope', which is no module"),
        (module("aaa", '"ab-cd"', '"bbb"') + module("bbb", '"ef-gh"', '"aaa"'), "circle: aaa -> bbb -> aaa"),
        (module("aaa", '"ab-cd"', '"bbb"') + module("bbb", '"ef-gh"'), "requires 'bbb', which comes later in the file"),
        (module("aaa", '"ab-cd"') + module("bbb", '"ab-cd"'), "exercise 'ab-cd' is in modules 'aaa' and 'bbb'"),
        (module("aaa", '"ab-cd", "ab-cd"'), "exercises names 'ab-cd' twice"),
        ('off_path = ["ab-cd"]\n' + module("aaa", '"ab-cd"'), "off_path names 'ab-cd', which is in module 'aaa'"),
        ("off_path = []\n", "module is required"),
    ],
)
def test_refusals_name_the_file_and_the_field(text: str, says: str) -> None:
    message = problem(text)
    assert message.startswith(PATH_FILE) and says in message, message


def test_a_longer_cycle_is_named_whole() -> None:
    text = module("aaa", '"ab-cd"', '"ccc"') + module("bbb", '"ef-gh"', '"aaa"') + module("ccc", '"ij-kl"', '"bbb"')
    assert "aaa -> ccc -> bbb -> aaa" in problem(text)


def test_against_the_bank_every_slug_exists_and_every_exercise_is_placed() -> None:
    path = parse_path(GOOD)
    check_against(path, ["split-one", "split-two", "more-one"])
    unknown = r"module\[1\] \('more'\)\.exercises names 'more-one', which is no exercise"
    with pytest.raises(PathFormatError, match=unknown):
        check_against(path, ["split-one", "split-two"])
    with pytest.raises(PathFormatError, match="'lonely' is in no module; add each to a module's exercises or to"):
        check_against(path, ["split-one", "split-two", "more-one", "lonely"])
    check_against(parse_path('off_path = ["lonely"]\n' + GOOD), ["split-one", "split-two", "more-one", "lonely"])
    with pytest.raises(PathFormatError, match="off_path names 'gone', which is no exercise of the bank"):
        check_against(parse_path('off_path = ["gone"]\n' + GOOD), ["split-one", "split-two", "more-one"])


def test_a_bank_without_a_path_has_none(tmp_path: Path) -> None:
    assert load_path(tmp_path, ["split-one"]) is None
    (tmp_path / PATH_FILE).write_text(GOOD, encoding="utf-8")
    loaded = load_path(tmp_path, ["split-one", "split-two", "more-one"])
    assert loaded is not None and loaded.content_hash == parse_path(GOOD).content_hash


def test_the_banks_path_places_every_exercise_once() -> None:
    slugs = [s.slug for s in load_bank(BANK)]
    path = load_path(BANK, slugs)
    assert path is not None
    placed = [s for m in path.modules for s in m.exercises] + list(path.off_path)
    assert sorted(placed) == sorted(slugs)
    assert all(len(m.why) <= 200 for m in path.modules)
