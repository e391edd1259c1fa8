"""User management for admins: create, change role, disable/enable, reset a password, bulk-import from CSV.

Contract:
- Functions take the session keyword-only and never commit.
- An admin cannot change their own role or disable themselves (no locking the last door from inside).
- A disabled user cannot log in and every session they hold stops working at its next request
  (``app.domain.accounts.passwords.user_from_session`` checks ``is_active``); a password reset ends their sessions too.
- ``import_csv`` is all or nothing: every row is checked first (e-mail by ``security.check_email``, role,
  duplicates in the file or the database) and if any row is wrong nothing is added and every problem is
  reported with its line number.
  Columns: ``email`` and optionally ``name`` and ``role`` (default learner), with or without a header row.
  New accounts get a random password, returned once so the admin can hand it over.
- A random password (``create_account`` without one, ``reset_password``) is one-time: the account must change it
  at its first log-in (``User.must_change_password``). A password the admin typed is not.
- ``emails_of(session=..., ids=...)`` maps user ids to e-mails in one query (for lists that name people).
- ``decode_csv`` and ``read_table`` are the file rules ``import_csv`` shares with course enrollment
  (``app.domain.courses.membership.enroll_csv``): size cap, UTF-8 (a BOM is fine), an optional header row (first cell
  ``email``, or only known column names, ``email`` among them), blank lines skipped, a cap on the data rows.
"""

from __future__ import annotations

import csv
import io
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.accounts.passwords import check_email, create_user, hash_password, normalise_email
from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.models import Role, User
from worker.core import humane
from worker.core.errors import InvalidInput

MAX_IMPORT_ROWS = 500  # each new password costs one argon2 hash
MAX_IMPORT_BYTES = 256 * 1024
MAX_NAME_CHARS = 200


@dataclass
class NewAccount:
    email: str
    name: str
    role: str
    password: str


@dataclass
class ImportReport:
    created: list[NewAccount] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def emails_of(*, session: Session, ids: set[int]) -> dict[int, str]:
    """Return the e-mail of each of the users ``ids`` (one query; none for an empty set)."""
    if not ids:
        return {}
    return {user_id: email for user_id, email in session.execute(select(User.id, User.email).where(User.id.in_(ids)))}


def new_password() -> str:
    """Return a one-time password of 16 URL-safe characters that starts with a letter or digit.

    A leading ``-`` would be prefixed with ``'`` in a CSV report (a spreadsheet reads it as a formula), and the
    person handed the report would then type a password that is not theirs.
    """
    while True:
        password = secrets.token_urlsafe(12)
        if password[0].isalnum():
            return password


def create_account(*, session: Session, email: str, name: str, role: Role, password: str = "") -> NewAccount:
    """Add a user; an empty ``password`` gets a random one. Return the account with its password."""
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"the name is longer than {MAX_NAME_CHARS} characters")
    one_time = not password
    password = password or new_password()
    user = create_user(session=session, email=email, password=password, role=role)
    user.name = name.strip()
    user.must_change_password = one_time  # its owner chooses their own at first log-in
    return NewAccount(email=user.email, name=user.name, role=role.value, password=password)


def set_role(*, session: Session, actor: User, user: User, role: Role) -> None:
    """Change ``user``'s role; refuse changing one's own."""
    if actor.id == user.id:
        raise InvalidInput("you cannot change your own role")
    if user.role is not role:
        trail.record(
            session=session, action=Action.role_change, actor=actor, subject_id=user.id, target="site role",
            before={"role": user.role}, after={"role": role},
        )  # fmt: skip
    user.role = role


def set_active(*, session: Session, actor: User, user: User, active: bool) -> None:
    """Enable or disable ``user``; refuse disabling oneself."""
    if actor.id == user.id and not active:
        raise InvalidInput("you cannot disable your own account")
    user.is_active = active


def reset_password(*, session: Session, user: User) -> str:
    """Give ``user`` a new random password (ending their sessions) and return it."""
    password = new_password()
    user.password_hash = hash_password(password)
    user.must_change_password = True
    return password


def decode_csv(data: bytes, *, max_bytes: int = MAX_IMPORT_BYTES) -> str:
    """Return the uploaded CSV ``data`` as text; raise ``InvalidInput`` if it is too large or not UTF-8."""
    if len(data) > max_bytes:
        raise InvalidInput(humane.too_large("The file", len(data), max_bytes, "Split it and enroll each part."))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput("the file is not UTF-8 text") from exc


def _rows(text: str) -> list[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text))
    try:
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise InvalidInput(f"not a readable CSV file: {exc}") from exc
    return [(n, [c.strip() for c in row]) for n, row in rows if any(c.strip() for c in row)]


def _is_header(cells: list[str], columns: Sequence[str]) -> bool:
    lowered = [c.lower() for c in cells]
    # No address is spelled ``email``, and a row made only of column names is no person either.
    return bool(lowered) and (lowered[0] == "email" or ("email" in lowered and set(lowered) <= set(columns)))


def read_table(
    text: str, *, columns: Sequence[str], max_rows: int, noun: str = "accounts", verb: str = "import"
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Return the column names (the header's, else ``columns`` in order) and the non-blank data rows by line."""
    rows = _rows(text)
    names = list(columns)
    if rows and _is_header(rows[0][1], columns):
        names = [c.lower() for c in rows[0][1]]
        rows = rows[1:]
        unknown = set(names) - set(columns)
        if unknown:
            raise InvalidInput(f"unknown column(s) {', '.join(sorted(unknown))}; use {', '.join(columns)}")
    if not rows:
        raise InvalidInput(f"the file holds no {noun}")
    if len(rows) > max_rows:
        raise InvalidInput(f"the file holds {len(rows)} {noun}; {verb} at most {max_rows} at a time")
    return names, rows


def import_csv(*, session: Session, data: bytes) -> ImportReport:
    """Check every row, then add all of them or none; return what was created or every problem found."""
    text = decode_csv(data)
    columns, rows = read_table(text, columns=["email", "name", "role"], max_rows=MAX_IMPORT_ROWS)
    report = ImportReport()
    wanted: list[tuple[str, str, Role]] = []
    seen: dict[str, int] = {}
    for line, row in rows:
        if len(row) > len(columns):
            report.errors.append(f"line {line}: {len(row)} columns, expected at most {len(columns)}")
            continue
        values = dict(zip(columns, row, strict=False))
        email = normalise_email(values.get("email", ""))
        name = values.get("name", "")
        role_name = (values.get("role") or "learner").lower()
        try:
            check_email(email)
        except InvalidInput as exc:
            report.errors.append(f"line {line}: {exc.message}")
        else:
            if email in seen:
                report.errors.append(f"line {line}: {email} is already on line {seen[email]}")
        if role_name not in Role.__members__:
            report.errors.append(f"line {line}: unknown role {role_name!r} (learner, instructor or admin)")
        if len(name) > MAX_NAME_CHARS:
            report.errors.append(f"line {line}: the name is longer than {MAX_NAME_CHARS} characters")
        seen.setdefault(email, line)
        if role_name in Role.__members__:
            wanted.append((email, name, Role(role_name)))
    existing = set(session.scalars(select(func.lower(User.email)).where(func.lower(User.email).in_(list(seen)))))
    for email in sorted(existing):
        report.errors.append(f"line {seen[email]}: {email} already has an account")
    if report.errors:
        return report
    for email, name, role in wanted:
        report.created.append(create_account(session=session, email=email, name=name, role=role))
    session.flush()
    return report
