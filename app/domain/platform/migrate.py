"""Run Alembic migrations from code, against the database in ``Settings``."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from app.settings import get_settings
from worker.core.config import REPO_ROOT


def alembic_config(database_url: str | None = None) -> Config:
    """Return an Alembic config pointing at ``migrations/`` and the given (or configured) database."""
    config = Config()
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", (database_url or get_settings().database_url).replace("%", "%%"))
    return config


def upgrade(revision: str = "head", database_url: str | None = None) -> None:
    """Upgrade the schema to ``revision``."""
    command.upgrade(alembic_config(database_url), revision)
