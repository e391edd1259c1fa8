"""Server-rendered pages for learners: log in/out, the catalogue, an exercise with its editor, attempt history.

Contract:
- Every page but ``/login`` needs a session: ``CurrentUser`` raises ``Unauthorized``, which the one error
  mechanism (``app.web.errors`` with ``app.web.pages.error_page``) turns into a redirect to ``/login?next=…``;
  ``NotFound``/``Forbidden`` and unknown paths get the HTML error page with their status.
- Every state-changing form on this router (log in, log out, the no-JavaScript submit) carries the session's
  form token (``csrf``, which ``render`` passes every template); the router-level dependency ``verify_form_csrf`` checks
  it on every unsafe method before the route runs (403 otherwise), as on every page router (``app.web.pages``).
- Templates autoescape. Markup inserted unescaped is only the prompt HTML (sanitised by
``app.domain.platform.markdown``) and
  Pygments output (``app.domain.platform.highlight``, which escapes the source). Learner text reaches the page through
  autoescaped variables or through ``textContent`` in the static scripts.
- Submitting without JavaScript posts the form to ``/exercises/{slug}/submissions`` and lands on the history
  page of that attempt; with JavaScript the exercise page submits through the JSON API and follows SSE.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import markupsafe
from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from app.domain.accounts.passwords import authenticate
from app.domain.courses import coursework, drafts, membership, timing
from app.domain.courses.assignments import gate, places_made
from app.domain.courses.visibility import shown_for
from app.domain.exercises.bank import list_published
from app.domain.exercises.learning_path import path_for
from app.domain.models import Assignment, Exercise, Submission, User, utcnow
from app.domain.platform.clock import as_utc
from app.domain.platform.highlight import highlight_blocks, highlight_python
from app.domain.platform.markdown import render_markdown
from app.domain.review.regrade_requests import request_for_item
from app.domain.submissions.lifecycle import get_for_user
from app.domain.submissions.progress import (
    Progress,
    attempts_for,
    diff_lines,
    previous_attempt,
    progress_by_exercise,
    progress_for,
    summarize,
)
from app.domain.submissions.quiz import quiz_of
from app.web.deps import (
    CurrentUser,
    ExerciseDep,
    LoginLimiterDep,
    OptionalUser,
    SessionDep,
    SettingsDep,
    SubmitDep,
)
from app.web.errors import http_status
from app.web.pages import FORM_CSRF, render, safe_next
from app.web.routes.preload import with_current_versions, with_submission_details
from app.web.schemas.exercises import ExerciseDetail, ExerciseSummary
from app.web.schemas.submissions import SubmissionOut, TestResultOut
from app.web.sessions import client_ip, end_session, start_session
from worker.core.errors import NotFound, RateLimited, Unauthorized

EDITOR_BUNDLE = Path(__file__).resolve().parents[2] / "static" / "build" / "editor.js"
DIFFICULTY_ORDER = {"beginner": 0, "intermediate": 1, "advanced": 2}

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])


# --- log in and out ----------------------------------------------------------------------------------------


@router.get("/")
async def home(user: OptionalUser) -> Response:
    return RedirectResponse("/exercises" if user else "/login", status_code=303)


@router.get("/login")
def login_page(request: Request, user: OptionalUser, next_path: Annotated[str, Query(alias="next")] = "") -> Response:
    target = safe_next(next_path)
    if user:
        return RedirectResponse(target, status_code=303)
    return render(request, "login.html", user=None, next=target, email="", error="")


@router.post("/login")
def login_form(
    request: Request,
    session: SessionDep,
    limiter: LoginLimiterDep,
    email: Annotated[str, Form(max_length=320)] = "",
    password: Annotated[str, Form(max_length=1024)] = "",
    next_path: Annotated[str, Form(alias="next")] = "",
) -> Response:
    """Log in from the HTML form (the same rules as ``POST /api/auth/login``); errors re-render the form."""
    target, ip = safe_next(next_path), client_ip(request)
    try:
        limiter.check(email=email, ip=ip)
        user = authenticate(session=session, email=email, password=password)
        if user is None:
            limiter.record_failure(email=email, ip=ip)
            raise Unauthorized("Wrong e-mail or password.")
    except (RateLimited, Unauthorized) as exc:
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RateLimited) else None
        response = render(
            request, "login.html", http_status(exc), user=None, next=target, email=email, error=exc.message
        )
        response.headers.update(headers or {})
        return response
    limiter.record_success(email=email)
    session.commit()  # keeps a password hash that authenticate upgraded (the session cookie is bound to it)
    start_session(request, user)
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
def logout_form(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """End this session and go to the log-in page."""
    end_session(request, session=session, max_age_s=settings.session_max_age_s)
    session.commit()
    return RedirectResponse("/login", status_code=303)


# --- the catalogue -------------------------------------------------------------------------------------------


@router.get("/exercises")
def exercises_page(
    request: Request, user: CurrentUser, session: SessionDep, by: Annotated[str, Query(max_length=16)] = ""
) -> Response:
    """The catalogue: the learning path's modules in order (``?by=topic``, or a bank without a path: by topic)."""
    timing.lockout(session=session, user=user, assignment_id=None, now=utcnow())  # closed while an exam runs
    exercises = list(with_current_versions(session, list_published(session=session)))
    progress = progress_by_exercise(session=session, user=user)
    rows = {e.id: (ExerciseSummary.of(e), progress.get(e.id, Progress())) for e in exercises}
    path = path_for(session=session, user=user, exercises=exercises, progress=progress)
    view = path if by != "topic" else None
    topics: dict[str, list[tuple[ExerciseSummary, Progress]]] = defaultdict(list)
    for row in rows.values():
        topics[row[0].topic].append(row)
    for grouped in topics.values():
        grouped.sort(key=lambda row: (DIFFICULTY_ORDER.get(row[0].difficulty, 9), row[0].title))
    return render(
        request,
        "exercises.html",
        topics=sorted(topics.items(), key=lambda item: item[0].lower()) if view is None else [],
        path=view,
        rows=rows,
        has_path=path is not None,
        summary=summarize(progress, exercises),
    )


