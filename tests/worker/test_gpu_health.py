"""A GPU host's GPUs fail: found before or during a job, marked for every process, and the job goes elsewhere.

Against a stand-in driver table and stand-in nodes (``tests/worker/test_gpu_devices.py``'s), with a stand-in
``nvidia-smi`` on ``PATH`` where its answer matters, and through the real local sandbox for a GPU that goes away
while a job runs. MIG instances are slots too: their plan is the parent's node and their own capabilities.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.worker.conftest import CGROUP_NAME
from tests.worker.test_gpu_devices import DRIVER, host, stand_in_host  # noqa: F401  (fixtures)
from worker.bank.spec import ExerciseSpec
from worker.core.errors import HostUnfit, SandboxUnavailable
from worker.grading.pipeline import grade
from worker.grading.sandbox.gpu_devices import device_plan, mig_parts
from worker.grading.sandbox.gpu_health import FailedGpus, probe
from worker.grading.sandbox.gpus import GpuSlots, parse_gpu_ids
from worker.grading.sandbox.local import LocalSandbox

MIG_A = "MIG-1111aaaa-0000-4000-8000-000000000001"
MIG_B = "MIG-2222bbbb-0000-4000-8000-000000000002"


def _info(proc: Path, bus: str) -> Path:
    return proc / "driver" / "nvidia" / "gpus" / bus / "information"


def test_working_gpus_have_no_problem_and_each_way_of_failing_is_named(
    host: tuple[Path, Path],  # noqa: F811
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    proc, dev = host
    monkeypatch.setenv("PATH", str(tmp_path / "no-smi"))  # no nvidia-smi: the driver's table and nodes decide
    assert probe(("0", "1", "GPU-cccc"), dev_root=dev, proc_root=proc) == {}
    (dev / "nvidia2").unlink()  # GPU 1's node (minor 2) is gone
    info = _info(proc, "0000:1a:00.0")
    info.write_text(info.read_text() + "GPU Lost: \t Yes\n")  # GPU 0: the driver says it is lost
    gone = next(b for b, (u, _) in DRIVER.items() if u == "GPU-cccc")
    for entry in _info(proc, gone).parent.iterdir():  # GPU-cccc fell off the bus: the driver drops it
        entry.unlink()
    _info(proc, gone).parent.rmdir()
    found = probe(("0", "1", "GPU-cccc"), dev_root=dev, proc_root=proc)
    assert found == {
        "0": "the driver marks it lost",
        "1": "its device node /dev/nvidia2 is gone",
        "GPU-cccc": "the driver no longer lists it (fell off the bus, or removed)",
    }


def test_nvidia_smi_that_cannot_query_a_gpu_marks_it(
    host: tuple[Path, Path],  # noqa: F811
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    proc, dev = host
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'GPU-aaaa, P0'\necho 'GPU-bbbb, [GPU requires reset]'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    assert probe(("0", "1", "2"), dev_root=dev, proc_root=proc) == {
        "1": "nvidia-smi reports it [GPU requires reset]",
        "2": "nvidia-smi does not list it (exit 0: )",
    }


def test_a_failed_gpu_is_never_leased_and_a_host_without_enough_takes_no_job(tmp_path: Path) -> None:
    slots = GpuSlots(("0", "1", "2"), 2, tmp_path / "locks")
    slots.failed.mark("1", "its device node /dev/nvidia2 is gone")
    slots.failed.mark("1", "a later reason")  # the first reason stays
    lease = slots.acquire(1)
    assert lease.ids == ("0", "2") and slots.healthy() == ("0", "2")
    lease.release()
    other_process = FailedGpus(tmp_path / "locks")  # what another worker process of the host reads
    assert other_process.failed(("0", "1", "2")) == {"1": "its device node /dev/nvidia2 is gone"}
    other_process.mark("2", "nvidia-smi does not list it")
    with pytest.raises(HostUnfit, match=r"2 of this host's GPUs failed .*fewer than the 2 a job needs"):
        slots.acquire(1)
    other_process.clear(("0", "1", "2"))  # a worker starting afresh
    slots.acquire(1).release()


def _mig_host(proc: Path, dev: Path) -> None:
    """Two MIG instances on GPU 0 (minor 1): gi 1/ci 0 and gi 2/ci 0, with the driver's capability minors."""
    caps = proc / "driver" / "nvidia-caps"
    caps.mkdir(parents=True)
    (caps / "mig-minors").write_text(
        "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"
    )
    (dev / "nvidia-caps").mkdir()
    for minor in (1, 2, 12, 13, 21, 22):
        (dev / "nvidia-caps" / f"nvidia-cap{minor}").write_text(f"cap {minor}")


