"""One settings class per side: grading's (``worker.core.config``) holds only what ``worker/`` reads.

The app's ``Settings`` (``app.settings``) extends grading's with what only ``app/`` reads (issue 22 item 5: web
settings leave the grading side). These checks read the source, so a new field lands on the right side.
"""

from __future__ import annotations

import ast
from pathlib import Path

from app import settings as app_settings
from worker.core import config

ROOT = Path(__file__).resolve().parents[2]


def _trees(folder: str) -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted((ROOT / folder).rglob("*.py"))]


def _settings_reads(tree: ast.Module) -> set[str]:
    """Return the attributes read from a name ``settings`` (how every reader spells it)."""
    attributes = (node for node in ast.walk(tree) if isinstance(node, ast.Attribute))
    return {node.attr for node in attributes if isinstance(node.value, ast.Name) and node.value.id == "settings"}


def _on_grading_side(name: str) -> bool:
    return name in config.Settings.model_fields or hasattr(config.Settings, name)


def test_grading_reads_only_its_own_settings() -> None:
    reads = {
        (path.relative_to(ROOT).as_posix(), name) for path, tree in _trees("worker") for name in _settings_reads(tree)
    }
    assert reads, "the scan found no reads: it no longer sees how worker/ spells its settings"
    assert {(path, name) for path, name in reads if not _on_grading_side(name)} == set()


def test_every_grading_setting_is_read_by_grading() -> None:
    reads = {name for _, tree in _trees("worker") for name in _settings_reads(tree)}
    # `mode` is read by the settings themselves: it decides whether the unsafe sandbox is allowed.
    assert set(config.Settings.model_fields) - reads - {"mode"} == set()


def test_the_app_extends_grading_and_nothing_of_the_app_uses_gradings_class_alone() -> None:
    assert issubclass(app_settings.Settings, config.Settings)
    assert {"cookie_secure", "public_url", "frame_ancestors", "metrics_token", "database_url"} <= set(
        app_settings.Settings.model_fields
    ) - set(config.Settings.model_fields)
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path, tree in _trees("app")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module == "worker.core.config"
        and {alias.name for alias in node.names} & {"Settings", "get_settings"}
    ]
    assert offenders == []
