"""The ``gpulab`` command line: serve, migrate, manage users, sync and check the bank, grade, run a worker.

Contract: every command reads ``Settings`` from ``GPULAB_*`` variables and has ``--help``. ``gpulab grade``
uses exactly the grading pipeline the server uses and exits 0 (passed), 1 (graded, not passed) or
2 (could not grade).
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.settings import Settings, get_settings
from worker.core.errors import GpulabError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from worker.bank.specdata import ExerciseData

EXIT_PASSED, EXIT_NOT_PASSED, EXIT_CANNOT_GRADE = 0, 1, 2
DEMO_USERS = (
    ("learner@example.com", "learner", "learner-demo"),
    ("instructor@example.com", "instructor", "instructor-demo"),
    ("admin@example.com", "admin", "admin-demo"),
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """gpulab: auto-graded multi-GPU training exercises."""


def main() -> None:
    """Run the CLI, turning configuration and domain errors into one clear line."""
    try:
        cli()
    except GpulabError as exc:
        click.echo(f"gpulab: {exc.message}", err=True)
        sys.exit(EXIT_CANNOT_GRADE)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="TCP port.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="API processes (more than one needs PostgreSQL and GPULAB_BROKER_URL).",
)
def serve(host: str, port: int, workers: int) -> None:
    """Serve the web app and API (grading in-process, or via Celery when GPULAB_BROKER_URL is set)."""
    _serve(host, port, workers)


def _log_to_stderr() -> None:
    """Show the app's and the grading's own INFO messages (recovery, prewarming) beside uvicorn's."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    for name in ("app", "worker"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)


def _refuse_workers(settings: Settings, workers: int) -> None:
    """Raise ``ClickException`` when ``workers`` API processes cannot share this deployment's state."""
    if workers == 1:
        return
    if settings.is_sqlite:
        raise click.ClickException(
            f"--workers {workers} needs PostgreSQL: SQLite takes one writer at a time, so several processes would "
            "wait on each other's locks; set GPULAB_DATABASE_URL=postgresql://... or serve with --workers 1"
        )
    if not settings.broker_url:
        raise click.ClickException(
            f"--workers {workers} needs GPULAB_BROKER_URL (Redis) and `gpulab worker` processes: without a broker "
            "each process would grade in-process and, at start-up, each would grade the others' unfinished work too"
        )


LOG_PID_FORMAT = '%(levelprefix)s [%(process)d] %(client_addr)s - "%(request_line)s" %(status_code)s'


def _log_config(workers: int) -> dict[str, Any]:
    """Return uvicorn's logging setup; with several processes each access line says which one answered."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    if workers > 1:
        config["formatters"]["access"]["fmt"] = LOG_PID_FORMAT
    return config


def _serve(host: str, port: int, workers: int = 1) -> None:
    import uvicorn

    from app.main import create_app

    _log_to_stderr()
    settings = get_settings()
    try:
        settings.session_secret()
        _refuse_workers(settings, workers)
        if not settings.broker_url:
            from worker.grading.sandbox import get_sandbox

            get_sandbox(settings).check()
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    mode = f"Celery via {settings.broker_url}" if settings.broker_url else "in-process"
    click.echo(
        f"gpulab: grading {mode}, sandbox {settings.sandbox.value}, database {_safe_url(settings.database_url)}"
        + (f", {workers} API processes" if workers > 1 else "")
    )
    # One process serves the app built here; several are each built by uvicorn from the factory, with the
    # same GPULAB_* environment (uvicorn starts them as fresh interpreters and restarts one that dies).
    app: Any = create_app(settings) if workers == 1 else "app.main:create_app"
    # timeout_keep_alive: longer than clients keep an idle connection (httpx: 5 s, like uvicorn's default), so a
    # client never reuses a connection the server is closing at that moment (a ReadError instead of an answer).
    uvicorn.run(
        app,
        factory=workers > 1,
        workers=workers if workers > 1 else None,
        host=host,
        port=port,
        log_level="info",
        log_config=_log_config(workers),
        proxy_headers=False,
        timeout_keep_alive=30,
    )


def _safe_url(url: str) -> str:
    """Hide a password in a database URL before printing it."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
    return url


