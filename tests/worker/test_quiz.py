"""Reading, validating and grading ``quiz.toml`` (pure, no database, no sandbox)."""

from __future__ import annotations

import json

import pytest

from worker.bank.quiz.answers import canonical_json, check_answers
from worker.bank.quiz.format import Quiz, parse_quiz
from worker.bank.quiz.grading import count_words, grade
from worker.bank.spec import ExerciseSpec
from worker.core.errors import ExerciseFormatError, InvalidInput

GOOD = """
pass_percent = 75

[[question]]
id = "one"
type = "single"
prompt = "Pick b."
options = [{ id = "a", text = "A" }, { id = "b", text = "B" }, { id = "c", text = "C" }]
answer = ["b"]
explanation = "EXPLAIN-ONE"
hint = "HINT-ONE"
common_mistakes = ["MISTAKE-ONE"]
[question.feedback]
a = "FEEDBACK-A"

[[question]]
id = "many"
type = "multiple"
points = 2
prompt = "Pick a and b."
options = [{ id = "a", text = "A" }, { id = "b", text = "B" }, { id = "c", text = "C" }, { id = "d", text = "D" }]
answer = ["a", "b"]
explanation = "EXPLAIN-MANY"

[[question]]
id = "words"
type = "text"
min_words = 6
max_chars = 200
prompt = "Explain."
model_answer = "MODEL-ANSWER"
grading = "self"
rubric = ["RUBRIC-1"]

[[question]]
id = "prog"
type = "single"
prompt = "What is printed?"
options = [{ id = "a", text = "[4, 4, 2]" }, { id = "b", text = "[4, 3, 3]" }]
answer = ["a"]
explanation = "EXPLAIN-PROG"
[question.program]
framework = "python"
source = "print([4, 4, 2])"
expected_output = "[4, 4, 2]"
"""


@pytest.fixture
def quiz() -> Quiz:
    return parse_quiz("q", GOOD)


def test_parses_questions_points_and_pass_mark(quiz: Quiz) -> None:
    assert [q.id for q in quiz.questions] == ["one", "many", "words", "prog"]
    assert quiz.max_score == 5.0 and quiz.pass_percent == 75.0
    assert quiz.questions[3].program is not None and quiz.questions[3].shown_code == "print([4, 4, 2])\n"


def test_public_view_has_no_keys_or_explanations(quiz: Quiz) -> None:
    text = json.dumps(quiz.public())
    for secret in ("EXPLAIN", "HINT", "MISTAKE", "FEEDBACK", "MODEL-ANSWER", "RUBRIC", '"answer"', "expected_output"):
        assert secret not in text, secret
    assert quiz.public()[0]["options"][1] == {"id": "b", "text": "B", "code": False}


def _broken(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (_broken('id = "many"', 'id = "one"'), "used twice"),
        (_broken('answer = ["b"]', 'answer = ["z"]'), "must name distinct options"),
        (_broken('answer = ["b"]', 'answer = ["a", "b"]'), "('one').answer takes at most 1 entry (got 2)"),
        (_broken('answer = ["a", "b"]', "answer = []"), "('many').answer needs at least 1 entry (got 0)"),
        (_broken('explanation = "EXPLAIN-ONE"', ""), "('one').explanation is required"),
        (
            _broken('{ id = "c", text = "C" }]\nanswer = ["b"]', '{ id = "b", text = "C" }]\nanswer = ["b"]'),
            "options use the option id 'b' twice",
        ),
        (
            _broken('{ id = "a", text = "A" }, { id = "b"', '{ id = "A!", text = "A" }, { id = "b"'),
            "options[0].id must be 1-8 of a-z, 0-9 (got 'A!')",
        ),
        (
            _broken('type = "single"', 'type = "essay"'),
            "type must be one of 'single', 'multiple', 'text' (got 'essay')",
        ),
        (_broken('id = "one"', 'id = "Bad Id"'), "question[0].id must be 1-32 of a-z"),
        (_broken('a = "FEEDBACK-A"', 'x = "FEEDBACK-X"'), "feedback names unknown options"),
        (_broken('rubric = ["RUBRIC-1"]', ""), "('words').rubric is required"),
        (_broken('rubric = ["RUBRIC-1"]', "rubric = []"), "('words').rubric needs at least 1 entry"),
        (_broken('model_answer = "MODEL-ANSWER"', 'model_answer = "  "'), "('words').model_answer must not be empty"),
        (
            _broken('expected_output = "[4, 4, 2]"', 'expected_output = "[4, 3, 3]"'),
            "must equal program.expected_output",
        ),
        (_broken('framework = "python"', 'framework = "jax"'), "program.framework"),
        (_broken("pass_percent = 75", "pass_percent = 0"), "pass_percent"),
        (_broken("pass_percent = 75", "passmark = 75"), "quiz.toml: passmark is not a known key"),
        (_broken('hint = "HINT-ONE"', 'hnt = "HINT-ONE"'), "question[0] ('one').hnt is not a known key"),
        (_broken("points = 2", "points = -1"), "('many').points must be above 0 (got -1)"),
        (_broken("min_words = 6", 'min_words = "six"'), "('words').min_words must be a whole number (got 'six')"),
        (
            _broken('prompt = "Pick b."', 'prompt = "Pick b."\nmin_words = 3'),
            "single question, so it takes no min_words",
        ),
        (_broken('prompt = "Pick a and b."', 'prompt = "Pick a and b."\nprogram = {}'), "takes no program"),
        (_broken('prompt = "What is printed?"', 'prompt = "What is printed?"\ncode = "x = 1"'), "leave out code"),
        ("pass_percent = 50\n", "quiz.toml: question is required"),
        ("question = 'one'\n", "quiz.toml: question must be a list"),
        ("[[question]\n", "not valid TOML"),
    ],
)
def test_rejects_malformed_quizzes_with_a_message(text: str, problem: str) -> None:
    with pytest.raises(ExerciseFormatError) as caught:
        parse_quiz("bad-quiz", text)
    assert problem in caught.value.message