def test_a_mig_instance_is_a_slot_that_opens_only_its_own_instance(host: tuple[Path, Path]) -> None:  # noqa: F811
    proc, dev = host
    _mig_host(proc, dev)
    ids = parse_gpu_ids(f"{MIG_A}@0/1/0,{MIG_B}@GPU-aaaa/2/0")
    assert mig_parts(ids[1]) is not None and mig_parts("0") is None
    first = device_plan(ids[:1], dev_root=dev, proc_root=proc)
    second = device_plan(ids[1:], dev_root=dev, proc_root=proc)
    assert [t for _, t in first.nodes][:3] == ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap12",
                                               "/dev/nvidia-caps/nvidia-cap13"]  # fmt: skip
    assert [t for _, t in second.nodes][:3] == ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21",
                                                "/dev/nvidia-caps/nvidia-cap22"]  # fmt: skip
    assert first.env["CUDA_VISIBLE_DEVICES"] == MIG_A and second.env["CUDA_VISIBLE_DEVICES"] == MIG_B
    assert not {t for _, t in first.nodes} & {"/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap1"}
    with pytest.raises(SandboxUnavailable, match=r"no instance gpu0/gi3/access"):
        device_plan((f"{MIG_A}@0/3/0",), dev_root=dev, proc_root=proc)
    (dev / "nvidia-caps" / "nvidia-cap22").unlink()  # the instance was destroyed
    assert set(probe(ids, dev_root=dev, proc_root=proc)) == {ids[1]}
    slots = GpuSlots(ids, 1, proc.parent / "locks")
    assert slots.acquire(1).ids == (ids[0],)


SLOW = "import time\n\ndef add(a, b):\n    time.sleep(3)\n    return a + b\n"
TESTS = "def test_add(submission):\n    assert submission.add(1, 2) == 3\n"


def test_a_gpu_that_fails_during_a_job_sends_the_job_elsewhere_and_takes_no_more(
    stand_in_host: tuple[Path, Path],  # noqa: F811
    local_sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    proc, dev = stand_in_host
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi here
    slots = GpuSlots(("0",), 1, tmp_path / "locks")
    sandbox = LocalSandbox(user=local_sandbox.user, cgroup_name=CGROUP_NAME, timeout_margin_s=1.0, gpu_slots=slots,
                           dev_root=dev, proc_root=proc)  # fmt: skip
    files = {"exercise.toml": 'title = "Slow add"\n[limits]\ntimeout_s = 30\n', "prompt.md": "p", "starter.py": "",
             "solution.py": SLOW, "tests/test_add.py": TESTS}  # fmt: skip
    spec = ExerciseSpec.from_files("slow-add", files)
    node = dev / "nvidia1"  # GPU 0's node

    def fall_off_the_bus() -> None:
        time.sleep(1.5)  # while the learner's test sleeps
        node.unlink()

    pulled = threading.Thread(target=fall_off_the_bus)
    pulled.start()
    with pytest.raises(HostUnfit, match=r"GPU failed during the job \(GPU 0: its device node /dev/nvidia1 is gone\)"):
        grade(spec, SLOW, sandbox=sandbox, work_root=tmp_path / "work")
    pulled.join()
    assert slots.failed.failed(("0",)) == {"0": "its device node /dev/nvidia1 is gone"}
    node.write_text("stand-in nvidia1")  # back, but marked: the host takes no GPU job until it restarts
    with pytest.raises(HostUnfit, match="fewer than the 1 a job needs"):
        grade(spec, SLOW, sandbox=sandbox, work_root=tmp_path / "work")
    assert os.listdir(tmp_path / "work") == []  # no job folder left behind