# --- one exercise --------------------------------------------------------------------------------------------


def exercise_context(
    *, session: Session, user: User, exercise: Exercise, detail: ExerciseDetail, assignment: Assignment | None = None
) -> dict[str, Any]:
    """Return what ``exercise.html`` needs to show the code exercise ``detail`` to ``user`` (also under assignments).

    The editor holds the newest of the learner's draft for this page (``assignment``, or practice) and their last
    submission; the starter when they have neither.
    """
    attempts = attempts_for(session=session, user=user, exercise=exercise, limit=None)
    last = attempts[0] if attempts else None
    draft = drafts.find(session=session, exercise=exercise, user=user, assignment=assignment)
    draft_shown = (
        draft is not None
        and draft.code is not None
        and (last is None or as_utc(draft.updated_at) >= as_utc(last.created_at))
    )
    code = draft.code if draft_shown and draft is not None else (last.code if last is not None else detail.starter_code)
    return {
        "ex": detail,
        "prompt": highlight_blocks(detail.prompt_html),
        "examples": {name: highlight_python(source) for name, source in detail.examples.items()},
        "code": code,
        "draft": draft,
        "draft_shown": draft_shown,
        "last_id": last.id if last else "",
        "progress": progress_for(session=session, user=user, exercise=exercise),
        "has_editor": EDITOR_BUNDLE.is_file(),
        "bound": [],  # the practice page's binding assignments (exercise_page)
    }


def binding(*, session: Session, user: User, exercise: Exercise) -> list[dict[str, Any]]:
    """Return the assignments that bind ``user``'s practice on ``exercise``, each with its policy, page and gate."""
    now = utcnow()
    return [
        {
            "title": a.title, "course": a.course.title, "practice": a.practice,
            "url": f"/courses/{quote(a.course.slug)}/assignments/{a.id}/exercises/{quote(exercise.slug)}",
            "gate": gate(session=session, assignment=a, exercise=exercise, user=user, now=now),
        }
        for a in sorted(  # a refusing policy first: it is the one that decides (practice_under)
            coursework.holding_assignments(session=session, exercise=exercise, user=user),
            key=lambda a: a.practice == "counted",
        )
    ]  # fmt: skip


@router.get("/exercises/{slug}")
def exercise_page(request: Request, exercise: ExerciseDep, user: CurrentUser, session: SessionDep) -> Response:
    detail = ExerciseDetail.of(
        exercise, params=coursework.learner_params(session=session, exercise=exercise, user=user)
    )
    bound = binding(session=session, user=user, exercise=exercise)
    if detail.kind == "quiz":  # answered through quiz.js and POST /api/exercises/{slug}/quiz
        progress = progress_for(session=session, user=user, exercise=exercise)
        draft = drafts.find(session=session, exercise=exercise, user=user, assignment=None)
        prompt = highlight_blocks(detail.prompt_html)
        return render(request, "quiz.html", ex=detail, prompt=prompt, progress=progress, bound=bound, draft=draft)
    page = exercise_context(session=session, user=user, exercise=exercise, detail=detail)
    return render(request, "exercise.html", **{**page, "bound": bound})