@cli.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def db_upgrade(revision: str) -> None:
    """Apply Alembic migrations to GPULAB_DATABASE_URL (SQLite or PostgreSQL)."""
    from app.domain.platform.migrate import upgrade

    upgrade(revision)
    click.echo(f"database at {_safe_url(get_settings().database_url)} is at {revision}")


@cli.group()
def user() -> None:
    """User accounts."""


@user.command("add")
@click.argument("email")
@click.option("--role", type=click.Choice(["learner", "instructor", "admin"]), default="learner", show_default=True)
@click.option("--name", default="", help="The person's name, as staff see it in gradebooks and rosters.")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input (first line).")
@click.option(
    "--practice-staff/--no-practice-staff",
    default=None,
    help="Put the user on the practice course's staff (reviews practice work); instructors are by default.",
)
def user_add(email: str, name: str, role: str, password_stdin: bool, practice_staff: bool | None) -> None:
    """Create a user; the password comes from stdin, or a random one is printed."""
    from sqlalchemy import select

    from app.domain.accounts.people import create_account
    from app.domain.courses import membership
    from app.domain.models import CourseRole, Role, User
    from app.domain.platform.db import session_scope

    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else secrets.token_urlsafe(12)
    # Like migration 0017 for the instructors it found: a new site instructor reviews practice work unless told not
    # to; staff rights stay per course, so this is a membership of the practice course, nothing site-wide.
    on_practice = role == Role.instructor.value if practice_staff is None else practice_staff
    if on_practice and role == Role.learner.value:
        raise click.UsageError("a learner cannot be on the practice course's staff")
    try:
        with session_scope() as session:
            # A password is always given here (stdin or printed), so it is no one-time password to change.
            made = create_account(session=session, email=email, name=name, role=Role(role), password=password)
            user = session.scalars(select(User).where(User.email == made.email)).one()
            if on_practice:
                practice = membership.practice_course(session=session)
                membership.enroll(session=session, course=practice, user=user, role=CourseRole.instructor)
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    staff_note = " (practice course staff)" if on_practice else ""
    click.echo(f"created {role} {email}{staff_note}" + ("" if password_stdin else f" with password {password}"))


def _person(session: Session, email: str) -> Any:
    from sqlalchemy import func, select

    from app.domain.models import User

    found = session.scalar(select(User).where(func.lower(User.email) == email.strip().lower()))
    if found is None:
        raise click.ClickException(f"no account {email!r}")
    return found


@user.command("export")
@click.argument("email")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def user_export(email: str, file: Path) -> None:
    """Write everything gpulab holds about a person to FILE (a zip of JSON and code), as their account page does."""
    from app.domain.platform.db import session_scope
    from app.domain.privacy.export import export_zip

    with session_scope() as session:
        data = export_zip(session=session, user=_person(session, email))
    file.write_bytes(data)
    click.echo(f"wrote {file} ({len(data) // 1024 + 1} KiB)")


