"""Quiz exercises: the ``quiz.toml`` format as pydantic models, its public view, checking and grading answers.

Contract (authors' guide: "Quiz format" in ``exercises/README.md``):
- The format is the models below, and nothing else checks it: ``Quiz`` holds ``pass_percent`` and the
  ``[[question]]`` tables; ``type`` picks the question's model (``SingleQuestion``, ``MultipleQuestion``,
  ``TextQuestion``: a discriminated union, ``Question``), with ``Option`` and ``Program`` inside. Every key, type,
  range and cross-field rule is declared on them; an unknown key is refused, a key of another kind of question
  is refused as such. Values keep their TOML types: no string is read as a number, no number as a flag.
- ``parse_quiz(slug, text)`` returns a ``Quiz`` or raises ``ExerciseFormatError`` whose message names the file
  and every field at fault (``quiz.toml: question[2] ('scope').options needs at least 2 entries (got 1)``).
  It is pure: nothing is run (programs are run by the test suite, never here).
- ``FormatModel`` (the models' base: frozen, unknown keys refused) and ``readable_problem`` (a
  ``ValidationError`` as that one message) serve ``exercise.toml`` too: ``worker.bank.spec`` sits on this module.
- ``Quiz.public()`` is the only view of a quiz that may reach a learner before answering: ids, types, prompts,
  code, options and limits. Keys, explanations, hints, mistakes, model answers and rubrics stay out of it.
- ``check_answers`` turns a request's ``{question id: [option ids] | text}`` into a canonical mapping or raises
  ``InvalidInput`` (unknown question or option, wrong shape, text too long, nothing answered).
- ``grade`` scores a canonical mapping. Rules, per question worth ``points``:
  - ``single``: all points for the keyed option, else none.
  - ``multiple``: ``points * max(0, right picks - wrong picks) / number of keyed options``; it counts as correct
    only when the picks are exactly the key. Picking everything therefore earns nothing unless all are keyed.
  - ``text`` with ``grading = "staff"`` (the default): any non-empty answer is *pending*, 0 points until staff
    grade it against the rubric's items (``app.domain.review.staff_grading``); ``TextQuestion.rubric_score`` is the sum
    of
    the checked items' points, clamped to 0..``points``.
  - ``text`` with ``grading = "self"`` (practice, labelled so): all points once the answer has ``min_words`` words
    with letters in them, at least half of them different; only then are the model answer and the rubric
    returned, so an empty answer never unlocks them.
  - an unanswered question scores 0 and gets only its hint: its explanation would give the key away.
  The attempt passes when its score is at least ``pass_percent`` of the maximum.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from worker.core import humane
from worker.core.errors import ExerciseFormatError, InvalidInput

QuestionType = Literal["single", "multiple", "text"]
ProgramFramework = Literal["python", "torch", "tensorflow"]
QUESTION_TYPES: tuple[str, ...] = get_args(QuestionType)
PROGRAM_FRAMEWORKS: tuple[str, ...] = get_args(ProgramFramework)
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
OPTION_ID_RE = re.compile(r"^[a-z0-9]{1,8}$")
WORD_RE = re.compile(r"[^\W\d_][\w'\u2019-]*")
DEFAULT_PASS_PERCENT = 80.0
DEFAULT_MIN_WORDS = 25
DEFAULT_MAX_CHARS = 4000
MAX_CHARS_LIMIT = 20000
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_PROBLEMS = 5  # more than this in one message is noise: fix these, the next load names the rest

# ---- the format's building blocks ----------------------------------------------------------------------------

# Strings are stripped; numbers and flags are strict, so `points = "2"` or `code = 1` is refused, not read.
Text = Annotated[str, StringConstraints(strip_whitespace=True)]
Required = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Flag = Annotated[bool, Field(strict=True)]
Points = Annotated[float, Field(strict=True, gt=0, le=100)]
RubricPoints = Annotated[float, Field(strict=True, ge=-100, le=100)]
QuestionId = Annotated[str, Field(pattern=ID_RE.pattern)]
OptionId = Annotated[str, Field(pattern=OPTION_ID_RE.pattern)]

# What each pattern means, for the messages: authors should not have to read a regular expression.
PATTERN_WORDS = {
    ID_RE.pattern: "1-32 of a-z, 0-9, '-', '_', starting with a letter or digit",
    OPTION_ID_RE.pattern: "1-8 of a-z, 0-9",
}


class FormatModel(BaseModel):
    """Base of every table of the bank's format: immutable, and an unknown key is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def readable_problem(
    file: str, error: ValidationError, where: Callable[[tuple[int | str, ...]], str] | None = None
) -> str:
    """Return ``error`` as one message naming ``file`` and each field at fault; ``where`` renders a location."""
    render = where or dotted
    errors = error.errors()
    problems: list[str] = []
    for detail in errors:
        loc = tuple(detail["loc"])
        # A list's length is counted after its entries validate: a short count caused by bad entries is noise.
        if detail["type"] == "too_short" and any(
            len(e["loc"]) > len(loc) and e["loc"][: len(loc)] == loc for e in errors
        ):
            continue
        if detail["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc += (str(detail.get("ctx", {}).get("discriminator", "type")).strip("'"),)
        place = render(loc)
        problems.append(f"{place} {_phrase(detail)}" if place else _phrase(detail))
    extra = len(problems) - MAX_PROBLEMS
    shown = problems[:MAX_PROBLEMS] + ([f"and {extra} more"] if extra > 0 else [])
    return f"{file}: " + "; ".join(shown)


def dotted(loc: Iterable[int | str]) -> str:
    """Return a location as authors write it: ``question[2].options``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = part if _BARE_KEY.match(part) else json.dumps(part)  # a test id is a quoted key, as in TOML
            text += f".{key}" if text else key
    return text


def _phrase(detail: ErrorDetails) -> str:
    kind, ctx, value = detail["type"], detail.get("ctx", {}), detail["input"]
    if kind == "value_error":
        return str(ctx.get("error"))  # our validators' sentences read as they are
    if kind in ("missing", "union_tag_not_found"):
        return "is required"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return "is not a known key"
    if kind in ("too_short", "too_long"):
        bound, count = (
            ("needs at least", ctx.get("min_length"))
            if kind == "too_short"
            else ("takes at most", ctx.get("max_length"))
        )
        return f"{bound} {count} {'entry' if count == 1 else 'entries'} (got {ctx.get('actual_length')})"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        words = f"must be {PATTERN_WORDS.get(pattern, 'like ' + pattern)}"
    elif kind in _WORDS:
        words = _WORDS[kind].format(**{k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()})
    else:
        words = detail["msg"][:1].lower() + detail["msg"][1:]  # a rare type reads as pydantic says it
    if kind == "union_tag_invalid":
        value = ctx.get("tag")
    return words + (f" (got {_shown(value)})" if isinstance(value, str | int | float) else "")


# How pydantic's error types read after a field's name; ``{gt}`` and the like come from the error's context.
_WORDS = {
    "greater_than": "must be above {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be below {lt}",
    "less_than_equal": "must be at most {le}",
    "literal_error": "must be {expected}",
    "union_tag_invalid": "must be one of {expected_tags}",
    "string_too_short": "must not be empty",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "dataclass_type": "must be a table",
}


def _shown(value: object) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)  # as TOML writes it
    return text if len(text) <= 60 else text[:57] + "..."


def _twice(ids: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for one in ids:
        if one in seen:
            return one
        seen.add(one)
    return None


# ---- quiz.toml ------------------------------------------------------------------------------------------------


class Option(FormatModel):
    id: OptionId
    text: Required
    code: Flag = False  # shown in monospace, line breaks kept


class Program(FormatModel):
    """A program whose printed output is the key; CI runs ``setup + source + check`` and compares stdout."""

    framework: ProgramFramework
    source: Required
    expected_output: Required
    setup: Text = ""
    check: Text = ""

    @field_validator("source")
    @classmethod
    def _ends_a_line(cls, source: str) -> str:
        """End the source with a newline, as learners see it."""
        return source + "\n"


class _Question(FormatModel):
    """What every kind of question has; the kinds add their own keys and rules."""

    id: QuestionId
    type: QuestionType
    prompt: Required
    points: Points = 1.0
    code: Text = ""
    hint: Text = ""
    common_mistakes: tuple[Required, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _no_keys_of_other_kinds(cls, data: Any) -> Any:
        """Refuse a key of another kind of question by saying whose it is."""
        if isinstance(data, dict):
            kind = next(name for name, model in KINDS.items() if model is cls)
            for key in sorted(set(data) - set(cls.model_fields)):
                owners = [name for name, model in KINDS.items() if key in model.model_fields]
                if owners:
                    raise ValueError(
                        f"is a {kind} question, so it takes no {key} (a key of {' and '.join(owners)} questions)"
                    )
        return data

    @property
    def shown_code(self) -> str:
        """Return the code learners see under the prompt."""
        return self.code

    def public(self) -> dict[str, Any]:
        """Return what a learner may see before answering."""
        return {
            "id": self.id,
            "type": self.type,
            "prompt": self.prompt,
            "code": self.shown_code,
            "points": self.points,
            "options": [],
            "min_words": None,
            "max_chars": None,
            "grading": None,
        }


class _ChoiceQuestion(_Question):
    options: tuple[Option, ...] = Field(min_length=2)
    answer: tuple[str, ...] = Field(min_length=1)
    explanation: Required  # why the key is right and the others wrong
    feedback: dict[str, Text] = {}  # shown when the option of that id was picked

    @field_validator("options")
    @classmethod
    def _distinct_option_ids(cls, options: tuple[Option, ...]) -> tuple[Option, ...]:
        """Refuse two options with one id."""
        twice = _twice(o.id for o in options)
        if twice is not None:
            raise ValueError(f"use the option id {twice!r} twice; option ids are unique")
        return options

    @field_validator("answer")
    @classmethod
    def _names_options(cls, answer: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """Refuse a key that repeats itself or names no option."""
        ids = [o.id for o in info.data.get("options", ())]
        if ids and (len(set(answer)) != len(answer) or set(answer) - set(ids)):
            raise ValueError(f"must name distinct options of {', '.join(ids)} (got {list(answer)})")
        return answer

    @field_validator("feedback")
    @classmethod
    def _feedback_names_options(cls, feedback: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """Refuse feedback for an option that does not exist."""
        ids = [o.id for o in info.data.get("options", ())]
        unknown = sorted(set(feedback) - set(ids))
        if ids and unknown:
            raise ValueError(f"names unknown options {', '.join(unknown)}; the options are {', '.join(ids)}")
        return feedback

    def public(self) -> dict[str, Any]:
        """Return what a learner may see before answering."""
        view = super().public()
        view["options"] = [{"id": o.id, "text": o.text, "code": o.code} for o in self.options]
        return view


class SingleQuestion(_ChoiceQuestion):
    """One option is the key; a program question's key is what its program prints."""

    type: Literal["single"]
    answer: tuple[str, ...] = Field(min_length=1, max_length=1)
    program: Program | None = None

    @model_validator(mode="after")
    def _program_prints_the_key(self) -> SingleQuestion:
        """Check a program question: no separate code, and the keyed option repeats the expected output."""
        if self.program is None:
            return self
        if self.code:
            raise ValueError("has a program, which is the code learners see: leave out code")
        keyed = next(o for o in self.options if o.id == self.answer[0])
        if keyed.text != self.program.expected_output:
            raise ValueError(
                f"has keyed option {keyed.id!r} saying {keyed.text!r}; "
                f"it must equal program.expected_output ({self.program.expected_output!r})"
            )
        return self

    @property
    def shown_code(self) -> str:
        """Return the code learners see: the program itself for a program question."""
        return self.program.source if self.program else self.code


class MultipleQuestion(_ChoiceQuestion):
    """One or more options are the key; partial picks earn partial points."""

    type: Literal["multiple"]

    @property
    def program(self) -> None:
        """Say there is no program: only a single-choice question has one."""
        return None


class RubricItem(FormatModel):
    """One line of a text question's rubric: what staff look for, and the points it adds (or, negative, takes)."""

    id: QuestionId
    text: Required
    points: RubricPoints

    @field_validator("points")
    @classmethod
    def _not_zero(cls, points: float) -> float:
        """Refuse an item worth nothing: it would change no grade."""
        if points == 0:
            raise ValueError("must not be 0: an item adds points (positive) or takes them off (negative)")
        return points


def score_items(items: Iterable[RubricItem], checked: Iterable[str], *, most: float, least: float) -> float:
    """Return the points of the checked rubric items, clamped to ``least``..``most``."""
    chosen = set(checked)
    total = sum(r.points for r in items if r.id in chosen)
    return round(min(most, max(least, total)), 6)


def _line_kind(value: Any) -> str:
    return "text" if isinstance(value, str) else "item"


# A rubric line is a table (an item) or a string; the discriminator keeps errors about the one that was meant.
RubricLine = Annotated[Annotated[RubricItem, Tag("item")] | Annotated[Required, Tag("text")], Discriminator(_line_kind)]


class TextQuestion(_Question):
    """Explain in your own words: graded by staff against a rubric, or, as practice, self-assessed."""

    type: Literal["text"]
    grading: Literal["staff", "self"] = "staff"
    explanation: Text = ""
    min_words: Annotated[int, Field(strict=True, ge=1, le=500)] = DEFAULT_MIN_WORDS
    max_chars: Annotated[int, Field(strict=True, ge=100, le=MAX_CHARS_LIMIT)] = DEFAULT_MAX_CHARS
    model_answer: Required
    # Staff grading: items with ids and points. Self-assessment: the lines a learner ticks off (items or text).
    rubric: tuple[RubricLine, ...] = Field(min_length=1)
    comments: tuple[Required, ...] = ()  # reusable comments offered to graders

    @model_validator(mode="after")
    def _rubric_fits_grading(self) -> TextQuestion:
        """Refuse a staff rubric without points, with an id twice or with nothing to earn."""
        if self.grading == "self":
            if self.comments:
                raise ValueError("comments are for staff grading; a self-assessed question takes none")
            return self
        plain = [r for r in self.rubric if not isinstance(r, RubricItem)]
        if plain:
            raise ValueError(
                f'grading = "staff" needs rubric items with points, like {{ id = "names-replicas", points = 1, '
                f'text = "..." }}, not plain text such as {plain[0][:40]!r} (or set grading = "self")'
            )
        twice = _twice(r.id for r in self.rubric_items)
        if twice is not None:
            raise ValueError(f"rubric item id {twice!r} is used twice; item ids are unique within the question")
        if not any(r.points > 0 for r in self.rubric_items):
            raise ValueError("the rubric needs at least one item with positive points, or no answer could earn any")
        return self

    @property
    def rubric_items(self) -> tuple[RubricItem, ...]:
        """Return the rubric as items (plain lines of a self-assessed rubric get ids ``r1``, ``r2``... and 1 point)."""
        return tuple(r if isinstance(r, RubricItem) else RubricItem(id=f"r{i}", text=r, points=1.0)
                     for i, r in enumerate(self.rubric, start=1))  # fmt: skip

    @property
    def staff_graded(self) -> bool:
        return self.grading == "staff"

    def rubric_score(self, checked: Iterable[str]) -> float:
        """Return the points of the checked item ids, clamped to 0..``points``."""
        return score_items(self.rubric_items, checked, most=self.points, least=0.0)

    @property
    def program(self) -> None:
        """Say there is no program: only a single-choice question has one."""
        return None

    def public(self) -> dict[str, Any]:
        """Return what a learner may see before answering."""
        return {**super().public(), "min_words": self.min_words, "max_chars": self.max_chars,
                "grading": self.grading}  # fmt: skip


Question = Annotated[SingleQuestion | MultipleQuestion | TextQuestion, Field(discriminator="type")]
ChoiceQuestion = SingleQuestion | MultipleQuestion
KINDS: dict[str, type[_Question]] = {"single": SingleQuestion, "multiple": MultipleQuestion, "text": TextQuestion}


class Quiz(FormatModel):
    """``quiz.toml``: the pass mark and the ``[[question]]`` tables, in order."""

    pass_percent: Points = DEFAULT_PASS_PERCENT
    questions: tuple[Question, ...] = Field(validation_alias="question", min_length=1)

    @field_validator("questions")
    @classmethod
    def _distinct_ids(cls, questions: tuple[Question, ...]) -> tuple[Question, ...]:
        """Refuse two questions with one id."""
        twice = _twice(q.id for q in questions)
        if twice is not None:
            raise ValueError(f"id {twice!r} is used twice; question ids are unique")
        return questions

    @property
    def max_score(self) -> float:
        return float(sum(q.points for q in self.questions))

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}

    def public(self) -> list[dict[str, Any]]:
        return [q.public() for q in self.questions]


