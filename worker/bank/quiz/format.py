"""The ``quiz.toml`` format as pydantic models, and its public view.

Contract (authors' guide: "Quiz format" in ``exercises/README.md``):
- The format is the models below, and nothing else checks it: ``Quiz`` holds ``pass_percent`` and the
  ``[[question]]`` tables; ``type`` picks the question's model (``SingleQuestion``, ``MultipleQuestion``,
  ``TextQuestion``: a discriminated union, ``Question``), with ``Option``, ``Program`` and ``RubricItem``
  (``worker.bank.rubric``) inside. Every key, type, range and cross-field rule is declared on them; an unknown key
  is refused, a key of another kind of question is refused as such. Values keep their TOML types: no string is
  read as a number, no number as a flag. The models sit on the format kit (``worker.bank.formatkit``), which
  ``exercise.toml`` shares.
- ``parse_quiz(slug, text)`` returns a ``Quiz`` or raises ``ExerciseFormatError`` whose message names the file
  and every field at fault (``quiz.toml: question[2] ('scope').options needs at least 2 entries (got 1)``).
  It is pure: nothing is run (programs are run by the test suite, never here).
- ``Quiz.public()`` is the only view of a quiz that may reach a learner before answering: ids, types, prompts,
  code, options and limits. Keys, explanations, hints, mistakes, model answers and rubrics stay out of it.
- ``TextQuestion.rubric_score`` is the sum of the checked rubric items' points, clamped to 0..``points``: how
  staff grades of a text answer count (``app.domain.review.staff_grading``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import Discriminator, Field, Tag, ValidationError, ValidationInfo, field_validator, model_validator

from worker.bank.formatkit import (
    ID_RE,
    OPTION_ID_RE,
    Flag,
    FormatModel,
    Id,
    Required,
    Text,
    first_repeat,
    naming_entries,
    readable_problem,
)
from worker.bank.rubric import RubricItem, score_items
from worker.core.errors import ExerciseFormatError

QuestionType = Literal["single", "multiple", "text"]
ProgramFramework = Literal["python", "torch", "tensorflow"]
QUESTION_TYPES: tuple[str, ...] = get_args(QuestionType)
PROGRAM_FRAMEWORKS: tuple[str, ...] = get_args(ProgramFramework)
DEFAULT_PASS_PERCENT = 80.0
DEFAULT_MIN_WORDS = 25
DEFAULT_MAX_CHARS = 4000
MAX_CHARS_LIMIT = 20000

Points = Annotated[float, Field(strict=True, gt=0, le=100)]
QuestionId = Id
OptionId = Annotated[str, Field(pattern=OPTION_ID_RE.pattern)]


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
        twice = first_repeat(o.id for o in options)
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
        twice = first_repeat(r.id for r in self.rubric_items)
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
        twice = first_repeat(q.id for q in questions)
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


def parse_quiz(slug: str, text: str) -> Quiz:
    """Read a ``quiz.toml`` text; raise ``ExerciseFormatError`` on any problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExerciseFormatError(slug, f"quiz.toml is not valid TOML: {exc}") from exc
    try:
        return Quiz.model_validate(raw)
    except ValidationError as exc:
        # A question is named by its id, and the union's kind is left out of the path: question[2] ('x').options.
        where = naming_entries(raw, "question", "id", name_ok=lambda qid: bool(ID_RE.match(qid)), skip=KINDS)
        raise ExerciseFormatError(slug, readable_problem("quiz.toml", exc, where)) from exc