@user.command("erase")
@click.argument("email")
@click.option("--by", "by_email", required=True, help="The admin who erases (recorded in the audit trail).")
@click.option(
    "--code",
    type=click.Choice(["delete", "pseudonymize"]),
    default=None,
    help="Their submissions' code: deleted, or kept under the erased account (default: GPULAB_ERASURE_CODE).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def user_erase(email: str, by_email: str, code: str | None, yes: bool) -> None:
    """Erase a person's personal data (GDPR article 17); their grades stay as numbers, shown as "erased user"."""
    from app.domain.platform.db import session_scope
    from app.domain.privacy.erasure import erase

    policy = code or get_settings().erasure_code
    if not yes:
        click.confirm(f"Erase {email} for good (code: {policy})?", abort=True)
    try:
        with session_scope() as session:
            erase(session=session, person=_person(session, email), actor=_person(session, by_email),
                  code_policy=policy)  # type: ignore[arg-type]  # fmt: skip
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(f"erased {email} (code: {policy})")


@cli.group()
def course() -> None:
    """Courses across terms: copy one to the next term, archive a finished one."""


@course.command("copy")
@click.argument("source")
@click.argument("slug")
@click.option("--title", required=True, help="The new course's title.")
@click.option("--term", default="", help='The new term, e.g. "Spring 2027".')
@click.option("--shift-days", type=float, default=None, help="Move every date by this many days.")
@click.option("--first-due", default=None, help="Or: the new first due date (ISO 8601 with its zone).")
@click.option("--with-staff", is_flag=True, help="Bring the instructors and TAs along.")
@click.option("--by", "by_email", required=True, help="The instructor or admin who copies (the copy's instructor).")
def course_copy(
    source: str, slug: str, title: str, term: str, shift_days: float | None, first_due: str | None,
    with_staff: bool, by_email: str,
) -> None:  # fmt: skip
    """Start course SLUG from SOURCE: its assignments as drafts, every date shifted; no learners or work."""
    from datetime import datetime, timedelta

    from sqlalchemy import select

    from app.domain.courses import lifecycle
    from app.domain.models import Course
    from app.domain.platform.db import session_scope

    try:
        due = datetime.fromisoformat(first_due) if first_due else None
    except ValueError:
        raise click.BadParameter("give a date like 2027-02-01T23:59+01:00", param_hint="--first-due") from None
    if due is not None and due.tzinfo is None:
        raise click.BadParameter("give the date with its zone, e.g. 2027-02-01T23:59+01:00", param_hint="--first-due")
    try:
        with session_scope() as session:
            found = session.scalar(select(Course).where(Course.slug == source))
            if found is None:
                raise click.ClickException(f"no course {source!r}")
            made = lifecycle.copy_course(
                session=session, source=found, slug=slug, title=title, term=term, actor=_person(session, by_email),
                shift=None if shift_days is None else timedelta(days=shift_days), first_due=due,
                with_staff=with_staff,
            )  # fmt: skip
            count = len(made.assignments)
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(f"copied {source} to {slug}: {count} assignments, unpublished, dates shifted")


@course.command("archive")
@click.argument("slug")
@click.option("--by", "by_email", required=True, help="The instructor or admin who archives.")
@click.option("--undo", is_flag=True, help="Unarchive instead (admins only).")
def course_archive(slug: str, by_email: str, undo: bool) -> None:
    """Archive a course: read-only for everyone; learners still read their grades (--undo: open it again)."""
    from sqlalchemy import select

    from app.domain.courses import lifecycle
    from app.domain.models import Course
    from app.domain.platform.db import session_scope

    try:
        with session_scope() as session:
            found = session.scalar(select(Course).where(Course.slug == slug))
            if found is None:
                raise click.ClickException(f"no course {slug!r}")
            change = lifecycle.unarchive if undo else lifecycle.archive
            change(session=session, course=found, actor=_person(session, by_email))
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(f"{slug} is {'open again' if undo else 'archived'}")


@cli.command("backup")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--keep", type=click.IntRange(min=1), default=None, help="In a folder: keep only the newest N backups.")
@click.option("--daily-at", default=None, help="Keep running: one backup into the folder every day at HH:MM UTC.")
def backup_command(target: Path, keep: int | None, daily_at: str | None) -> None:
    """Write a consistent backup of everything gpulab keeps to TARGET (a .zip file, or a folder for dated ones)."""
    import time
    from datetime import UTC, datetime

    from app.domain.operations.backup import next_daily

    folder = target.is_dir() or str(target).endswith("/") or daily_at is not None
    if keep is not None and not folder:
        raise click.UsageError("--keep needs a folder as TARGET")
    if daily_at is None:
        _backup_once(target, folder=folder, keep=keep)
        return
    target.mkdir(parents=True, exist_ok=True)
    while True:  # the compose service `backup`: nightly, with the retention rule of --keep
        due = next_daily(datetime.now(UTC), daily_at)
        click.echo(f"next backup at {due.isoformat()}")
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        try:
            _backup_once(target, folder=True, keep=keep)
        except Exception as exc:  # one failed night is reported; the next one is tried
            click.echo(f"gpulab: the backup failed: {exc}", err=True)


def _backup_once(target: Path, *, folder: bool, keep: int | None) -> None:
    from datetime import UTC, datetime

    from app.domain.operations.backup import backup, prune

    path = target / f"gpulab-{datetime.now(UTC):%Y%m%d-%H%M%S}.zip" if folder else target
    manifest = backup(database_url=get_settings().database_url, path=path)
    rows = sum(manifest.counts().values())
    click.echo(f"wrote {path}: schema {manifest.schema_revision}, {len(manifest.tables)} tables, {rows} rows")
    if keep is not None:
        for old in prune(path.parent, keep=keep):
            click.echo(f"removed {old} (older than the newest {keep})")


@cli.command("restore")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--database-url", default=None, help="Restore into this database (default: GPULAB_DATABASE_URL).")
@click.option("--replace", is_flag=True, help="Delete everything in the target database first.")
def restore_command(file: Path, database_url: str | None, replace: bool) -> None:
    """Restore a backup into a fresh install (any database: SQLite onto PostgreSQL too), migrated to this version."""
    from app.domain.operations.backup import restore

    url = database_url or get_settings().database_url
    try:
        done = restore(path=file, database_url=url, replace=replace)
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    m = done.manifest
    click.echo(
        f"restored {file} ({m.source}, schema {m.schema_revision}, gpulab {m.app_version}, {m.created_at}) into "
        f"{_safe_url(url)}: {sum(done.counts.values())} rows; migrated to the newest schema"
    )


@cli.group()
def exercises() -> None:
    """The exercise bank."""


@exercises.command("sync")
@click.argument("directory", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
def exercises_sync(directory: Path | None) -> None:
    """Load the bank folder into the database; a changed exercise becomes a new version."""
    from app.domain.exercises.bank import sync_bank
    from app.domain.platform.db import session_scope

    root = directory or get_settings().exercises_dir
    try:
        with session_scope() as session:
            report = sync_bank(session=session, root=root)
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    for label, slugs in (("new", report.created), ("new version", report.updated), ("unpublished", report.unpublished)):
        for slug in slugs:
            click.echo(f"{label:>12}: {slug}")
    if report.path != "unchanged":
        click.echo(f"{'learning path':>12}: {report.path}")
    click.echo(f"synced {len(report.created) + len(report.updated) + len(report.unchanged)} exercises from {root}")


@exercises.command("check")
@click.argument("slugs", nargs=-1)
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None)
@click.option(
    "--jobs", default=1, show_default=True, type=click.IntRange(min=1),
    help="Variants graded at once (up to the machine's cores is sensible).",
)  # fmt: skip
def exercises_check(slugs: tuple[str, ...], directory: Path | None, jobs: int) -> None:
    """Grade each reference solution (full marks) and wrong variant (must not pass) in the real sandbox."""
    from worker.grading.bankcheck import check_bank
    from worker.grading.sandbox import get_sandbox

    settings = get_settings()
    try:
        sandbox = get_sandbox(settings)
        sandbox.check()
        root = directory or settings.exercises_dir
        problems = check_bank(root, slugs, sandbox=sandbox, echo=click.echo, jobs=jobs)
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    if problems:
        click.echo(f"{len(problems)} problem(s):", err=True)
        for problem in problems:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)
    click.echo("all exercises check out")


