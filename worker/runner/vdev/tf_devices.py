"""Split the CPU into N logical TensorFlow devices so ``tf.distribute.MirroredStrategy()`` has N replicas.

Contract:
- ``setup_tensorflow(n)`` must run before the TensorFlow runtime starts (before any op, tensor, or
  logical-device listing); it imports TensorFlow and configures the logical CPUs only, which keeps the
  process safe to fork. Calling it after the runtime started raises ``RuntimeError``.
- After it, a plain ``tf.distribute.MirroredStrategy()`` (and ``tf.compat.v1.distribute.MirroredStrategy()``)
  on a host without GPUs mirrors over all N logical CPUs: TensorFlow's own default
  (``mirrored_strategy.all_local_devices`` falls back to logical CPUs when there is no GPU), so nothing
  is patched. Variables are real ``MirroredVariable``s; float all-reduces use ``CollectiveAllReduce``
  (int32 values ``ReductionToOneDevice``). An explicit ``devices=[...]`` or ``OneDeviceStrategy`` is untouched.
- Only for workers without a GPU: with real GPUs, call nothing here and let TensorFlow find them.
"""

from __future__ import annotations

import os

_replicas = 0


def setup_tensorflow(n: int = 2) -> None:
    """Import TensorFlow and split the CPU into ``n`` logical devices (before the runtime starts)."""
    global _replicas
    if n < 1:
        raise ValueError("n must be at least 1")
    # TensorFlow's C++ logging writes to stderr, which is the learner's output stream.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as exc:
        # "Virtual devices cannot be modified after being initialized": too late, a child forked now would hang.
        raise RuntimeError(f"setup_tensorflow must run before TensorFlow starts: {exc}") from exc
    _replicas = n


def replicas() -> int:
    """Return the number of logical CPU devices configured (0 before ``setup_tensorflow``)."""
    return _replicas


def describe() -> str:
    """Return the label shown next to results graded on logical CPU devices."""
    return f"{_replicas} virtual CPU replica{'s' if _replicas != 1 else ''}"
