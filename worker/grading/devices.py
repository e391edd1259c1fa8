"""Say which device a grade ran on, as shown next to every result.

Contract: ``device_label(spec, sandbox, gpus=...)`` is a short human label, computed on the host from the
exercise, the backend and the real GPUs the run was given (never from anything the sandbox reports, so learner
code cannot change it). It matches what the subject prepares with ``runner.vdev.setup``: virtual CUDA devices
for PyTorch, logical CPU replicas for TensorFlow, real processes for ``devices = "processes"`` (DDP ranks over
gloo, TensorFlow workers over gRPC); with at least as many real GPUs as replicas, those GPUs ("2 <multiplication
sign> NVIDIA H200"); with fewer, the job runs as on a CPU worker and is labelled so. Unsandboxed runs always say so.
"""

from __future__ import annotations

from worker.bank.specdata import ExerciseData
from worker.grading.sandbox.base import Sandbox

TIMES = "\u00d7"  # the multiplication sign of "2 x NVIDIA H200", as runner.vdev labels real GPUs


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def uses_real_gpus(spec: ExerciseData, gpus: tuple[str, ...]) -> bool:
    """Say whether a run given ``gpus`` puts the exercise's replicas on them (the rule of ``runner.vdev.setup``)."""
    return bool(gpus) and len(gpus) >= spec.replicas


def device_label(spec: ExerciseData, sandbox: Sandbox, *, gpus: tuple[str, ...] = ()) -> str:
    """Return the label for where ``spec`` is graded by ``sandbox`` with the real GPUs ``gpus``."""
    if uses_real_gpus(spec, gpus):
        real = f"{spec.replicas} {TIMES} {gpus[0]}"
        label = f"{_plural(spec.replicas, 'process', 'processes')} on {real}" if spec.devices == "processes" else real
    elif spec.replicas > 1 and spec.devices == "processes":
        # DDP ranks talk over gloo; TensorFlow workers (MultiWorkerMirroredStrategy) over gRPC.
        link = "gRPC" if spec.framework == "tensorflow" else "gloo"
        label = f"{_plural(spec.replicas, 'CPU process', 'CPU processes')} ({link})"
    elif spec.vdev_framework == "torch":
        label = f"{_plural(spec.replicas, 'virtual CUDA device')} (CPU)"
    elif spec.vdev_framework == "tensorflow":
        label = _plural(spec.replicas, "virtual CPU replica")
    else:
        label = "CPU"
    return label if sandbox.isolated else f"{label} (unsandboxed)"
