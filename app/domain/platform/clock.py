"""Times as the platform keeps and sends them: aware, in UTC.

Contract: ``as_utc`` takes a naive datetime to be UTC already (SQLite hands back naive values) and converts an aware
one; ``UtcDatetime`` is the pydantic type that applies it both ways, on validation and when written out, so a
dataclass or model that skipped validation still sends its times with their offset (a browser reads a time with no
offset as its own local time).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, PlainSerializer


def as_utc(value: datetime) -> datetime:
    """Return ``value`` in UTC, taking a naive datetime to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc), PlainSerializer(as_utc, return_type=datetime)]
