"""Alembic migrations build the schema the models describe, on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.domain.platform.db import engine_for
from app.domain.platform.migrate import alembic_config, upgrade
from tests.support import fresh_postgres_db, require_service

TABLES = {
    "users", "exercises", "exercise_versions", "submissions", "test_results", "alembic_version",
    "courses", "course_members", "assignments", "assignment_items", "extensions", "grade_overrides",
    "lti_platforms", "lti_tool_keys", "lti_nonces", "lti_users", "lti_contexts", "lti_links", "lti_score_outbox",
    "api_tokens", "learning_paths",
}  # fmt: skip


def _round_trip(url: str) -> None:
    upgrade("head", database_url=url)
    assert set(inspect(engine_for(url)).get_table_names()) >= TABLES
    with engine_for(url).connect() as conn:  # 0004 opens the practice catalogue, as before courses
        assert conn.execute(text("SELECT slug FROM courses WHERE is_practice")).scalars().all() == ["practice"]
    command.check(alembic_config(url))  # raises if the models drifted from the migrations
    command.downgrade(alembic_config(url), "base")
    assert set(inspect(engine_for(url)).get_table_names()) <= {"alembic_version"}
    upgrade("head", database_url=url)


def test_migrations_on_sqlite(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'm.db'}")


@pytest.mark.postgres
def test_migrations_on_postgres() -> None:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    url = fresh_postgres_db("gpulab_migrations_test")
    try:
        _round_trip(url)
    finally:
        engine_for(url).dispose()


def test_0013_adds_api_tokens_to_a_database_with_users_and_takes_only_them_away(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tokens.db'}"
    upgrade("0011", database_url=url)
    with engine_for(url).begin() as conn:
        conn.execute(text("INSERT INTO users (email, password_hash, role, is_active, name, created_at) "
                          "VALUES ('a@example.com', 'x', 'learner', 1, '', '2026-12-02 00:00:00')"))  # fmt: skip
    upgrade("0013", database_url=url)
    with engine_for(url).begin() as conn:
        conn.execute(text(
            "INSERT INTO api_tokens (user_id, name, prefix, token_hash, scopes, created_at) "
            "SELECT id, 'laptop', 'gpl_abcdefgh', :h, '[\"read\"]', '2026-12-02 00:00:00' FROM users"
        ), {"h": "0" * 64})  # fmt: skip
        assert conn.execute(text("SELECT name FROM api_tokens")).scalars().all() == ["laptop"]
    command.downgrade(alembic_config(url), "0011")
    names = set(inspect(engine_for(url)).get_table_names())
    assert "api_tokens" not in names and "users" in names
    with engine_for(url).connect() as conn:
        assert conn.execute(text("SELECT email FROM users")).scalars().all() == ["a@example.com"]


def test_0012_keeps_rows_with_their_defaults(tmp_path: Path) -> None:
    """Accounts made before 0012 need no password change; assignments made before it let practice run examples only."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade("0011", database_url=url)
    with engine_for(url).begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (id, email, password_hash, role, is_active, name, created_at) "
                "VALUES (1, 'a@example.com', 'x', 'learner', 1, '', '2026-12-01')"
            )
        )
        course_id = conn.execute(text("SELECT id FROM courses WHERE slug = 'practice'")).scalar_one()
        conn.execute(
            text(
                "INSERT INTO assignments (id, course_id, title, position, is_published, late_credit_pct, counts, "
                "created_at) VALUES (1, :course, 'A', 0, 1, 50, 'best', '2026-12-01')"
            ),
            {"course": course_id},
        )
    upgrade("head", database_url=url)
    with engine_for(url).connect() as conn:
        assert conn.execute(text("SELECT must_change_password FROM users")).scalar_one() in (0, False)
        assert conn.execute(text("SELECT practice FROM assignments")).scalar_one() == "examples_only"
    command.downgrade(alembic_config(url), "0011")
    assert "practice" not in {c["name"] for c in inspect(engine_for(url)).get_columns("assignments")}