def _variant(spec: ExerciseData, texts: tuple[str, ...]) -> dict[str, int | float | str]:
    """Return the default variant of ``spec`` with each ``NAME=VALUE`` of ``texts`` in place; refuse what it lacks."""
    params = spec.default_params
    offered = {p.name: p.values for p in spec.params}
    for text in texts:
        name, _, raw = text.partition("=")
        if name not in offered:
            names = ", ".join(offered) or "none"
            raise GpulabError(f"--param {text!r}: {spec.slug} has no parameter {name!r} ({names})")
        value = next((v for v in offered[name] if str(v) == raw.strip()), None)
        if value is None:
            choices = ", ".join(map(str, offered[name][:12])) + ("..." if len(offered[name]) > 12 else "")
            raise GpulabError(f"--param {text!r}: {name} takes one of {choices}")
        params[name] = value
    return params


@cli.command()
@click.argument("slug")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result object as JSON.")
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None)
@click.option(
    "--param", "param_texts", multiple=True, metavar="NAME=VALUE",
    help="A parameter of the variant to grade in (repeatable); the others keep their default.",
)  # fmt: skip
def grade(slug: str, file: Path, as_json: bool, directory: Path | None, param_texts: tuple[str, ...]) -> None:
    """Grade FILE against exercise SLUG from the bank folder (no server or database needed).

    An exercise with parameters is graded in its default variant, or the one --param names; FILE's
    {{ params.NAME }} placeholders (a bank file's) are filled in for it, as `exercises check` does.
    """
    from worker.bank.spec import load_exercise
    from worker.bank.specdata import render_params
    from worker.core.outcome import Verdict
    from worker.grading.pipeline import grade as grade_code
    from worker.grading.sandbox import get_sandbox

    settings = get_settings()
    folder = (directory or settings.exercises_dir) / slug
    try:
        if not (folder / "exercise.toml").is_file():
            raise GpulabError(f"no exercise {slug!r} in {folder.parent}")
        spec = load_exercise(folder)
        params = _variant(spec, param_texts)
        code = render_params(file.read_text(encoding="utf-8"), params)
        sandbox = get_sandbox(settings)
        sandbox.check()
        outcome = grade_code(spec, code, sandbox=sandbox, params=params)
    except (GpulabError, UnicodeDecodeError, OSError) as exc:
        message = exc.message if isinstance(exc, GpulabError) else str(exc)
        if as_json:
            click.echo(json.dumps({"verdict": None, "error": message}))
        else:
            click.echo(f"cannot grade: {message}", err=True)
        sys.exit(EXIT_CANNOT_GRADE)
    if as_json:
        click.echo(json.dumps(outcome.to_json(), indent=2))
    else:
        click.echo(
            f"{spec.slug}: {outcome.verdict.value}  {outcome.score:g}/{outcome.max_score:g}  on {outcome.device}"
        )
        for test in outcome.tests:
            click.echo(f"  [{test.outcome.value:>7}] {test.name} ({test.points:g}/{test.max_points:g})")
            if test.message and test.outcome.value != "passed":
                click.echo("            " + test.message.replace("\n", "\n            "))
            if test.details and test.outcome.value != "passed":
                click.echo("            details: " + test.details.replace("\n", "\n              "))
        if outcome.message:
            click.echo(outcome.message)
    if outcome.verdict is Verdict.passed:
        sys.exit(EXIT_PASSED)
    sys.exit(EXIT_CANNOT_GRADE if outcome.verdict is Verdict.internal_error else EXIT_NOT_PASSED)


