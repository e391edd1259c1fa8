"""Instructor pages under ``/instructor``: author or upload exercises, check and publish versions, preview them as
a learner, review submissions and regrade them, and see what the class gets wrong.

Contract: instructors and admins only (``InstructorDep``); every POST is an HTML form with the session's CSRF
token, answers with a redirect (POST-redirect-GET) or, when the input is refused, the same form again with the
error and the input kept. A refused upload or draft writes nothing. Checks and regrades run in the background;
their pages poll ``/api/instructor/...`` for progress. Learners' work (an exercise's submissions, one submission,
its insights, what a regrade reaches) is that of the courses the viewer staffs (``WorkScopeDep``,
``StaffSubmissionDep``: ``app.domain.courses.policy``); authoring the bank is the site role's.
"""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from app.domain.courses import policy
from app.domain.courses.assignments import places_made
from app.domain.exercises import authoring
from app.domain.exercises.authoring import AuthoringForm, WrongForm
from app.domain.exercises.checks import create_check
from app.domain.models import Exercise, GradingRecord, Submission, User
from app.domain.review.insights import exercise_insights
from app.domain.review.listing import VERDICT_CHOICES, SubmissionFilter, filter_submissions
from app.domain.submissions.regrade import history, settled_submissions, start_regrade
from app.web.deps import (
    DispatcherDep,
    InstructorDep,
    RegradeDep,
    SessionDep,
    StaffExerciseDep,
    StaffSubmissionDep,
    StaffVersionDep,
    WorkScopeDep,
)
from app.web.pages import FORM_CSRF, flash, redirect, render
from app.web.schemas.exercises import ExerciseDetail
from worker.bank.folders import MAX_ZIP_BYTES, read_zip
from worker.bank.spec import DIFFICULTIES, FRAMEWORKS, QUEUES
from worker.core.errors import GpulabError, InvalidInput, NotFound

log = logging.getLogger(__name__)
router = APIRouter(prefix="/instructor", include_in_schema=False, dependencies=[FORM_CSRF])
CHOICES = {"difficulties": DIFFICULTIES, "frameworks": FRAMEWORKS, "queues": QUEUES}


def _exercise_url(slug: str) -> str:
    return f"/instructor/exercises/{quote(slug)}"


@router.get("")
def index(request: Request, user: InstructorDep, session: SessionDep) -> Response:
    exercises = list(session.scalars(select(Exercise).order_by(Exercise.slug)))
    return render(request, "instructor/index.html", user=user, exercises=exercises, upload_error="")


@router.post("/upload")
async def upload(
    request: Request,
    user: InstructorDep,
    session: SessionDep,
    archive: Annotated[UploadFile, File()],
    slug: Annotated[str, Form()] = "",
) -> Response:
    data = await archive.read(MAX_ZIP_BYTES + 1)
    # Unzipping, checking and storing block: off the event loop, which serves every other request meanwhile.
    return await run_in_threadpool(_store_upload, request, user, session, data, archive.filename or "", slug)