def test_text_questions_refuse_choice_keys() -> None:
    text = _broken("min_words = 6", 'min_words = 6\nanswer = ["a"]')
    with pytest.raises(ExerciseFormatError) as caught:
        parse_quiz("bad-quiz", text)
    assert caught.value.message == (
        "exercise 'bad-quiz': quiz.toml: question[2] ('words') is a text question, so it takes no answer "
        "(a key of single and multiple questions)"
    )


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("points = 2", 'points = "2"', "('many').points must be a number (got '2')"),
        ("points = 2", "points = true", "('many').points must be a number (got true)"),
        ("min_words = 6", "min_words = 6.0", "('words').min_words must be a whole number (got 6.0)"),
        (
            '{ id = "c", text = "C" }]\nanswer = ["b"]',
            '{ id = "c", text = "C", code = 1 }]\nanswer = ["b"]',
            "options[2].code must be true or false (got 1)",
        ),
        ('[question.feedback]\na = "FEEDBACK-A"', "feedback = 3", "('one').feedback must be a table (got 3)"),
    ],
)
def test_values_keep_their_toml_types(old: str, new: str, problem: str) -> None:
    with pytest.raises(ExerciseFormatError) as caught:
        parse_quiz("bad-quiz", _broken(old, new))
    assert problem in caught.value.message


def test_every_problem_is_named_in_one_message() -> None:
    text = _broken('prompt = "Pick b."', 'prompt = " "').replace("points = 2", "points = 0")
    with pytest.raises(ExerciseFormatError) as caught:
        parse_quiz("bad-quiz", text)
    assert caught.value.message == (
        "exercise 'bad-quiz': quiz.toml: question[0] ('one').prompt must not be empty (got ' '); "
        "question[1] ('many').points must be above 0 (got 0)"
    )
    many = "\n".join(f'[[question]]\nid = "q{i}"\ntype = "text"\nprompt = "P"\nrubric = ["R"]' for i in range(7))
    with pytest.raises(ExerciseFormatError) as caught:
        parse_quiz("bad-quiz", many)
    assert caught.value.message.count("model_answer is required") == 5 and caught.value.message.endswith("and 2 more")


def test_a_bad_option_is_not_also_reported_as_too_few_options() -> None:
    text = _broken(
        'options = [{ id = "a", text = "A" }, { id = "b", text = "B" }, { id = "c", text = "C" }]', "options = [1, 2]"
    )
    with pytest.raises(ExerciseFormatError) as caught:
        parse_quiz("bad-quiz", text)
    assert "needs at least" not in caught.value.message
    assert "options[0] must be a table (got 1); question[0] ('one').options[1] must be a table" in caught.value.message


def test_text_is_stripped_and_a_program_source_ends_a_line() -> None:
    quiz = parse_quiz("q", _broken('prompt = "Pick b."', 'prompt = "  Pick b.  "'))
    assert quiz.questions[0].prompt == "Pick b."
    program = quiz.questions[3].program
    assert program is not None and program.source == "print([4, 4, 2])\n" and program.setup == ""
    assert quiz.questions[1].program is None and quiz.questions[2].program is None


def test_spec_loads_a_quiz_folder_and_counts_its_points() -> None:
    files = {"exercise.toml": 'title = "Q"\nkind = "quiz"\n', "prompt.md": "Hi", "quiz.toml": GOOD}
    spec = ExerciseSpec.from_files("my-quiz", files)
    assert spec.kind == "quiz" and spec.max_score == 5.0
    assert [t.id for t in spec.tests] == ["one", "many", "words", "prog"]
    with pytest.raises(ExerciseFormatError, match=r"quiz\.toml is missing"):
        ExerciseSpec.from_files("my-quiz", {k: v for k, v in files.items() if k != "quiz.toml"})