def test_0015_adds_params_to_submissions_and_keeps_them_without_it(tmp_path: Path) -> None:
    """Submissions made before variants keep NULL params (their one variant); a variant round-trips as JSON."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade("0014", database_url=url)
    with engine_for(url).begin() as conn:
        conn.execute(
            text("INSERT INTO exercises (id, slug, is_published, created_at) VALUES (1, 'ex', 1, '2026-12-02')")
        )
        conn.execute(
            text(
                "INSERT INTO exercise_versions (id, exercise_id, number, content_hash, title, kind, topic, difficulty, "
                "framework, queue, max_score, files, created_at, source) VALUES (1, 1, 1, 'h', 't', 'code', 'T', "
                "'beginner', 'python', 'cpu', 1, '{}', '2026-12-02', 'bank')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO submissions (id, exercise_version_id, code, status, max_score, stdout, stderr, message, "
                "device, sandbox, attempts, created_at) VALUES ('old', 1, 'x', 'graded', 1, '', '', '', '', '', 0, "
                "'2026-12-02')"
            )
        )
    upgrade("0015", database_url=url)
    with engine_for(url).begin() as conn:
        assert conn.execute(text("SELECT params FROM submissions WHERE id = 'old'")).scalar_one() is None
        conn.execute(text("UPDATE submissions SET params = :p WHERE id = 'old'"), {"p": '{"batch": 32, "gpus": 4}'})
        assert conn.execute(text("SELECT params FROM submissions")).scalar_one() == '{"batch": 32, "gpus": 4}'
    command.downgrade(alembic_config(url), "0014")
    assert "params" not in {c["name"] for c in inspect(engine_for(url)).get_columns("submissions")}
    with engine_for(url).connect() as conn:
        assert conn.execute(text("SELECT code FROM submissions")).scalars().all() == ["x"]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_0017_keeps_site_instructors_reading_practice_work(tmp_path: Path, backend: str) -> None:
    """Staff rights per course: an upgrade puts each active site instructor on the practice course's staff list."""
    if backend == "postgres":
        require_service("PostgreSQL", "127.0.0.1", 5432)
        url = fresh_postgres_db("gpulab_migration_0017_test")
    else:
        url = f"sqlite:///{tmp_path / 'practice.db'}"
    upgrade("0016", database_url=url)
    with engine_for(url).begin() as conn:
        people = [
            ("t@example.com", "instructor", True),
            ("l@example.com", "learner", True),
            ("gone@example.com", "instructor", False),
            ("ta@example.com", "instructor", True),
        ]
        for email, role, active in people:
            conn.execute(
                text(
                    "INSERT INTO users (email, password_hash, role, is_active, name, created_at, must_change_password)"
                    " VALUES (:e, 'x', :r, :a, '', '2026-12-02 00:00:00', :f)"
                ),
                {"e": email, "r": role, "a": active, "f": False},
            )
        conn.execute(text(
            "INSERT INTO course_members (course_id, user_id, role, source, created_at) SELECT c.id, u.id, 'ta', "
            "'manual', '2026-12-02 00:00:00' FROM courses c, users u WHERE c.is_practice AND u.email = 'ta@example.com'"
        ))  # fmt: skip
    upgrade("0017", database_url=url)
    staff = text(
        "SELECT u.email, m.role FROM course_members m JOIN users u ON u.id = m.user_id "
        "JOIN courses c ON c.id = m.course_id WHERE c.is_practice ORDER BY u.email"
    )
    with engine_for(url).connect() as conn:
        # The active instructor joins; the learner and the deactivated one do not; an existing role is kept.
        assert conn.execute(staff).all() == [("t@example.com", "instructor"), ("ta@example.com", "ta")]
    command.downgrade(alembic_config(url), "0016")
    with engine_for(url).connect() as conn:
        assert conn.execute(staff).all() == [("ta@example.com", "ta")]
    engine_for(url).dispose()


def test_0018_adds_learning_paths_and_takes_only_them_away(tmp_path: Path) -> None:
    """The catalogue's learning path: an empty table until the next sync; a downgrade drops it and nothing else."""
    url = f"sqlite:///{tmp_path / 'paths.db'}"
    upgrade("0017", database_url=url)
    upgrade("0018", database_url=url)
    with engine_for(url).begin() as conn:
        conn.execute(text(
            "INSERT INTO learning_paths (content_hash, data, created_at) VALUES (:h, :d, '2026-12-02 00:00:00')"
        ), {"h": "a" * 64, "d": '{"modules": [], "off_path": []}'})  # fmt: skip
        assert conn.execute(text("SELECT content_hash FROM learning_paths")).scalars().all() == ["a" * 64]
    command.downgrade(alembic_config(url), "0017")
    names = set(inspect(engine_for(url)).get_table_names())
    assert "learning_paths" not in names and {"exercises", "exercise_versions"} <= names
    engine_for(url).dispose()


def test_0019_switches_boards_on_for_existing_assignments_and_takes_only_the_switch_away(tmp_path: Path) -> None:
    """An assignment made before 0019 shows its exercises' boards (on, as a new one); downgrading keeps it."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade("0018", database_url=url)
    with engine_for(url).begin() as conn:
        course_id = conn.execute(text("SELECT id FROM courses WHERE slug = 'practice'")).scalar_one()
        conn.execute(
            text(
                "INSERT INTO assignments (id, course_id, title, position, is_published, late_credit_pct, counts, "
                "practice, created_at) VALUES (1, :course, 'A', 0, 1, 50, 'best', 'examples_only', '2026-12-01')"
            ),
            {"course": course_id},
        )
    upgrade("0019", database_url=url)
    with engine_for(url).begin() as conn:
        assert conn.execute(text("SELECT leaderboard FROM assignments")).scalar_one() in (1, True)
        conn.execute(text("UPDATE assignments SET leaderboard = :off"), {"off": False})
        assert conn.execute(text("SELECT leaderboard FROM assignments")).scalar_one() in (0, False)
    command.downgrade(alembic_config(url), "0018")
    assert "leaderboard" not in {c["name"] for c in inspect(engine_for(url)).get_columns("assignments")}
    with engine_for(url).connect() as conn:
        assert conn.execute(text("SELECT title FROM assignments")).scalars().all() == ["A"]
