"""The grading spec of a stored exercise version, parsed once per process.

Contract: ``spec_of(version)`` returns the ``ExerciseSpec`` of a version's files. A version's files never change
(``exercises.add_version`` adds versions, never edits one), so a spec is kept by (slug, content hash), the last
``SPECS_KEPT`` of them, and shared: callers treat it as read-only. Pages, the submit gate, notebooks and grading
all need it; parsing TOML and checking the format with pydantic on every page view is what this saves.
This module imports only the models, so any context may use it without a cycle.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from app.domain.models import ExerciseVersion
from worker.bank.spec import ExerciseSpec

SPECS_KEPT = 256
_SPECS: OrderedDict[tuple[str, str], ExerciseSpec] = OrderedDict()
_lock = threading.Lock()


def spec_of(version: ExerciseVersion) -> ExerciseSpec:
    """Return the grading spec stored in ``version`` (parsed once per process; read-only)."""
    key = (version.exercise.slug, version.content_hash)
    with _lock:
        spec = _SPECS.get(key)
        if spec is not None:
            _SPECS.move_to_end(key)
            return spec
    spec = ExerciseSpec.from_files(version.exercise.slug, dict(version.files))
    with _lock:
        _SPECS[key] = spec
        while len(_SPECS) > SPECS_KEPT:
            _SPECS.popitem(last=False)
    return spec
