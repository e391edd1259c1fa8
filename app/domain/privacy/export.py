"""Build a person's data export: a zip of JSON files and their code, readable without gpulab.

Contract: ``export_zip`` returns the zip's bytes. It holds ``README.txt`` (what each file is), ``account.json``,
``memberships.json``, ``grades.json`` (each course's counted results on its published assignments, overrides
with their reasons), ``extensions.json``, ``submissions.json`` (every submission's result, variant, tests,
measurements and earlier gradings) with each one's code in ``code/<submission id>.py``, ``staff_grades.json``
(released rubric grades and their comments), ``regrade_requests.json`` (every message; authors are "you" or
"staff"), ``drafts.json`` with ``drafts/<exercise>[-<assignment id>].py``, ``timed_attempts.json``,
``tokens.json`` (metadata: never a token), ``lms_accounts.json`` (the LMS ids launches carried) and
``audit.json`` (the audit entries about them, actors shown as "you", "staff" or "gpulab"). Times are UTC ISO
8601. Other people's names and e-mails never appear.
"""

from __future__ import annotations

import io
import json
import zipfile
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.domain.courses import gradebook, membership
from app.domain.models import (
    ApiToken,
    Assignment,
    AuditEntry,
    Course,
    CourseMember,
    Draft,
    Exercise,
    Extension,
    GradeOverride,
    GradingRecord,
    LtiPlatform,
    LtiUser,
    ManualGrade,
    RegradeMessage,
    RegradeRequest,
    Submission,
    TimedAttempt,
    User,
)
from app.domain.platform.clock import as_utc

README = """gpulab: your data
====================
Everything gpulab holds about you, as of {at} (UTC). JSON files open in any text editor.

account.json           your account
memberships.json       your courses and your role in each
grades.json            what your work counts for in each course (overrides with their reasons)
extensions.json        extensions you were given
submissions.json       every submission: result, variant, tests, measurements, earlier gradings
code/                  the code of each submission, by submission id
staff_grades.json      released rubric grades of your work, with staff's comments
regrade_requests.json  your regrade requests and their messages
drafts.json, drafts/   your unsubmitted drafts
timed_attempts.json    your timed assessments: when your time started and ended
tokens.json            your API tokens (names and dates; a token itself is never stored)
lms_accounts.json      the ids your learning platform (LMS) sent when you launched gpulab from it
audit.json             changes staff or gpulab made that concern you
"""


def _time(value: datetime | None) -> str | None:
    return None if value is None else as_utc(value).isoformat()


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8")


def _account(user: User) -> dict[str, Any]:
    return {
        "id": user.id, "email": user.email, "name": user.name, "site_role": user.role.value,
        "active": user.is_active, "created_at": _time(user.created_at),
    }  # fmt: skip


def _memberships(session: Session, user: User) -> list[dict[str, Any]]:
    stmt = (
        select(CourseMember, Course)
        .join(Course, Course.id == CourseMember.course_id)
        .where(CourseMember.user_id == user.id)
    )
    return [
        {
            "course": c.slug,
            "title": c.title,
            "term": c.term,
            "role": m.role.value,
            "joined_by": m.source,
            "joined_at": _time(m.created_at),
            "archived": c.archived_at is not None,
        }
        for m, c in session.execute(stmt.order_by(Course.slug))
    ]


def _grades(session: Session, user: User) -> list[dict[str, Any]]:
    found = []
    courses = (
        select(Course)
        .join(CourseMember, CourseMember.course_id == Course.id)
        .where(CourseMember.user_id == user.id, Course.is_practice.is_(False))
    )
    for course in session.scalars(courses.order_by(Course.slug)):
        if membership.course_role(session=session, course=course, user=user) is None:
            continue
        row = gradebook.my_grades(session=session, course=course, user=user)
        items = {i.id: (a, i) for a in course.assignments for i in a.items}
        cells = []
        for cell in row.cells:
            assignment, item = items[cell.item_id]
            cells.append({
                "assignment": assignment.title, "exercise": item.exercise.slug, "score_pct": round(cell.score_pct, 2),
                "computed_pct": round(cell.computed_pct, 2), "late": cell.late, "extended": cell.extended,
                "counted_submission": cell.submission_id,
                "override": None if cell.override is None else {
                    "score_pct": cell.override.score_pct, "reason": cell.override.comment, "at": _time(cell.override.at)
                },
            })  # fmt: skip
        titles = {a.id: a.title for a in course.assignments}
        found.append({
            "course": course.slug, "total_pct": row.total_pct, "items": cells,
            "assignments": {titles[i]: round(p, 2) for i, p in row.assignment_pct.items() if i in titles},
        })  # fmt: skip
    return found