@cli.command()
@click.option(
    "--queues", default="cpu,gpu", show_default=True,
    help="Comma-separated queues to consume: cpu, gpu, and their example-run lanes examples-cpu, examples-gpu.",
)  # fmt: skip
@click.option("--concurrency", default=None, type=int, help="Parallel gradings (default: GPULAB_GRADING_WORKERS).")
@click.option(
    "--examples-concurrency", default=2, show_default=True, type=click.IntRange(min=0),
    help="Parallel example runs in a companion process that consumes the example-run lane of each grading queue, "
    "so example runs stay interactive while gradings fill the pool; 0 consumes the lanes in the grading pool.",
)  # fmt: skip
def worker(queues: str, concurrency: int | None, examples_concurrency: int) -> None:
    """Run a Celery grading worker (needs GPULAB_BROKER_URL); it also serves the example runs of its queues."""
    settings = get_settings()
    if not settings.broker_url:
        raise click.ClickException("set GPULAB_BROKER_URL (e.g. redis://127.0.0.1:6379/0) to run a worker")
    from app.domain.platform.queues import ALL_QUEUES, EXAMPLE_LANES
    from app.jobs.celery_app import celery_app
    from worker.grading.sandbox import get_sandbox

    wanted = list(dict.fromkeys(q.strip() for q in queues.split(",") if q.strip()))
    known = ALL_QUEUES
    unknown = set(wanted) - set(known)
    if unknown or not wanted:
        raise click.ClickException(
            f"unknown queue(s) {', '.join(sorted(unknown)) or '(none)'}; choose from {','.join(known)}"
        )
    lanes = [EXAMPLE_LANES[q] for q in wanted if q in EXAMPLE_LANES and EXAMPLE_LANES[q] not in wanted]
    try:
        get_sandbox(settings).check()
        _recheck_gpus(settings)
    except GpulabError as exc:
        raise click.ClickException(exc.message) from exc
    if examples_concurrency == 0:
        wanted += lanes  # the lanes share the grading pool: an example run may wait behind long gradings
        lanes = []
    # Started before any thread of ours exists (prewarm), as the companion is forked from this process.
    companion = _start_example_lane(lanes, examples_concurrency) if lanes else None
    import signal

    from app.jobs.prewarm import prewarm_in_background
    from worker.grading.sandbox import close_warm_pools

    # Until Celery installs its warm shutdown, a SIGTERM (docker stop during start-up) still unwinds through the
    # finally below, which closes the warm pools the prewarm is filling.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)

    prewarm_in_background(settings)  # warm templates start while the worker connects to the broker
    argv = [
        "worker",
        f"--queues={','.join(wanted)}",
        f"--concurrency={concurrency or settings.grading_workers}",
        "--pool=threads",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    if all(q in EXAMPLE_LANES.values() for q in wanted):
        argv.append("--hostname=examples@%h")
    try:
        celery_app.worker_main(argv)
    finally:
        close_warm_pools()  # also done at Celery's worker_shutdown; closing twice is harmless
        if companion is not None:
            _stop_example_lane(companion)


def _recheck_gpus(settings: Settings) -> None:
    """Forget the GPUs an earlier run found broken (reset or replaced since?) and look at each one again."""
    from worker.grading.sandbox.gpu_health import FailedGpus, probe
    from worker.grading.sandbox.gpus import parse_gpu_ids

    ids = parse_gpu_ids(settings.gpu_ids)
    if not ids:
        return
    failed = FailedGpus(settings.data_dir / "gpu-locks")
    failed.clear(ids)
    for gpu_id, problem in probe(ids, dev_root=settings.gpu_dev_root, proc_root=settings.gpu_proc_root).items():
        failed.mark(gpu_id, problem)
        click.echo(f"gpulab: GPU {gpu_id} takes no job: {problem}", err=True)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """Leave through ``SystemExit`` (so ``finally`` blocks run) with the status a SIGTERM'd process has."""
    import os
    import threading

    # Python drops an exception raised while a weakref callback or __del__ runs ("Exception ignored in ..."), and
    # the signal may land just then: the signal is sent again shortly, so one unlucky moment cannot keep us alive.
    def again() -> None:
        os.kill(os.getpid(), signum)

    timer = threading.Timer(1.0, again)
    timer.daemon = True  # never what keeps the process from exiting
    timer.start()
    raise SystemExit(128 + signum)


EXAMPLE_LANE_STOP_S = 30.0


def _start_example_lane(lanes: list[str], concurrency: int) -> subprocess.Popen[bytes]:
    """Start ``gpulab worker`` on the example-run lanes as a child that gets SIGTERM if this process dies."""
    import os

    env = {**os.environ, "GPULAB_GRADING_WORKERS": str(concurrency)}  # its warm templates, sized to its pool
    command = [sys.executable, "-c", "from app.cli import main; main()", "worker", f"--queues={','.join(lanes)}"]
    command.append(f"--concurrency={concurrency}")
    click.echo(f"gpulab worker: example runs of {', '.join(lanes)} in a companion process ({concurrency} at once)")
    return subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    """Ask Linux to send this child SIGTERM when its parent exits, even by SIGKILL."""
    import contextlib
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):  # not Linux: the parent still stops it on an orderly exit
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop_example_lane(companion: subprocess.Popen[bytes]) -> None:
    """Stop the example-lane companion the way Celery stops: SIGTERM (warm shutdown), then SIGKILL."""
    if companion.poll() is None:
        companion.terminate()
        try:
            companion.wait(timeout=EXAMPLE_LANE_STOP_S)
        except subprocess.TimeoutExpired:
            companion.kill()
            companion.wait()


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def demo(host: str, port: int) -> None:
    """Migrate, load the bank, create demo accounts, print them, and serve."""
    from sqlalchemy import select

    from app.domain.accounts.passwords import create_user
    from app.domain.exercises.bank import sync_bank
    from app.domain.models import Role, User
    from app.domain.platform.db import session_scope
    from app.domain.platform.migrate import upgrade

    settings = get_settings()
    upgrade("head")
    with session_scope() as session:
        report = sync_bank(session=session, root=settings.exercises_dir)
        for email, role, password in DEMO_USERS:
            if session.scalar(select(User).where(User.email == email)) is None:
                create_user(session=session, email=email, password=password, role=Role(role))
        session.flush()
        demo_course(session=session)
    count = len(report.created) + len(report.updated) + len(report.unchanged)
    click.echo("")
    click.echo(f"  gpulab demo: {count} exercises loaded, data in {settings.data_dir}")
    click.echo(f"  open http://{host}:{port}/  and log in as one of:")
    for email, role, password in DEMO_USERS:
        click.echo(f"    {role:<10} {email:<24} password: {password}")
    click.echo(f"  the learner is enrolled in /courses/{DEMO_COURSE}: one assignment, due a week from its creation")
    click.echo("")
    _serve(host, port)


