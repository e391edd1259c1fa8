"""Admin pages under ``/admin``: the dashboard (grades, queues, worker liveness, stranded work), the grades CSV,
and user management.

Contract: admins only (``AdminDep``); every POST is an HTML form carrying the session's CSRF token. Pages
that reveal a new password render it once in the response (never in a cookie, never in a redirect URL).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.domain.accounts import people
from app.domain.models import Role, User
from app.domain.operations import liveness
from app.domain.operations.dashboard import grade_matrix, grades_csv, score_chart_svg, timing
from app.domain.privacy import erasure
from app.jobs.queue_state import queue_state
from app.settings import get_settings
from app.web.deps import AdminDep, SessionDep, SettingsDep, UserDep
from app.web.pages import FORM_CSRF, flash, redirect, render
from worker.core.errors import GpulabError, InvalidInput

router = APIRouter(prefix="/admin", include_in_schema=False, dependencies=[FORM_CSRF])


@router.get("")
def dashboard(request: Request, user: AdminDep, session: SessionDep, settings: SettingsDep) -> Response:
    matrix = grade_matrix(session=session)
    charts = {row.slug: score_chart_svg(row.fractions) for row in matrix.exercises}
    return render(
        request, "admin/dashboard.html", user=user, matrix=matrix, charts=charts, timing=timing(session=session),
        queues=queue_state(session=session, settings=settings),
        health=liveness.overview(session=session, settings=settings, now=datetime.now(UTC)),
    )  # fmt: skip


@router.get("/grades.csv")
def grades(_user: AdminDep, session: SessionDep) -> Response:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M")
    return Response(
        grades_csv(grade_matrix(session=session)),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="gpulab-grades-{stamp}.csv"'},
    )


def _users_page(request: Request, user: User, session: SessionDep, status_code: int = 200, **extra: object) -> Response:
    users = list(session.scalars(select(User).order_by(User.role, User.email)))
    context: dict[str, object] = {"created": [], "errors": [], "error": "", **extra}
    return render(request, "admin/users.html", status_code=status_code, user=user, users=users, roles=list(Role),
                  erasure_code=get_settings().erasure_code, **context)  # fmt: skip


@router.get("/users")
def users_page(request: Request, user: AdminDep, session: SessionDep) -> Response:
    return _users_page(request, user, session)


@router.post("/users")
def create_user(
    request: Request,
    user: AdminDep,
    session: SessionDep,
    email: Annotated[str, Form()],
    role: Annotated[str, Form()] = "learner",
    name: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
) -> Response:
    try:
        if role not in Role.__members__:
            raise InvalidInput(f"unknown role {role!r}")
        account = people.create_account(session=session, email=email, name=name, role=Role(role), password=password)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _users_page(request, user, session, status_code=422, error=exc.message)
    if password:
        account.password = ""  # the admin chose it: do not echo it back
    return _users_page(request, user, session, created=[account])


@router.post("/users/{user_id}/role")
def change_role(
    request: Request, user: AdminDep, target: UserDep, session: SessionDep, role: Annotated[str, Form()]
) -> Response:
    try:
        if role not in Role.__members__:
            raise InvalidInput(f"unknown role {role!r}")
        people.set_role(session=session, actor=user, user=target, role=Role(role))
        session.commit()
        flash(request, f"{target.email} is now {role}.")
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
    return redirect("/admin/users")


@router.post("/users/{user_id}/active")
def change_active(
    request: Request, user: AdminDep, target: UserDep, session: SessionDep, active: Annotated[str, Form()]
) -> Response:
    try:
        people.set_active(session=session, actor=user, user=target, active=active == "1")
        session.commit()
        flash(request, f"{target.email} is {'enabled' if target.is_active else 'disabled'}.")
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
    return redirect("/admin/users")


@router.post("/users/{user_id}/password")
def new_password(request: Request, user: AdminDep, target: UserDep, session: SessionDep) -> Response:
    password = people.reset_password(session=session, user=target)
    session.commit()
    account = people.NewAccount(email=target.email, name=target.name, role=target.role.value, password=password)
    return _users_page(request, user, session, created=[account])


@router.post("/users/{user_id}/erase")
def erase_user(
    request: Request, user: AdminDep, target: UserDep, session: SessionDep, settings: SettingsDep,
    confirm_email: Annotated[str, Form(max_length=400)] = "",
) -> Response:  # fmt: skip
    """Erase a person (``app.domain.privacy.erasure``), their address typed again as a safeguard."""
    was = target.email
    try:
        if confirm_email.strip().lower() != target.email.lower():
            raise InvalidInput(f"type {target.email} exactly to confirm the erasure: nothing was erased")
        erasure.erase(session=session, person=target, actor=user, code_policy=settings.erasure_code)
        session.commit()
        flash(request, f'{was} is erased: their grades stay, shown as "erased user".')
    except GpulabError as exc:
        session.rollback()
        flash(request, exc.message, "error")
    return redirect("/admin/users")


@router.post("/users/import")
async def import_users(
    request: Request, user: AdminDep, session: SessionDep, file: Annotated[UploadFile, File()]
) -> Response:
    data = await file.read(people.MAX_IMPORT_BYTES + 1)
    # Hashing a password per row and the database work block: off the event loop.
    return await run_in_threadpool(_import_users, request, user, session, data)


def _import_users(request: Request, user: User, session: Session, data: bytes) -> Response:
    try:
        report = people.import_csv(session=session, data=data)
    except GpulabError as exc:
        session.rollback()
        return _users_page(request, user, session, status_code=422, error=f"Nothing imported: {exc.message}")
    if report.errors:
        session.rollback()
        return _users_page(request, user, session, status_code=422, errors=report.errors,
                           error="Nothing imported: fix these rows and upload the file again.")  # fmt: skip
    session.commit()
    return _users_page(request, user, session, created=report.created)