# ---- answers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "problem"),
    [
        ({"nope": ["a"]}, "unknown question(s): nope"),
        ({"one": ["z"]}, "has no option 'z'"),
        ({"one": ["a", "b"]}, "exactly one option"),
        ({"one": "a"}, "takes a list of option ids"),
        ({"words": ["a"]}, "takes a text answer"),
        ({"words": "x" * 201}, "longer than 200 characters"),
        ({"words": "a\x00b"}, "NUL"),
        ({}, "answer at least one question"),
        ({"one": [], "words": "   "}, "answer at least one question"),
    ],
)
def test_check_answers_refuses_malformed_answers(quiz: Quiz, answers: dict, problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_answers(quiz, answers)
    assert problem in caught.value.message


def test_canonical_answers_are_sorted_and_deduplicated(quiz: Quiz) -> None:
    canonical = check_answers(quiz, {"many": ["b", "a", "b"], "one": ["b"]})
    assert canonical == {"many": ["a", "b"], "one": ["b"]}
    assert canonical_json(canonical) == '{"many":["a","b"],"one":["b"]}'


def _result(quiz: Quiz, answers: dict, qid: str):
    return next(r for r in grade(quiz, check_answers(quiz, answers)).questions if r.id == qid)


def test_single_choice_is_all_or_nothing(quiz: Quiz) -> None:
    right = _result(quiz, {"one": ["b"]}, "one")
    assert (right.correct, right.score, right.explanation) == (True, 1.0, "EXPLAIN-ONE")
    wrong = _result(quiz, {"one": ["a"]}, "one")
    assert (wrong.correct, wrong.score) == (False, 0.0)
    assert "FEEDBACK-A" in wrong.feedback and wrong.explanation == "EXPLAIN-ONE"
    assert wrong.hint == "HINT-ONE" and wrong.common_mistakes == ["MISTAKE-ONE"]


@pytest.mark.parametrize(
    ("picked", "score", "correct"),
    [
        (["a", "b"], 2.0, True),
        (["a"], 1.0, False),  # one of two keyed options: half the points
        (["a", "c"], 0.0, False),  # one right, one wrong: they cancel
        (["a", "b", "c"], 1.0, False),
        (["a", "b", "c", "d"], 0.0, False),  # ticking everything earns nothing
        (["c"], 0.0, False),  # never below zero
    ],
)
def test_multiple_choice_partial_credit(quiz: Quiz, picked: list[str], score: float, correct: bool) -> None:
    result = _result(quiz, {"many": picked}, "many")
    assert (result.score, result.correct) == (score, correct)


def test_text_is_complete_only_with_enough_different_words(quiz: Quiz) -> None:
    short = _result(quiz, {"words": "too short really"}, "words")
    assert (short.correct, short.score, short.model_answer, short.rubric) == (False, 0.0, None, [])
    assert "at least 6 words" in short.feedback
    padded = _result(quiz, {"words": "word word word word word word word"}, "words")
    assert not padded.correct, "repeating one word is not a substantive answer"
    digits = _result(quiz, {"words": "1 2 3 4 5 6 7 8"}, "words")
    assert not digits.correct
    done = _result(quiz, {"words": "Each GPU holds the whole model and a slice."}, "words")
    assert (done.correct, done.score, done.model_answer, done.rubric) == (True, 1.0, "MODEL-ANSWER", ["RUBRIC-1"])
    assert "self-assessed" in done.feedback.lower()


def test_unanswered_questions_get_no_explanation(quiz: Quiz) -> None:
    result = grade(quiz, check_answers(quiz, {"one": ["b"]}))
    skipped = {r.id: r for r in result.questions}["many"]
    assert (skipped.answered, skipped.score, skipped.explanation) == (False, 0.0, None)


def test_pass_mark(quiz: Quiz) -> None:
    text = "Each GPU holds the whole model and a slice."
    full = grade(quiz, check_answers(quiz, {"one": ["b"], "many": ["a", "b"], "words": text, "prog": ["a"]}))
    assert (full.score, full.max_score, full.passed) == (5.0, 5.0, True)
    almost = grade(quiz, check_answers(quiz, {"one": ["b"], "many": ["a"], "words": text, "prog": ["a"]}))
    assert (almost.score, almost.passed) == (4.0, True)  # 4 / 5 = 80% >= 75%
    low = grade(quiz, check_answers(quiz, {"one": ["b"], "many": ["a", "b"]}))
    assert (low.score, low.passed) == (3.0, False)


def test_count_words_ignores_numbers_and_punctuation() -> None:
    assert count_words("It's 2 GPUs -- all-reduce, all-reduce!") == (4, 3)