DEMO_COURSE = "multi-gpu-demo"
DEMO_ASSIGNMENT = ["python-split-batch", "torch-dataparallel", "quiz-torch-dataparallel-why"]


def demo_course(*, session: Session) -> None:
    """Create the demo course once: the demo instructor teaches it, the demo learner is enrolled, one assignment."""
    from datetime import timedelta

    from sqlalchemy import select

    from app.domain.courses import coursework, membership
    from app.domain.models import Course, CourseRole, Exercise, User, utcnow

    if session.scalar(select(Course).where(Course.slug == DEMO_COURSE)) is not None:
        return
    teacher = session.scalar(select(User).where(User.email == DEMO_USERS[1][0]))
    learner = session.scalar(select(User).where(User.email == DEMO_USERS[0][0]))
    if teacher is None or learner is None:
        return
    title = "Multi-GPU training (demo)"
    course = membership.create_course(session=session, slug=DEMO_COURSE, title=title, creator=teacher)
    membership.enroll(session=session, course=course, user=learner, role=CourseRole.learner)
    # The demo instructor reviews practice work too: staff rights are per course, the practice course's included.
    practice = membership.practice_course(session=session)
    membership.enroll(session=session, course=practice, user=teacher, role=CourseRole.instructor)
    present = set(session.scalars(select(Exercise.slug).where(Exercise.slug.in_(DEMO_ASSIGNMENT))))
    due_at = (utcnow() + timedelta(days=7)).replace(hour=17, minute=0, second=0, microsecond=0)
    fields = coursework.AssignmentFields(
        title="Week 1: data parallelism", opens_at=utcnow() - timedelta(days=1), due_at=due_at,
        late_until=due_at + timedelta(days=2), late_credit_pct=50, max_attempts=5, rate_burst=3, rate_refill_s=300,
    )  # fmt: skip
    items = [(slug, 1.0) for slug in DEMO_ASSIGNMENT if slug in present]
    coursework.create_assignment(session=session, course=course, fields=fields, items=items, actor=teacher)


if __name__ == "__main__":  # pragma: no cover
    main()
