"""The bank's format kit: what ``exercise.toml`` and ``quiz.toml`` are built from, and how their errors read.

Contract:
- ``FormatModel`` is the base of every table of both formats: frozen, and an unknown key is refused.
- ``Text`` (stripped), ``Required`` (stripped, not empty), ``Flag`` (a strict boolean) and ``Id`` are the field
  types the formats share; numbers and flags are strict, so a TOML string is never read as one.
- ``readable_problem(file, error, where)`` turns a pydantic ``ValidationError`` into one message naming the file
  and every field at fault, at most ``MAX_PROBLEMS`` of them, in words (``PATTERN_WORDS`` says what an id pattern
  means); ``dotted`` writes a location as authors write it, and ``naming_entries`` names a list's entry by its
  key too (``question[2] ('scope-order').options``).
- ``first_repeat`` finds an id used twice, for the formats' uniqueness rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import ErrorDetails

ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
OPTION_ID_RE = re.compile(r"^[a-z0-9]{1,8}$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_PROBLEMS = 5  # more than this in one message is noise: fix these, the next load names the rest

# Strings are stripped; numbers and flags are strict, so `points = "2"` or `code = 1` is refused, not read.
Text = Annotated[str, StringConstraints(strip_whitespace=True)]
Required = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Flag = Annotated[bool, Field(strict=True)]
Id = Annotated[str, Field(pattern=ID_RE.pattern)]

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


def naming_entries(
    raw: Any, key: str, name_key: str, *, name_ok: Callable[[str], bool] = bool, skip: Collection[str] = ()
) -> Callable[[tuple[int | str, ...]], str]:
    """Return a location renderer naming entry N of the list ``key`` by its ``name_key``: ``module[2] ('ddp').title``.

    ``skip``: path parts to leave out right after the index (a union's kind); ``name_ok``: which names are shown.
    """
    entries = raw.get(key) if isinstance(raw, Mapping) else None

    def where(loc: tuple[int | str, ...]) -> str:
        index = loc[1] if len(loc) > 1 and loc[0] == key else None
        if not isinstance(index, int):
            return dotted(loc)
        rest = loc[3:] if len(loc) > 2 and loc[2] in skip else loc[2:]
        entry = entries[index] if isinstance(entries, list) and index < len(entries) else None
        name = entry.get(name_key) if isinstance(entry, Mapping) else None
        label = f"{key}[{index}]" + (f" ({name!r})" if isinstance(name, str) and name_ok(name) else "")
        return label + ("." if rest and isinstance(rest[0], str) else "") + dotted(rest)

    return where


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


def first_repeat(ids: Iterable[str]) -> str | None:
    """Return the first id that occurs a second time in ``ids``, or None."""
    seen: set[str] = set()
    for one in ids:
        if one in seen:
            return one
        seen.add(one)
    return None