def _overrides(session: Session, user: User) -> list[dict[str, Any]]:
    stmt = select(GradeOverride).where(GradeOverride.user_id == user.id).order_by(GradeOverride.id)
    return [
        {
            "id": o.id,
            "item": o.item_id,
            "score_pct": o.score_pct,
            "reason": o.comment,
            "at": _time(o.created_at),
            "reverted_at": _time(o.reverted_at),
        }
        for o in session.scalars(stmt)
    ]


def _extensions(session: Session, user: User) -> list[dict[str, Any]]:
    stmt = (
        select(Extension, Assignment.title)
        .join(Assignment, Assignment.id == Extension.assignment_id)
        .where(Extension.user_id == user.id)
        .order_by(Extension.id)
    )
    return [
        {
            "assignment": title,
            "due_at": _time(e.due_at),
            "late_until": _time(e.late_until),
            "extra_attempts": e.extra_attempts,
            "extra_minutes": e.extra_minutes,
            "time_multiplier": e.time_multiplier,
            "reason": e.reason,
            "granted_at": _time(e.created_at),
            "revoked_at": _time(e.revoked_at),
        }
        for e, title in session.execute(stmt)
    ]


def _submission(s: Submission, history: list[GradingRecord]) -> dict[str, Any]:
    return {
        "id": s.id,
        "exercise": s.exercise_version.exercise.slug,
        "version": s.exercise_version.number,
        "assignment": s.assignment_id,
        "status": s.status.value,
        "verdict": s.verdict.value if s.verdict else None,
        "score": s.score,
        "max_score": s.max_score,
        "variant": s.params,
        "measurements": s.measurements,
        "stdout": s.stdout,
        "stderr": s.stderr,
        "message": s.message,
        "device": s.device,
        "runtime_ms": s.runtime_ms,
        "created_at": _time(s.created_at),
        "finished_at": _time(s.finished_at),
        "tests": [
            {
                "name": t.name,
                "outcome": t.outcome,
                "message": t.message,
                "details": t.details,
                "points": t.points,
                "max_points": t.max_points,
            }
            for t in s.tests
        ],
        "earlier_gradings": [
            {
                "version_id": r.exercise_version_id,
                "status": r.status,
                "verdict": r.verdict,
                "score": r.score,
                "max_score": r.max_score,
                "message": r.message,
                "graded_at": _time(r.graded_at),
            }
            for r in history
        ],
        "code_file": f"code/{s.id}.py",
    }


def _staff_grades(session: Session, user: User) -> list[dict[str, Any]]:
    stmt = (
        select(ManualGrade)
        .join(Submission, Submission.id == ManualGrade.submission_id)
        .where(Submission.user_id == user.id, ManualGrade.released_at.is_not(None))
        .order_by(ManualGrade.id)
    )
    return [
        {
            "submission": g.submission_id,
            "question": g.question,
            "points": g.points,
            "max_points": g.max_points,
            "checked": g.checked,
            "comment": g.comment,
            "line_comments": g.line_comments,
            "released_at": _time(g.released_at),
        }
        for g in session.scalars(stmt)
    ]


def _regrade_requests(session: Session, user: User) -> list[dict[str, Any]]:
    stmt = select(RegradeRequest).where(RegradeRequest.user_id == user.id).order_by(RegradeRequest.id)
    found = []
    for r in session.scalars(stmt):
        messages = session.scalars(
            select(RegradeMessage).where(RegradeMessage.request_id == r.id).order_by(RegradeMessage.id)
        )
        found.append(
            {
                "id": r.id,
                "submission": r.submission_id,
                "status": r.status.value,
                "created_at": _time(r.created_at),
                "messages": [
                    {
                        "by": "you" if m.author_id == user.id else "staff",
                        "action": m.action,
                        "body": m.body,
                        "score_pct": m.score_pct,
                        "at": _time(m.created_at),
                    }
                    for m in messages
                ],
            }
        )
    return found


