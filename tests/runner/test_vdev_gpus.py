"""What ``vdev.setup`` decides from the real GPUs the host gave a job (no GPU needed: it never touches CUDA)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from worker.runner import vdev


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    """Give back the environment and the label each case changes."""
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    yield
    vdev.setup("none", 1)
    if saved is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = saved


def test_enough_gpus_are_used_as_they_are() -> None:
    assert vdev.setup("none", 2, gpus=2, gpu_name="NVIDIA H200") == "2 \u00d7 NVIDIA H200"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert vdev.setup("none", 1, gpus=1, gpu_name="NVIDIA H200") == "1 \u00d7 NVIDIA H200"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_too_few_gpus_hide_cuda_and_grade_as_on_a_cpu_worker() -> None:
    # Two DDP ranks on one GPU: NCCL refuses it, so the ranks (forked from here) must not see the GPU at all.
    assert vdev.setup("none", 2, gpus=1, gpu_name="NVIDIA H200") == "CPU"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


def test_no_gpus_leave_the_environment_alone() -> None:
    assert vdev.setup("none", 2) == "CPU"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_negative_gpu_count_is_refused() -> None:
    with pytest.raises(ValueError, match="gpus must be at least 0"):
        vdev.setup("none", 1, gpus=-1)