def _question_where(raw: Mapping[str, Any]) -> Callable[[tuple[int | str, ...]], str]:
    """Return a location renderer that drops the union's kind from the path and names the question's id."""
    entries = raw.get("question")

    def where(loc: tuple[int | str, ...]) -> str:
        index = loc[1] if len(loc) > 1 and loc[0] == "question" else None
        if not isinstance(index, int):
            return dotted(loc)
        rest = loc[3:] if len(loc) > 2 and loc[2] in KINDS else loc[2:]
        entry = entries[index] if isinstance(entries, list) and index < len(entries) else None
        qid = entry.get("id") if isinstance(entry, dict) else None
        label = f"question[{index}] ({qid!r})" if isinstance(qid, str) and ID_RE.match(qid) else f"question[{index}]"
        return label + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest)

    return where


def parse_quiz(slug: str, text: str) -> Quiz:
    """Read a ``quiz.toml`` text; raise ``ExerciseFormatError`` on any problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExerciseFormatError(slug, f"quiz.toml is not valid TOML: {exc}") from exc
    try:
        return Quiz.model_validate(raw)
    except ValidationError as exc:
        raise ExerciseFormatError(slug, readable_problem("quiz.toml", exc, _question_where(raw))) from exc


# ---- results -------------------------------------------------------------------------------------------------


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
    pending: bool = False  # a staff-graded answer waiting for its grade


@dataclass(frozen=True)
class QuizResult:
    score: float
    max_score: float
    passed: bool
    questions: list[QuestionResult]

    @property
    def pending(self) -> list[str]:
        """Return the ids of the answers waiting for staff grading."""
        return [q.id for q in self.questions if q.pending]


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


def count_words(text: str) -> tuple[int, int]:
    """Return (words, distinct words) of ``text``, counting only tokens that contain a letter."""
    words = [w.lower() for w in WORD_RE.findall(text)]
    return len(words), len(set(words))


def _choice_score(question: ChoiceQuestion, picked: list[str]) -> float:
    key = set(question.answer)
    if isinstance(question, SingleQuestion):
        return question.points if set(picked) == key else 0.0
    hits = len(key & set(picked))
    misses = len(set(picked) - key)
    return question.points * max(0, hits - misses) / len(key)


def _grade_choice(question: ChoiceQuestion, picked: list[str]) -> QuestionResult:
    score = _choice_score(question, picked)
    correct = set(picked) == set(question.answer)
    if correct:
        verdict = "Correct."
    elif score > 0:
        verdict = (f"Partly right: {humane.number(score)} of {humane.number(question.points)} points. "
                   "Some picks are missing or wrong.")  # fmt: skip
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


STAFF_PENDING = (
    "Sent to staff, who grade it against the rubric. Its points count once they release the grades; until then "
    "it counts 0."
)


def _grade_text(question: TextQuestion, text: str) -> QuestionResult:
    if question.staff_graded:
        return QuestionResult(
            id=question.id, answered=True, correct=False, score=0.0, max_score=question.points,
            feedback=STAFF_PENDING, explanation=None, hint=None, common_mistakes=[], pending=True,
        )  # fmt: skip
    words, distinct = count_words(text)
    complete = words >= question.min_words and distinct * 2 >= question.min_words
    if complete:
        feedback = (
            "Complete (practice, self-assessed): compare your answer with the model answer and tick off the rubric "
            "yourself."
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
        rubric=[r.text for r in question.rubric_items] if complete else [],
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
        if isinstance(question, TextQuestion) and isinstance(value, str) and value.strip():
            results.append(_grade_text(question, value))
        elif not isinstance(question, TextQuestion) and isinstance(value, list) and value:
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