def _audit(session: Session, user: User) -> list[dict[str, Any]]:
    stmt = select(AuditEntry).where(or_(AuditEntry.subject_id == user.id, AuditEntry.actor_id == user.id))
    found = []
    for e in session.scalars(stmt.order_by(AuditEntry.id)):
        actor = "you" if e.actor_id == user.id else ("gpulab" if e.actor_id is None else "staff")
        found.append({"at": _time(e.at), "by": actor, "action": e.action, "target": e.target,
                      "before": e.before, "after": e.after})  # fmt: skip
    return found


def export_zip(*, session: Session, user: User) -> bytes:
    """Return everything gpulab holds about ``user`` as a zip (see the module contract)."""
    out = io.BytesIO()
    now = _time(datetime.now().astimezone())
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("README.txt", README.format(at=now))
        z.writestr("account.json", _dump(_account(user)))
        z.writestr("memberships.json", _dump(_memberships(session, user)))
        z.writestr("grades.json", _dump({"courses": _grades(session, user), "overrides": _overrides(session, user)}))
        z.writestr("extensions.json", _dump(_extensions(session, user)))
        submissions = list(
            session.scalars(select(Submission).where(Submission.user_id == user.id).order_by(Submission.created_at))
        )
        listed = []
        for s in submissions:
            history = list(
                session.scalars(
                    select(GradingRecord).where(GradingRecord.submission_id == s.id).order_by(GradingRecord.id)
                )
            )
            listed.append(_submission(s, history))
            z.writestr(f"code/{s.id}.py", s.code)
        z.writestr("submissions.json", _dump(listed))
        z.writestr("staff_grades.json", _dump(_staff_grades(session, user)))
        z.writestr("regrade_requests.json", _dump(_regrade_requests(session, user)))
        drafts = []
        for d, slug in session.execute(
            select(Draft, Exercise.slug)
            .join(Exercise, Exercise.id == Draft.exercise_id)
            .where(Draft.user_id == user.id)
        ):
            name = f"drafts/{slug}{f'-{d.assignment_id}' if d.assignment_id else ''}.py"
            if d.code is not None:
                z.writestr(name, d.code)
            drafts.append({"exercise": slug, "assignment": d.assignment_id, "revision": d.revision,
                           "answers": d.answers, "code_file": name if d.code is not None else None,
                           "updated_at": _time(d.updated_at)})  # fmt: skip
        z.writestr("drafts.json", _dump(drafts))
        attempts = session.scalars(select(TimedAttempt).where(TimedAttempt.user_id == user.id))
        z.writestr(
            "timed_attempts.json",
            _dump(
                [
                    {
                        "assignment": a.assignment_id,
                        "started_at": _time(a.started_at),
                        "ends_at": _time(a.ends_at),
                        "started_from": a.started_from,
                        "closed_at": _time(a.closed_at),
                    }
                    for a in attempts
                ]
            ),
        )
        tokens = session.scalars(select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id))
        z.writestr(
            "tokens.json",
            _dump(
                [
                    {
                        "name": t.name,
                        "prefix": t.prefix,
                        "scopes": t.scopes,
                        "created_at": _time(t.created_at),
                        "last_used_at": _time(t.last_used_at),
                        "revoked_at": _time(t.revoked_at),
                    }
                    for t in tokens
                ]
            ),
        )
        lms = session.execute(
            select(LtiUser, LtiPlatform.issuer)
            .join(LtiPlatform, LtiPlatform.id == LtiUser.platform_id)
            .where(LtiUser.user_id == user.id)
        )
        z.writestr("lms_accounts.json", _dump([
            {"platform": issuer, "lms_user_id": u.sub, "first_launch": _time(u.created_at)} for u, issuer in lms
        ]))  # fmt: skip
        z.writestr("audit.json", _dump(_audit(session, user)))
    return out.getvalue()
