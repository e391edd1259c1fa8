"""Quiz exercises: read and check ``quiz.toml``, show its questions without keys, check and grade answers.

Contract (authors' guide: "Quiz format" in ``exercises/README.md``):
- ``parse_quiz(slug, text)`` returns a ``Quiz`` or raises ``ExerciseFormatError`` naming the question and the
  problem. It is pure: standard library only, nothing is run (programs are run by the test suite, never here).
- ``Quiz.public()`` is the only view of a quiz that may reach a learner before answering: ids, types, prompts,
  code, options and limits. Keys, explanations, hints, mistakes, model answers and rubrics stay out of it.
- ``check_answers`` turns a request's ``{question id: [option ids] | text}`` into a canonical mapping or raises
  ``InvalidInput`` (unknown question or option, wrong shape, text too long, nothing answered).
- ``grade`` scores a canonical mapping. Rules, per question worth ``points``:
  - ``single``: all points for the keyed option, else none.
  - ``multiple``: ``points * max(0, right picks - wrong picks) / number of keyed options``; it counts as correct
    only when the picks are exactly the key. Picking everything therefore earns nothing unless all are keyed.
  - ``text``: self-assessed. All points once the answer has ``min_words`` words with letters in them, at least
    half of them different; only then are the model answer and the rubric returned, so an empty answer never
    unlocks them.
  - an unanswered question scores 0 and gets only its hint: its explanation would give the key away.
  The attempt passes when its score is at least ``pass_percent`` of the maximum.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from worker.core.errors import ExerciseFormatError, InvalidInput

QUESTION_TYPES = ("single", "multiple", "text")
PROGRAM_FRAMEWORKS = ("python", "torch", "tensorflow")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
OPTION_ID_RE = re.compile(r"^[a-z0-9]{1,8}$")
WORD_RE = re.compile(r"[^\W\d_][\w'\u2019-]*")
DEFAULT_PASS_PERCENT = 80.0
DEFAULT_MIN_WORDS = 25
DEFAULT_MAX_CHARS = 4000
MAX_CHARS_LIMIT = 20000

_TOP_KEYS = {"pass_percent", "question"}
_QUESTION_KEYS = {
    "id", "type", "prompt", "code", "points", "options", "answer", "explanation", "hint", "common_mistakes",
    "feedback", "min_words", "max_chars", "model_answer", "rubric", "program",
}  # fmt: skip
_PROGRAM_KEYS = {"framework", "source", "expected_output", "setup", "check"}


@dataclass(frozen=True)
class Option:
    id: str
    text: str
    code: bool = False


@dataclass(frozen=True)
class Program:
    """A program whose printed output is the key; CI runs ``setup + source + check`` and compares stdout."""

    framework: str
    source: str
    expected_output: str
    setup: str = ""
    check: str = ""


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    prompt: str
    points: float
    explanation: str
    code: str = ""
    options: tuple[Option, ...] = ()
    answer: tuple[str, ...] = ()
    hint: str = ""
    common_mistakes: tuple[str, ...] = ()
    feedback: dict[str, str] = field(default_factory=dict)
    min_words: int = DEFAULT_MIN_WORDS
    max_chars: int = DEFAULT_MAX_CHARS
    model_answer: str = ""
    rubric: tuple[str, ...] = ()
    program: Program | None = None

    @property
    def shown_code(self) -> str:
        """Return the code learners see: the program itself for a program question."""
        return self.program.source if self.program else self.code

    def public(self) -> dict[str, Any]:
        """Return what a learner may see before answering."""
        view: dict[str, Any] = {"id": self.id, "type": self.type, "prompt": self.prompt, "code": self.shown_code}
        view["points"] = self.points
        view["options"] = [{"id": o.id, "text": o.text, "code": o.code} for o in self.options]
        view["min_words"] = self.min_words if self.type == "text" else None
        view["max_chars"] = self.max_chars if self.type == "text" else None
        return view


@dataclass(frozen=True)
class Quiz:
    questions: tuple[Question, ...]
    pass_percent: float = DEFAULT_PASS_PERCENT

    @property
    def max_score(self) -> float:
        return float(sum(q.points for q in self.questions))

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}

    def public(self) -> list[dict[str, Any]]:
        return [q.public() for q in self.questions]


@dataclass(frozen=True)
class QuestionResult:
    id: str
    answered: bool
    correct: bool
    score: float
    max_score: float
    feedback: str
    explanation: str | None
    hint: str | None
    common_mistakes: list[str]
    model_answer: str | None = None
    rubric: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QuizResult:
    score: float
    max_score: float
    passed: bool
    questions: list[QuestionResult]


# ---- reading quiz.toml -------------------------------------------------------------------------------------


def _text(slug: str, where: str, raw: dict[str, Any], key: str, *, required: bool) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ExerciseFormatError(slug, f"quiz.toml {where}: {key} must be a non-empty string")
    return value.strip()


def _texts(slug: str, where: str, raw: dict[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ExerciseFormatError(slug, f"quiz.toml {where}: {key} must be a list of non-empty strings")
    return tuple(v.strip() for v in value)


def _int(slug: str, where: str, raw: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: {key} must be a whole number from {low} to {high}")
    return value


def _options(slug: str, where: str, raw: dict[str, Any]) -> tuple[Option, ...]:
    entries = raw.get("options")
    if not isinstance(entries, list) or len(entries) < 2:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: a choice question needs at least 2 options")
    options: list[Option] = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {"id", "text", "code"}:
            raise ExerciseFormatError(slug, f"quiz.toml {where}: each option is a table of id, text and code")
        option_id = entry.get("id")
        if not isinstance(option_id, str) or not OPTION_ID_RE.match(option_id):
            raise ExerciseFormatError(slug, f"quiz.toml {where}: option id {option_id!r} must be 1-8 of a-z, 0-9")
        if option_id in {o.id for o in options}:
            raise ExerciseFormatError(slug, f"quiz.toml {where}: option id {option_id!r} is used twice")
        text = _text(slug, f"{where} option {option_id}", entry, "text", required=True)
        options.append(Option(id=option_id, text=text, code=bool(entry.get("code", False))))
    return tuple(options)


def _program(slug: str, where: str, raw: Any) -> Program:
    if not isinstance(raw, dict) or set(raw) - _PROGRAM_KEYS:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: program takes only {', '.join(sorted(_PROGRAM_KEYS))}")
    framework = raw.get("framework")
    if framework not in PROGRAM_FRAMEWORKS:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: program.framework must be one of {PROGRAM_FRAMEWORKS}")
    return Program(
        framework=framework,
        source=_text(slug, where, raw, "source", required=True) + "\n",
        expected_output=_text(slug, where, raw, "expected_output", required=True),
        setup=_text(slug, where, raw, "setup", required=False),
        check=_text(slug, where, raw, "check", required=False),
    )


def _question(slug: str, index: int, raw: Any, seen: set[str]) -> Question:
    where = f"question {index + 1}"
    if not isinstance(raw, dict):
        raise ExerciseFormatError(slug, f"quiz.toml {where} must be a table")
    unknown = set(raw) - _QUESTION_KEYS
    if unknown:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: unknown key(s) {', '.join(sorted(unknown))}")
    qid = raw.get("id")
    if not isinstance(qid, str) or not ID_RE.match(qid):
        raise ExerciseFormatError(slug, f"quiz.toml {where}: id {qid!r} must be 1-32 of a-z, 0-9, '-', '_'")
    if qid in seen:
        raise ExerciseFormatError(slug, f"quiz.toml: question id {qid!r} is used twice")
    seen.add(qid)
    where = f"question {qid!r}"
    qtype = raw.get("type")
    if qtype not in QUESTION_TYPES:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: type must be one of {', '.join(QUESTION_TYPES)}")
    points = raw.get("points", 1)
    if isinstance(points, bool) or not isinstance(points, int | float) or not 0 < points <= 100:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: points must be a number above 0 and at most 100")
    common = {
        "id": qid,
        "type": qtype,
        "prompt": _text(slug, where, raw, "prompt", required=True),
        "points": float(points),
        "code": _text(slug, where, raw, "code", required=False),
        "hint": _text(slug, where, raw, "hint", required=False),
        "common_mistakes": _texts(slug, where, raw, "common_mistakes"),
    }
    if qtype == "text":
        for key in ("options", "answer", "feedback", "program"):
            if key in raw:
                raise ExerciseFormatError(slug, f"quiz.toml {where}: a text question has no {key}")
        rubric = _texts(slug, where, raw, "rubric")
        if not rubric:
            raise ExerciseFormatError(slug, f"quiz.toml {where}: a text question needs a rubric (self-check list)")
        return Question(
            **common,
            explanation=_text(slug, where, raw, "explanation", required=False),
            min_words=_int(slug, where, raw, "min_words", DEFAULT_MIN_WORDS, 1, 500),
            max_chars=_int(slug, where, raw, "max_chars", DEFAULT_MAX_CHARS, 100, MAX_CHARS_LIMIT),
            model_answer=_text(slug, where, raw, "model_answer", required=True),
            rubric=rubric,
        )
    for key in ("min_words", "max_chars", "model_answer", "rubric"):
        if key in raw:
            raise ExerciseFormatError(slug, f"quiz.toml {where}: {key} belongs to text questions only")
    options = _options(slug, where, raw)
    ids = [o.id for o in options]
    answer = raw.get("answer")
    if not isinstance(answer, list) or not answer or not all(isinstance(a, str) for a in answer):
        raise ExerciseFormatError(slug, f"quiz.toml {where}: answer must be a non-empty list of option ids")
    if len(set(answer)) != len(answer) or set(answer) - set(ids):
        raise ExerciseFormatError(slug, f"quiz.toml {where}: answer {answer} must name distinct options of {ids}")
    if qtype == "single" and len(answer) != 1:
        raise ExerciseFormatError(slug, f"quiz.toml {where}: a single-choice question has exactly one answer")
    feedback = raw.get("feedback", {})
    if not isinstance(feedback, dict) or not all(isinstance(v, str) for v in feedback.values()):
        raise ExerciseFormatError(slug, f"quiz.toml {where}: feedback maps option ids to strings")
    if set(feedback) - set(ids):
        unknown_ids = sorted(set(feedback) - set(ids))
        raise ExerciseFormatError(slug, f"quiz.toml {where}: feedback names unknown options {unknown_ids}")
    program = _program(slug, where, raw["program"]) if "program" in raw else None
    if program is not None:
        if qtype != "single" or common["code"]:
            raise ExerciseFormatError(slug, f"quiz.toml {where}: a program question is single-choice without code")
        keyed = next(o for o in options if o.id == answer[0])
        if keyed.text != program.expected_output:
            raise ExerciseFormatError(
                slug, f"quiz.toml {where}: the keyed option's text must equal program.expected_output"
            )
    return Question(
        **common,
        explanation=_text(slug, where, raw, "explanation", required=True),
        options=options,
        answer=tuple(answer),
        feedback={k: v.strip() for k, v in feedback.items()},
        program=program,
    )


def parse_quiz(slug: str, text: str) -> Quiz:
    """Read a ``quiz.toml`` text; raise ``ExerciseFormatError`` on any problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExerciseFormatError(slug, f"quiz.toml is not valid TOML: {exc}") from exc
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ExerciseFormatError(slug, f"quiz.toml: unknown key(s) {', '.join(sorted(unknown))}")
    pass_percent = raw.get("pass_percent", DEFAULT_PASS_PERCENT)
    if isinstance(pass_percent, bool) or not isinstance(pass_percent, int | float) or not 0 < pass_percent <= 100:
        raise ExerciseFormatError(slug, "quiz.toml: pass_percent must be a number above 0 and at most 100")
    entries = raw.get("question")
    if not isinstance(entries, list) or not entries:
        raise ExerciseFormatError(slug, "quiz.toml needs at least one [[question]]")
    seen: set[str] = set()
    questions = tuple(_question(slug, i, entry, seen) for i, entry in enumerate(entries))
    return Quiz(questions=questions, pass_percent=float(pass_percent))


