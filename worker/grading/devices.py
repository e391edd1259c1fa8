"""Say which device a grade ran on, as shown next to every result.

Contract: ``device_label(spec, sandbox)`` is a short human label, computed on the host from the exercise and
the backend (never from anything the sandbox reports, so learner code cannot change it). It matches what the
subject prepares with ``runner.vdev.setup``: virtual CUDA devices for PyTorch, logical CPU replicas for
TensorFlow, real processes for ``devices = "processes"``. Unsandboxed runs always say so.
"""

from __future__ import annotations

from worker.bank.spec import ExerciseSpec
from worker.grading.sandbox.base import Sandbox


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def device_label(spec: ExerciseSpec, sandbox: Sandbox) -> str:
    """Return the label for where ``spec`` is graded by ``sandbox``."""
    if spec.replicas > 1 and spec.devices == "processes":
        label = f"{_plural(spec.replicas, 'CPU process', 'CPU processes')} (gloo)"
    elif spec.vdev_framework == "torch":
        label = f"{_plural(spec.replicas, 'virtual CUDA device')} (CPU)"
    elif spec.vdev_framework == "tensorflow":
        label = _plural(spec.replicas, "virtual CPU replica")
    else:
        label = "CPU"
    return label if sandbox.isolated else f"{label} (unsandboxed)"
