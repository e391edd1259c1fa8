"""Virtual devices for grading multi-device code on workers without GPUs (see README.md).

Contract: the subject calls ``setup(framework, replicas, gpus)`` once, before it imports the learner's
module and before it forks per-test children; ``describe()`` then returns the label shown with results
("2 virtual CUDA devices (CPU)", "2 virtual CPU replicas", or the count and model of real GPUs).
``setup`` starts no thread and no framework runtime, so forking after it is safe. Frameworks are imported
only when asked for.

Real GPUs (``gpus``, how many the host gave the job; ``worker.grading.devices`` labels by the same rule): with at
least ``replicas`` of them the job runs on them as it is (no virtual layer; DDP ranks see them). With fewer, the
job runs exactly as on a CPU worker, CUDA hidden from it (``CUDA_VISIBLE_DEVICES`` empty, set before anything
initialised CUDA): one GPU cannot show two devices, and NCCL refuses two ranks on one GPU, so a two-replica
exercise is graded faithfully on virtual devices rather than half-faithfully on one real one.
"""

from __future__ import annotations

import glob
import os

FRAMEWORKS = ("torch", "tensorflow", "none")
_label = "CPU"
TIMES = "\u00d7"  # the label for real GPUs reads "2 <multiplication sign> NVIDIA H200"


def _gpu_name() -> str | None:
    """Return the first GPU's model from the driver's proc files, without initialising CUDA (fork-safe)."""
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            with open(info, encoding="utf-8") as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key.strip() == "Model" and value.strip():
                        return value.strip()
        except OSError:
            continue
    return None


def setup(framework: str, replicas: int = 2, gpus: int = 0, gpu_name: str | None = None) -> str:
    """Prepare this process for ``replicas`` devices of ``framework`` given ``gpus`` real GPUs; return the label."""
    global _label
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, not {framework!r}")
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    if gpus < 0:
        raise ValueError("gpus must be at least 0")
    if gpus >= replicas:
        # Real devices need nothing here; touching CUDA now would make forked children unusable.
        _label = f"{replicas} {TIMES} {gpu_name or _gpu_name() or 'GPU'}"
        return _label
    if gpus:
        # Too few for the replicas: grade as on a CPU worker. The driver reads this when CUDA first starts, which
        # nothing in this process has done yet (the framework import does not), so every child inherits it.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if framework == "torch":
        from . import torch_cuda

        torch_cuda.enable(replicas)
        warm_torch()
        _label = torch_cuda.describe()
    elif framework == "tensorflow":
        from . import tf_devices

        tf_devices.setup_tensorflow(replicas)
        _label = tf_devices.describe()
    else:
        _label = "CPU"
    return _label


def warm_torch() -> None:
    """Import what a first training step imports, running no multi-threaded op (children start warm)."""
    import torch

    param = torch.nn.Parameter(torch.zeros(1))
    torch.optim.SGD([param], lr=0.1)


def describe() -> str:
    """Return the label for the devices ``setup`` prepared ("CPU" before it)."""
    return _label
