"""Say which device a grade ran on, as shown next to every result.

Contract: ``device_label(spec, sandbox)`` is a short human label; unsandboxed runs always say so.
"""

from __future__ import annotations

from worker.sandbox.base import Sandbox
from worker.spec import ExerciseSpec


def device_label(spec: ExerciseSpec, sandbox: Sandbox) -> str:
    """Return the label for where ``spec`` is graded by ``sandbox``."""
    label = "CPU"
    return label if sandbox.isolated else f"{label} (unsandboxed)"