# ---- answers -----------------------------------------------------------------------------------------------


def check_answers(quiz: Quiz, answers: dict[str, Any]) -> dict[str, list[str] | str]:
    """Return the answers in canonical form (choices sorted, text as sent); raise ``InvalidInput`` if malformed."""
    questions = quiz.by_id()
    unknown = sorted(set(answers) - set(questions))
    if unknown:
        raise InvalidInput(f"unknown question(s): {', '.join(unknown)}; this quiz has {', '.join(questions)}")
    canonical: dict[str, list[str] | str] = {}
    for qid, value in answers.items():
        question = questions[qid]
        if question.type == "text":
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
        if question.type == "single" and len(picked) > 1:
            raise InvalidInput(f"question {qid} takes exactly one option, not {len(picked)}")
        canonical[qid] = picked
    if not any(v.strip() if isinstance(v, str) else v for v in canonical.values()):
        raise InvalidInput("answer at least one question")
    return dict(sorted(canonical.items()))


def canonical_json(answers: dict[str, list[str] | str]) -> str:
    """Return the stored form of an attempt's answers."""
    return json.dumps(answers, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def count_words(text: str) -> tuple[int, int]:
    """Return (words, distinct words) of ``text``, counting only tokens that contain a letter."""
    words = [w.lower() for w in WORD_RE.findall(text)]
    return len(words), len(set(words))


def _choice_score(question: Question, picked: list[str]) -> float:
    key = set(question.answer)
    if question.type == "single":
        return question.points if set(picked) == key else 0.0
    hits = len(key & set(picked))
    misses = len(set(picked) - key)
    return question.points * max(0, hits - misses) / len(key)


def _grade_choice(question: Question, picked: list[str]) -> QuestionResult:
    score = _choice_score(question, picked)
    correct = set(picked) == set(question.answer)
    if correct:
        verdict = "Correct."
    elif score > 0:
        verdict = f"Partly right: {score:g} of {question.points:g} points. Some picks are missing or wrong."
    else:
        verdict = "Not right."
    notes = [question.feedback[p] for p in picked if p in question.feedback]
    return QuestionResult(
        id=question.id,
        answered=True,
        correct=correct,
        score=score,
        max_score=question.points,
        feedback="\n".join([verdict, *notes]),
        explanation=question.explanation,
        hint=question.hint or None,
        common_mistakes=list(question.common_mistakes),
    )


def _grade_text(question: Question, text: str) -> QuestionResult:
    words, distinct = count_words(text)
    complete = words >= question.min_words and distinct * 2 >= question.min_words
    if complete:
        feedback = (
            "Complete (self-assessed): compare your answer with the model answer and tick off the rubric yourself."
        )
    else:
        feedback = (
            f"Not complete yet: write at least {question.min_words} words of your own "
            f"(you wrote {words}, {distinct} different). The model answer appears once it is complete."
        )
    return QuestionResult(
        id=question.id,
        answered=True,
        correct=complete,
        score=question.points if complete else 0.0,
        max_score=question.points,
        feedback=feedback,
        explanation=(question.explanation or None) if complete else None,
        hint=question.hint or None,
        common_mistakes=list(question.common_mistakes) if complete else [],
        model_answer=question.model_answer if complete else None,
        rubric=list(question.rubric) if complete else [],
    )


def _unanswered(question: Question) -> QuestionResult:
    return QuestionResult(
        id=question.id,
        answered=False,
        correct=False,
        score=0.0,
        max_score=question.points,
        feedback="Not answered. Answer it and submit again to see the explanation.",
        explanation=None,
        hint=question.hint or None,
        common_mistakes=[],
    )


def grade(quiz: Quiz, answers: dict[str, list[str] | str]) -> QuizResult:
    """Grade canonical answers (from ``check_answers``) question by question, in the quiz's order."""
    results: list[QuestionResult] = []
    for question in quiz.questions:
        value = answers.get(question.id)
        if isinstance(value, str) and value.strip():
            results.append(_grade_text(question, value))
        elif isinstance(value, list) and value:
            results.append(_grade_choice(question, value))
        else:
            results.append(_unanswered(question))
    score = round(sum(r.score for r in results), 6)
    return QuizResult(
        score=score,
        max_score=quiz.max_score,
        passed=score >= quiz.max_score * quiz.pass_percent / 100 - 1e-9,
        questions=results,
    )
