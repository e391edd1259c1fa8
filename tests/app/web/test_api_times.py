"""Every time the API answers carries its zone: no response schema holds a datetime that may leave naive.

SQLite hands back naive datetimes (UTC by gpulab's rule); a field typed ``UtcDatetime`` (or ``AwareDatetime``)
answers them with their offset, as the schema's ``date-time`` format requires. A plain ``datetime`` would answer
``2026-12-01T23:16:00`` there, which a browser reads as its own local time.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import AwareDatetime, BaseModel

from app.domain.platform.clock import as_utc
from app.web.schemas.lti import KeyOut


def _aware(metadata: list[Any]) -> bool:
    return any(getattr(m, "func", None) is as_utc for m in metadata) or any(
        m is AwareDatetime or type(m).__name__ == "_AwareDatetimeAnnotation" for m in metadata
    )


def naive_fields(tp: Any, where: str, seen: set[Any], metadata: tuple[Any, ...] = ()) -> list[str]:
    """Return the paths under ``tp`` to datetime fields that nothing makes aware."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return naive_fields(base, where, seen, (*metadata, *extra))
    if tp is AwareDatetime:
        return []
    if tp is datetime:
        return [] if _aware(list(metadata)) else [where]
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset, dict, typing.Literal) or (
        origin is not None and origin.__module__ == "collections.abc"
    ):
        found: list[str] = []
        for arg in typing.get_args(tp):
            if arg is not Ellipsis:
                found += naive_fields(arg, where, seen, metadata if origin in (typing.Union, types.UnionType) else ())
        return found
    if isinstance(tp, type) and tp not in seen:
        if issubclass(tp, BaseModel):
            seen.add(tp)
            found = []
            for name, field in tp.model_fields.items():
                found += naive_fields(field.annotation, f"{tp.__name__}.{name}", seen, tuple(field.metadata))
            return found
        if dataclasses.is_dataclass(tp):
            seen.add(tp)
            hints = typing.get_type_hints(tp, include_extras=True)
            found = []
            for field in dataclasses.fields(tp):
                found += naive_fields(hints[field.name], f"{tp.__name__}.{field.name}", seen)
            return found
    return []


def test_no_api_answer_holds_a_datetime_that_may_leave_without_its_zone(app: FastAPI) -> None:
    naive: list[str] = []
    seen: set[Any] = set()
    routes = [c.route for c in iter_route_contexts(app.routes) if isinstance(c.route, APIRoute)]
    answering = [r for r in routes if r.response_model is not None]
    assert len(answering) > 50  # the walk covers the API, not a corner of it
    for route in answering:
        naive += [f"{route.path}: {path}" for path in naive_fields(route.response_model, route.path, seen)]
    assert naive == [], "\n".join(naive)


def test_the_walk_finds_a_naive_field() -> None:
    class Plain(BaseModel):
        at: datetime
        maybe: list[datetime | None]

    assert naive_fields(Plain, "Plain", set()) == ["Plain.at", "Plain.maybe"]


@pytest.mark.parametrize("stored", [datetime(2026, 12, 1, 23, 16), datetime(2026, 12, 1, 23, 16).astimezone()])
def test_a_key_created_at_is_answered_in_utc_with_its_offset(stored: datetime) -> None:
    answer = KeyOut(kid="k", created_at=stored, retired_at=None, current=True, published=True).model_dump(mode="json")
    assert answer["created_at"].endswith(("Z", "+00:00"))
    assert datetime.fromisoformat(answer["created_at"]) == as_utc(stored)