@router.post("/exercises/{slug}/submissions")
def submit_form(
    exercise: ExerciseDep, user: CurrentUser, submit: SubmitDep, code: Annotated[str, Form()] = ""
) -> Response:  # fmt: skip
    """Submit from the form without JavaScript; show the attempt on the history page."""
    submission = submit(user=user, exercise=exercise, code=code, assignment_id=None)
    return RedirectResponse(
        f"/exercises/{quote(exercise.slug)}/history?attempt={submission.id}#attempt", status_code=303
    )


# --- attempt history -----------------------------------------------------------------------------------------


def _chosen(attempts: list[Submission], attempt_id: str, *, session: Session, user: User) -> Submission | None:
    if not attempt_id:
        return attempts[0] if attempts else None
    chosen = get_for_user(session=session, submission_id=attempt_id, user=user)
    if chosen is None or chosen not in attempts:
        raise NotFound(f"no attempt {attempt_id!r} on this exercise")
    return chosen


@router.get("/exercises/{slug}/history")
def history_page(
    request: Request,
    exercise: ExerciseDep,
    user: CurrentUser,
    session: SessionDep,
    attempt: Annotated[str, Query(max_length=64)] = "",
    from_assignment: Annotated[int | None, Query(alias="assignment", ge=1, le=2**31 - 1)] = None,
) -> Response:
    attempts = list(with_submission_details(session, attempts_for(session=session, user=user, exercise=exercise)))
    where = places_made(session=session, assignment_ids=[s.assignment_id for s in attempts])
    context = _opened_from(session, user, exercise, from_assignment) if from_assignment is not None else None
    chosen = _chosen(attempts, attempt, session=session, user=user)
    previous = previous_attempt(session=session, submission=chosen) if chosen else None
    numbers = {s.id: len(attempts) - i for i, s in enumerate(attempts)}
    shown = shown_for(session=session, submissions=attempts, viewer=user, now=utcnow())  # chosen is among them
    chosen_out = SubmissionOut.of(chosen, shown[chosen.id]) if chosen else None
    is_quiz = chosen is not None and chosen.exercise_version.kind == "quiz"
    return render(
        request,
        "history.html",
        ex=ExerciseSummary.of(exercise),
        attempts=[SubmissionOut.of(s, shown[s.id]) for s in attempts],
        numbers=numbers,
        chosen=chosen_out,
        chosen_code=highlight_python(chosen.code) if chosen and not is_quiz else "",
        answers=quiz_answers(chosen, chosen_out) if chosen and chosen_out and is_quiz else [],
        previous_id=previous.id if previous else None,
        diff=diff_lines(previous.code, chosen.code) if chosen and previous else [],
        progress=progress_for(session=session, user=user, exercise=exercise),
        regrade=request_for_item(session=session, user=user, submission=chosen) if chosen else None,
        where={s.id: where.get(s.assignment_id) for s in attempts},
        context=context,
    )


@dataclass(frozen=True)
class QuizAnswer:
    """One question of a quiz attempt as history shows it: the prompt, the learner's answer in words, the result."""

    number: int
    prompt_html: markupsafe.Markup
    code: str
    picked: list[str]  # the chosen options' texts (choice questions)
    text: str  # the written answer (text questions)
    result: TestResultOut | None


def quiz_answers(attempt: Submission, shown: SubmissionOut) -> list[QuizAnswer]:
    """Return the questions of a quiz ``attempt`` with the learner's answers in words and each one's result."""
    quiz = quiz_of(attempt.exercise_version)
    try:
        given = json.loads(attempt.code)
    except ValueError:
        given = {}
    results = {t.name: t for t in shown.tests}
    found = []
    for number, question in enumerate(quiz.questions, start=1):
        value = given.get(question.id) if isinstance(given, dict) else None
        options = {o.id: o.text for o in getattr(question, "options", ())}
        picked = [str(options.get(v, v)) for v in value] if isinstance(value, list) else []
        found.append(QuizAnswer(
            number=number, prompt_html=markupsafe.Markup(render_markdown(question.prompt)),  # noqa: S704 (sanitised)
            code=question.code, picked=picked, text=value if isinstance(value, str) else "",
            result=results.get(question.id),
        ))  # fmt: skip
    return found


def _opened_from(session: Session, user: User, exercise: Exercise, assignment_id: int) -> dict[str, str] | None:
    """Return the assignment the history was opened from, if ``user`` is in its course and it holds ``exercise``."""
    assignment = session.get(Assignment, assignment_id)
    if assignment is None or membership.course_role(session=session, course=assignment.course, user=user) is None:
        return None  # a link from elsewhere: the history stands without the course context
    if not any(item.exercise_id == exercise.id for item in assignment.items):
        return None
    return places_made(session=session, assignment_ids=[assignment.id]).get(assignment.id)