def _store_upload(request: Request, user: User, session: Session, data: bytes, filename: str, slug: str) -> Response:
    try:
        folder = read_zip(data)
        name = slug.strip() or folder.slug_hint or filename.removesuffix(".zip")
        spec = authoring.validate(name, folder.files)
        version, new = authoring.add_draft(session=session, spec=spec, source="upload", user=user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        exercises = list(session.scalars(select(Exercise).order_by(Exercise.slug)))
        return render(
            request, "instructor/index.html", status_code=422, user=user, exercises=exercises,
            upload_error=f"Upload refused: {exc.message}",
        )  # fmt: skip
    flash(request, f"Uploaded as draft version {version.number}." if new else "Same content as an existing version.")
    return redirect(f"{_exercise_url(spec.slug)}/versions/{version.number}")


@router.get("/new")
def new_form(
    request: Request,
    user: InstructorDep,
    session: SessionDep,
    from_slug: Annotated[str, Query(alias="from")] = "",
    number: Annotated[int, Query(alias="version")] = 0,
) -> Response:
    form = AuthoringForm(slug="", title="", prompt_md="Explain the idea, then the exact task.\n")
    carried: list[str] = []
    if from_slug:
        exercise = session.scalar(select(Exercise).where(Exercise.slug == from_slug))
        version = authoring.get_version(session=session, exercise=exercise, number=number) if exercise else None
        if version is None:
            raise NotFound(f"no version {number} of {from_slug!r}")
        form, carried = authoring.form_from_version(version), authoring.carried_over(dict(version.files))
    return _author_page(request, user, form, carried, from_slug, number)


def _author_page(
    request: Request, user: object, form: AuthoringForm, carried: list[str], base_slug: str, base_number: int,
    error: str = "", status_code: int = 200,
) -> Response:  # fmt: skip
    return render(
        request, "instructor/author.html", status_code=status_code, user=user, form=form, carried=carried,
        base_slug=base_slug, base_number=base_number, error=error, **CHOICES,
    )  # fmt: skip


def _form_from(data: FormData) -> AuthoringForm:
    def text(key: str, default: str = "") -> str:
        value = data.get(key, default)
        return value if isinstance(value, str) else default

    def texts(key: str) -> list[str]:
        return [v if isinstance(v, str) else "" for v in data.getlist(key)]

    names, codes, fails, whys = texts("wrong_name"), texts("wrong_code"), texts("wrong_must_fail"), texts("wrong_why")
    feedbacks = texts("wrong_feedback")
    feedbacks += [""] * (len(names) - len(feedbacks))  # a page from before the field existed sends none
    wrong = [
        WrongForm(
            name=n, code=c, must_fail=[m for m in f.replace(",", "\n").splitlines() if m.strip()], why=w, feedback=b
        )
        for n, c, f, w, b in zip(names, codes, fails, whys, feedbacks, strict=False)
    ]
    try:
        timeout_s, memory_mb = float(text("timeout_s", "30")), int(text("memory_mb", "1024"))
    except ValueError as exc:
        raise InvalidInput("the time limit and the memory limit must be numbers") from exc
    return AuthoringForm(
        slug=text("slug").strip(), title=text("title"), topic=text("topic"), difficulty=text("difficulty"),
        framework=text("framework"), queue=text("queue"), timeout_s=timeout_s, memory_mb=memory_mb,
        prompt_md=text("prompt_md"), starter=text("starter"), solution=text("solution"),
        test_file=text("test_file") or "test_exercise.py", tests=text("tests"), wrong=wrong,
        rubric=text("rubric"), rubric_comments=text("rubric_comments"),
    )  # fmt: skip


@router.post("/new")
async def save_draft(request: Request, user: InstructorDep, session: SessionDep) -> Response:
    data = await request.form()
    return await run_in_threadpool(_store_draft, request, user, session, data)  # database work: off the loop


def _store_draft(request: Request, user: User, session: Session, data: FormData) -> Response:
    base_slug, base_number = str(data.get("base_slug", "")), str(data.get("base_number", "0"))
    form = AuthoringForm(slug=str(data.get("slug", "")), title=str(data.get("title", "")))
    carried: list[str] = []
    try:
        form = _form_from(data)
        base = None
        if base_slug:
            exercise = session.scalar(select(Exercise).where(Exercise.slug == base_slug))
            number = int(base_number) if base_number.isdigit() else 0
            version = authoring.get_version(session=session, exercise=exercise, number=number) if exercise else None
            base = dict(version.files) if version else None
            carried = authoring.carried_over(base) if base else []
        files = authoring.files_from_form(form, base)
        spec = authoring.validate(form.slug, files)
        version, new = authoring.add_draft(session=session, spec=spec, source="editor", user=user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        number = int(base_number) if base_number.isdigit() else 0
        return _author_page(request, user, form, carried, base_slug, number, error=exc.message, status_code=422)
    flash(request, f"Saved as draft version {version.number}." if new else "Nothing changed: same as that version.")
    return redirect(f"{_exercise_url(spec.slug)}/versions/{version.number}")


@router.get("/exercises/{slug}")
def exercise_page(request: Request, user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep) -> Response:
    versions = list(reversed(exercise.versions))
    checks = {v.id: authoring.latest_check(session=session, version=v) for v in versions}
    states = {v.id: authoring.version_state(exercise, v) for v in versions}
    return render(
        request, "instructor/exercise.html", user=user, exercise=exercise, versions=versions, checks=checks,
        states=states,
    )  # fmt: skip


@router.get("/exercises/{slug}/versions/{number}")
def version_page(
    request: Request, user: InstructorDep, exercise: StaffExerciseDep, version: StaffVersionDep, session: SessionDep
) -> Response:
    check = authoring.latest_check(session=session, version=version)
    return render(
        request, "instructor/version.html", user=user, exercise=exercise, version=version, check=check,
        state=authoring.version_state(exercise, version), files=sorted(version.files),
    )  # fmt: skip


@router.post("/exercises/{slug}/versions/{number}/check")
def start_check(
    request: Request, user: InstructorDep, version: StaffVersionDep, session: SessionDep, starter: DispatcherDep
) -> Response:
    check = create_check(session=session, version=version, user=user)
    session.commit()
    try:
        starter.start_check(check.id, version.queue)
    except Exception:  # committed and stamped: the sweeper sends it once the broker is back
        log.exception("could not send check %s to %s; it stays queued", check.id, version.queue)
    flash(request, "Check started: the solution and every variant are graded in the sandbox.")
    return redirect(f"{_exercise_url(version.exercise.slug)}/versions/{version.number}")


@router.post("/exercises/{slug}/versions/{number}/publish")
def publish(
    request: Request, _user: InstructorDep, exercise: StaffExerciseDep, version: StaffVersionDep, session: SessionDep
) -> Response:
    try:
        authoring.publish(session=session, exercise=exercise, version=version)
        session.commit()
        flash(request, f"Version {version.number} is live: learners now get it.")
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
    return redirect(f"{_exercise_url(exercise.slug)}/versions/{version.number}")


@router.post("/exercises/{slug}/unpublish")
def unpublish(request: Request, _user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep) -> Response:
    authoring.unpublish(exercise=exercise)
    session.commit()
    flash(request, "Unpublished: learners no longer see this exercise.")
    return redirect(_exercise_url(exercise.slug))


@router.get("/exercises/{slug}/versions/{number}/preview")
def preview(request: Request, user: InstructorDep, exercise: StaffExerciseDep, version: StaffVersionDep) -> Response:
    detail = ExerciseDetail.of(exercise, version)  # exactly what a learner would receive
    return render(request, "instructor/preview.html", user=user, ex=detail, exercise=exercise, version=version)


@router.get("/exercises/{slug}/submissions")
def submissions_page(
    request: Request,
    user: InstructorDep,
    exercise: StaffExerciseDep,
    work: WorkScopeDep,
    session: SessionDep,
    learner: str = "",
    verdict: str = "",
    since: str = "",
    until: str = "",
) -> Response:
    filters = SubmissionFilter(learner=learner, verdict=verdict, since=since, until=until)
    error = ""
    try:
        rows = filter_submissions(session=session, exercise=exercise, scope=work, filters=filters)
    except GpulabError as exc:
        rows, error = [], exc.message
    where = places_made(session=session, assignment_ids=[s.assignment_id for s in rows])
    return render(
        request, "instructor/submissions.html", user=user, exercise=exercise, rows=rows, filters=filters,
        verdicts=VERDICT_CHOICES, error=error, versions=list(reversed(exercise.versions)), where=where,
    )  # fmt: skip


@router.get("/submissions/{submission_id}")
def submission_page(
    request: Request, user: InstructorDep, submission: StaffSubmissionDep, session: SessionDep
) -> Response:
    exercise = submission.exercise_version.exercise
    return render(
        request, "instructor/submission.html", user=user, s=submission, exercise=exercise,
        records=history(session=session, submission=submission), versions=list(reversed(exercise.versions)),
    )  # fmt: skip


@router.get("/exercises/{slug}/insights")
def insights_page(
    request: Request, user: InstructorDep, exercise: StaffExerciseDep, work: WorkScopeDep, session: SessionDep
) -> Response:
    found = exercise_insights(session=session, exercise=exercise, scope=work)
    return render(request, "instructor/insights.html", user=user, exercise=exercise, ins=found, scope=None)


@router.post("/exercises/{slug}/regrade")
def regrade(
    request: Request,
    user: InstructorDep,
    exercise: StaffExerciseDep,
    work: WorkScopeDep,
    session: SessionDep,
    dispatcher: DispatcherDep,
    version: Annotated[int, Form()] = 0,
    submission_id: Annotated[str, Form()] = "",
) -> Response:
    target = authoring.get_version(session=session, exercise=exercise, number=version) if version else None
    target = target or exercise.current_version
    back = f"/instructor/submissions/{quote(submission_id)}" if submission_id else _exercise_url(exercise.slug)
    if target is None:
        flash(request, "This exercise has no version to grade against.", "error")
        return redirect(back)
    if submission_id:
        one = session.get(Submission, submission_id[:64])
        if one is None or not policy.may_view_work(session=session, user=user, work=one):
            raise NotFound(f"no submission {submission_id[:64]!r}")
        chosen = [one]
    else:  # the work of the courses they staff, never another course's
        chosen = settled_submissions(session=session, exercise=exercise, within=work.submissions())
    try:
        job, jobs = start_regrade(session=session, exercise=exercise, target=target, submissions=chosen, user=user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
        return redirect(back)
    for sid, queue in jobs:
        try:
            dispatcher.dispatch(sid, queue)
        except Exception:  # committed and queued: recovery at the next start dispatches it
            log.exception("could not dispatch regrade of %s", sid)
    return redirect(f"/instructor/regrades/{job.id}")


@router.get("/regrades/{regrade_id}")
def regrade_page(
    request: Request, user: InstructorDep, job: RegradeDep, work: WorkScopeDep, session: SessionDep
) -> Response:
    exercise = session.get(Exercise, job.exercise_id)
    regraded = select(GradingRecord.submission_id).join(Submission, GradingRecord.submission_id == Submission.id)
    ids = list(session.scalars(regraded.where(GradingRecord.regrade_id == job.id, work.submissions())))
    return render(request, "instructor/regrade.html", user=user, job=job, exercise=exercise, ids=ids)
