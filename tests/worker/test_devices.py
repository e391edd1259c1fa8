"""Device labels and the virtual devices the subject prepares, graded through the real local sandbox."""

from __future__ import annotations

import textwrap

import pytest

from worker.bank.spec import ExerciseSpec
from worker.core.errors import ExerciseFormatError
from worker.core.outcome import Verdict
from worker.grading.devices import device_label
from worker.grading.pipeline import grade
from worker.grading.sandbox.local import LocalSandbox
from worker.grading.sandbox.unsafe import UnsafeSandbox


def spec_for(
    framework: str, replicas: int, tests: str, *, devices: str = "auto", memory_mb: int = 1536
) -> ExerciseSpec:
    toml = (
        f'title = "Devices"\nframework = "{framework}"\nreplicas = {replicas}\ndevices = "{devices}"\n'
        f"[limits]\ntimeout_s = 90\nmemory_mb = {memory_mb}\n"
    )
    return ExerciseSpec.from_files(
        "device-probe",
        {
            "exercise.toml": toml,
            "prompt.md": "Report the devices.",
            "starter.py": "def count():\n    ...\n",
            "solution.py": "def count():\n    ...\n",
            "tests/test_devices.py": textwrap.dedent(tests),
        },
    )


@pytest.mark.parametrize(
    ("framework", "replicas", "devices", "label"),
    [
        ("python", 1, "auto", "CPU"),
        ("torch", 1, "auto", "CPU"),
        ("torch", 2, "auto", "2 virtual CUDA devices (CPU)"),
        ("torch", 2, "processes", "2 CPU processes (gloo)"),
        ("tensorflow", 4, "auto", "4 virtual CPU replicas"),
        ("tensorflow", 2, "processes", "2 CPU processes (gRPC)"),
    ],
)
def test_labels_follow_the_exercise(framework: str, replicas: int, devices: str, label: str) -> None:
    spec = spec_for(framework, replicas, "def test_x(submission):\n    pass\n", devices=devices)
    assert device_label(spec, LocalSandbox()) == label
    assert device_label(spec, UnsafeSandbox()) == f"{label} (unsandboxed)"


@pytest.mark.parametrize(
    ("replicas", "devices", "gpus", "label"),
    [
        (1, "auto", ("NVIDIA H200",), "1 \u00d7 NVIDIA H200"),
        (2, "auto", ("NVIDIA H200", "NVIDIA H200"), "2 \u00d7 NVIDIA H200"),
        (2, "processes", ("NVIDIA H200", "NVIDIA H200"), "2 processes on 2 \u00d7 NVIDIA H200"),
        # Fewer GPUs than replicas: the runner grades as on a CPU worker, and the label says that, not the GPU.
        (2, "auto", ("NVIDIA H200",), "2 virtual CUDA devices (CPU)"),
        (2, "processes", ("NVIDIA H200",), "2 CPU processes (gloo)"),
    ],
)
def test_labels_name_real_gpus_only_when_there_are_enough(
    replicas: int, devices: str, gpus: tuple[str, ...], label: str
) -> None:
    spec = spec_for("torch", replicas, "def test_x(submission):\n    pass\n", devices=devices)
    assert device_label(spec, UnsafeSandbox(), gpus=gpus) == f"{label} (unsandboxed)"


@pytest.mark.parametrize("replicas", [0, 9, "2", True])
def test_replicas_out_of_range_are_refused(replicas: object) -> None:
    toml = f'title = "x"\nreplicas = {replicas!r}\n'.replace("'", '"').replace("True", "true")
    files = {"exercise.toml": toml, "prompt.md": "p", "starter.py": "", "solution.py": "",
             "tests/test_a.py": "def test_a(submission):\n    pass\n"}  # fmt: skip
    with pytest.raises(ExerciseFormatError, match="replicas must be"):
        ExerciseSpec.from_files("bad-replicas", files)


TORCH_TESTS = """
    def test_virtual_cuda(submission):
        assert submission.info() == {"available": True, "count": 2, "device": "cuda:0", "dp_ids": [0, 1]}
"""
TORCH_CODE = """
import torch

def info():
    model = torch.nn.DataParallel(torch.nn.Linear(4, 2).cuda())
    out = model(torch.randn(6, 4).cuda())
    return {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "device": str(out.device), "dp_ids": list(model.device_ids)}
"""


@pytest.mark.slow
def test_torch_exercise_with_two_replicas_sees_two_virtual_gpus(local_sandbox: LocalSandbox) -> None:
    spec = spec_for("torch", 2, TORCH_TESTS)
    outcome = grade(spec, TORCH_CODE, sandbox=local_sandbox)
    assert outcome.verdict is Verdict.passed, outcome.tests
    assert outcome.device == "2 virtual CUDA devices (CPU)"


@pytest.mark.slow
def test_one_gpu_for_two_replicas_grades_on_virtual_devices_with_cuda_hidden() -> None:
    """The runner's rule for a bare GPU machine (scripts/gpu-check), run on the CPU: nothing here needs the GPU."""
    tests = """
        def test_sees(submission):
            assert submission.info() == {"cuda_visible_devices": "", "count": 2}
    """
    code = """
import os
import torch

def info():
    return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": torch.cuda.device_count()}
"""
    spec = spec_for("torch", 2, tests)
    outcome = grade(spec, code, sandbox=UnsafeSandbox(), gpus=("NVIDIA H200",))
    assert outcome.verdict is Verdict.passed, (outcome.tests, outcome.stderr[-2000:])
    assert outcome.device == "2 virtual CUDA devices (CPU) (unsandboxed)"


TF_TESTS = """
    def test_mirrored(submission):
        assert submission.info() == {"replicas": 2, "mirrored": True}
"""
TF_CODE = """
import tensorflow as tf

def info():
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        v = tf.Variable(1.0)
    return {"replicas": strategy.num_replicas_in_sync, "mirrored": type(v).__name__ == "MirroredVariable"}
"""


@pytest.mark.slow
def test_tensorflow_exercise_with_two_replicas_mirrors_over_logical_cpus(local_sandbox: LocalSandbox) -> None:
    spec = spec_for("tensorflow", 2, TF_TESTS, memory_mb=3072)
    outcome = grade(spec, TF_CODE, sandbox=local_sandbox)
    assert outcome.verdict is Verdict.passed, (outcome.tests, outcome.stderr[-2000:])
    assert outcome.device == "2 virtual CPU replicas"
