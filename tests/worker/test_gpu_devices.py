"""The device plan of a GPU job on the template path, against a stand-in driver table and stand-in /dev nodes.

The plan itself, then the real local sandbox (cold and forked from a warm template) grading a job that lists
/dev: it sees its own GPU's node and the shared ones, CUDA_VISIBLE_DEVICES names that GPU, and no other node.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.worker.conftest import CGROUP_NAME
from worker.bank.spec import ExerciseSpec
from worker.core.errors import SandboxUnavailable
from worker.core.outcome import Verdict
from worker.grading.gpu_template_check import Report, _judge_job, check_template_path
from worker.grading.pipeline import grade
from worker.grading.sandbox import local as local_backend
from worker.grading.sandbox.gpu_devices import NO_GPUS, PTY_RULES, DevicePlan, device_plan, device_rules, read_gpus
from worker.grading.sandbox.gpus import GpuSlots
from worker.grading.sandbox.local import LocalSandbox
from worker.grading.sandbox.warm import WarmLocalSandbox, WarmPool

# Three GPUs whose minors are not their indexes (the driver numbers nodes, PCI order numbers GPUs).
DRIVER = {"0000:3b:00.0": ("GPU-bbbb", 2), "0000:1a:00.0": ("GPU-aaaa", 1), "0000:af:00.0": ("GPU-cccc", 0)}


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """A /proc with the driver's GPU table and a /dev with every node, as plain files."""
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    for bus, (uuid, minor) in DRIVER.items():
        folder = proc / "driver" / "nvidia" / "gpus" / bus
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t {uuid}\nVideo BIOS: \t ??.??\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        (dev / name).write_text("")
    return proc, dev


def test_gpus_are_numbered_in_bus_order_with_the_drivers_minors(host: tuple[Path, Path]) -> None:
    proc, _ = host
    listed = [(g.index, g.uuid, g.minor) for g in read_gpus(proc)]
    assert listed == [(0, "GPU-aaaa", 1), (1, "GPU-bbbb", 2), (2, "GPU-cccc", 0)]


@pytest.mark.parametrize("ids", [("1",), ("GPU-bbbb",)])
def test_a_job_gets_its_own_gpus_node_and_the_shared_ones_only(host: tuple[Path, Path], ids: tuple[str]) -> None:
    proc, dev = host
    plan = device_plan(ids, dev_root=dev, proc_root=proc)
    assert [target for _, target in plan.nodes] == ["/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm",
                                                    "/dev/nvidia-uvm-tools"]  # fmt: skip
    assert [source for source, _ in plan.nodes] == [str(dev / Path(t).name) for _, t in plan.nodes]
    assert plan.env == {"CUDA_VISIBLE_DEVICES": "GPU-bbbb", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_two_jobs_never_reach_each_others_gpus(host: tuple[Path, Path]) -> None:
    proc, dev = host
    first = {t for _, t in device_plan(("0",), dev_root=dev, proc_root=proc).nodes}
    second = {t for _, t in device_plan(("2", "1"), dev_root=dev, proc_root=proc).nodes}
    gpu_nodes = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}
    assert first & gpu_nodes == {"/dev/nvidia1"}
    assert second & gpu_nodes == {"/dev/nvidia0", "/dev/nvidia2"}
    assert device_plan(("2", "1"), dev_root=dev, proc_root=proc).env["CUDA_VISIBLE_DEVICES"] == "GPU-cccc,GPU-bbbb"


def test_no_lease_no_nodes(host: tuple[Path, Path]) -> None:
    proc, dev = host
    assert device_plan((), dev_root=dev, proc_root=proc) == NO_GPUS
    assert NO_GPUS.nodes == () and NO_GPUS.env == {}


def test_uvm_tools_is_optional(host: tuple[Path, Path]) -> None:
    proc, dev = host
    (dev / "nvidia-uvm-tools").unlink()
    assert "/dev/nvidia-uvm-tools" not in {t for _, t in device_plan(("0",), dev_root=dev, proc_root=proc).nodes}


def test_an_unknown_id_or_a_missing_node_is_named(host: tuple[Path, Path]) -> None:
    proc, dev = host
    with pytest.raises(SandboxUnavailable, match=r"GPU id\(s\) 3 are not among .*0 \(GPU-aaaa\)"):
        device_plan(("3",), dev_root=dev, proc_root=proc)
    (dev / "nvidia-uvm").unlink()
    with pytest.raises(SandboxUnavailable, match="nvidia-uvm missing"):
        device_plan(("0",), dev_root=dev, proc_root=proc)
    with pytest.raises(SandboxUnavailable, match="not among the driver's GPUs: none"):
        device_plan(("0",), dev_root=dev, proc_root=dev / "no-proc")


STAND_IN_MAJOR = 240  # a major no driver claims: opening such a node is refused or ends in ENXIO, never a device


def _char_nodes(dev: Path) -> None:
    """Replace ``dev``'s plain stand-ins by character devices: nvidia<N> is (240, N), the shared ones 240:100+."""
    for number, node in enumerate(sorted(dev.iterdir())):
        minor = int(node.name.removeprefix("nvidia")) if node.name.removeprefix("nvidia").isdigit() else 100 + number
        node.unlink()
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(STAND_IN_MAJOR, minor))


def test_device_rules_are_the_minimal_dev_and_the_plans_nodes(host: tuple[Path, Path]) -> None:
    proc, dev = host
    null = os.stat("/dev/null").st_rdev
    baseline = device_rules(NO_GPUS)
    assert f"c {os.major(null)}:{os.minor(null)} rw" in baseline and baseline[-len(PTY_RULES) :] == PTY_RULES
    assert device_rules(device_plan(("1",), dev_root=dev, proc_root=proc)) == baseline  # plain files: no device
    _char_nodes(dev)
    rules = device_rules(device_plan(("1",), dev_root=dev, proc_root=proc))
    added = [r for r in rules if r.startswith(f"c {STAND_IN_MAJOR}:")]
    ctl, uvm, tools = (f"c {STAND_IN_MAJOR}:{os.minor((dev / n).stat().st_rdev)} rw"
                       for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"))  # fmt: skip
    assert added == [f"c {STAND_IN_MAJOR}:2 rw", ctl, uvm, tools]  # GPU 1's node (minor 2), never 0's or 1's
    assert set(rules) - set(added) == set(baseline)


# --- through the real local sandbox: two GPUs leased to two jobs, stand-in nodes as plain files ------------------

PROBE_TESTS = """
def test_devices(submission):
    assert submission.seen()["visible"]
"""
PROBE = """
import json, os

def seen():
    mine = {}
    for name in sorted(os.listdir("/dev")):
        if name.startswith("nvidia"):
            with open(f"/dev/{name}") as handle:
                mine[name] = handle.read()
    others = [n for n in ("nvidia0", "nvidia1", "nvidia2") if os.path.exists(f"HOST_DEV/{n}")]
    return {"nodes": mine, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "host_dev": others}

print("SEEN", json.dumps(seen()))
"""


@pytest.fixture
def stand_in_host(host: tuple[Path, Path]) -> Iterator[tuple[Path, Path]]:
    """``host``'s /dev where the sandbox uid can reach it (bwrap binds as that uid); each node holds its name."""
    proc, dev = host
    public = Path(tempfile.mkdtemp(prefix="gpulab-test-dev-"))
    public.chmod(0o755)
    for node in dev.iterdir():
        (public / node.name).write_text(f"stand-in {node.name}")
        (public / node.name).chmod(0o666)
    yield proc, public
    shutil.rmtree(public, ignore_errors=True)


def _grade_probe(warm: bool, proc: Path, dev: Path, local_sandbox: LocalSandbox, work: Path, probe: str) -> Any:
    """Grade ``probe`` as a one-GPU job while another job holds GPU 0; return what its ``SEEN`` line said."""
    slots = GpuSlots(("0", "1", "2"), 1, work / "locks")
    options: dict[str, Any] = {"user": local_sandbox.user, "cgroup_name": CGROUP_NAME, "timeout_margin_s": 1.0,
                               "gpu_slots": slots, "dev_root": dev, "proc_root": proc}  # fmt: skip
    files = {"exercise.toml": 'title = "GPU nodes"\n[limits]\ntimeout_s = 30\n', "prompt.md": "p",
             "starter.py": "", "solution.py": probe, "tests/test_devices.py": PROBE_TESTS}  # fmt: skip
    spec = ExerciseSpec.from_files("gpu-nodes", files)
    pool = WarmPool(("python",), size=1) if warm else None
    try:
        sandbox = WarmLocalSandbox(pool=pool, **options) if pool else LocalSandbox(**options)
        held = slots.acquire(1)  # another job holds GPU 0 (minor 1): this one must get GPU 1 (minor 2)
        try:
            outcome = grade(spec, probe, sandbox=sandbox, work_root=work / "work")
        finally:
            held.release()
        if pool:  # the subject came from a template made for jobs with one real GPU
            assert [t.key.gpus for t in pool.templates() if t.key.role == "subject"] == [1]
    finally:
        if pool:
            pool.close()
    assert outcome.verdict is Verdict.passed, outcome
    line = next(x for x in outcome.stdout.splitlines() if x.startswith("SEEN "))
    return json.loads(line.removeprefix("SEEN "))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_job_sees_only_its_own_gpu_node_and_cuda_visible_devices_to_match(
    warm: bool, stand_in_host: tuple[Path, Path], local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    proc, dev = stand_in_host
    seen = _grade_probe(warm, proc, dev, local_sandbox, tmp_path, PROBE.replace("HOST_DEV", str(dev)))
    assert seen["nodes"] == {"nvidia-uvm": "stand-in nvidia-uvm", "nvidia-uvm-tools": "stand-in nvidia-uvm-tools",
                             "nvidiactl": "stand-in nvidiactl", "nvidia2": "stand-in nvidia2"}  # fmt: skip
    assert seen["visible"] == "GPU-bbbb" and seen["host_dev"] == []


OPEN_PROBE = """
import errno, json, os

def seen():
    opened = {}
    for name in sorted(os.listdir("/dev")):
        if name.startswith("nvidia") or name in ("null", "zero"):
            try:
                open(f"/dev/{name}", "rb").close()
                opened[name] = "opened"
            except OSError as exc:
                opened[name] = errno.errorcode[exc.errno]
    return {"opened": opened, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}

print("SEEN", json.dumps(seen()))
"""


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_the_jobs_device_rules_let_its_own_nodes_through(
    warm: bool, stand_in_host: tuple[Path, Path], local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    # Character devices of a driver-less major: ENXIO means the node was bound as a device and the job's device
    # cgroup let the open through to the kernel's (absent) driver; EPERM/EACCES would mean a rule or nodev refused.
    proc, dev = stand_in_host
    _char_nodes(dev)
    seen = _grade_probe(warm, proc, dev, local_sandbox, tmp_path, OPEN_PROBE)
    assert seen["opened"] == {"null": "opened", "zero": "opened", "nvidia2": "ENXIO", "nvidiactl": "ENXIO",
                              "nvidia-uvm": "ENXIO", "nvidia-uvm-tools": "ENXIO"}  # fmt: skip
    assert seen["visible"] == "GPU-bbbb"


def test_the_gpu_smoke_check_of_the_template_path_passes_on_a_sound_plan(
    stand_in_host: tuple[Path, Path], local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    proc, dev = stand_in_host
    options = {"user": local_sandbox.user, "cgroup_name": CGROUP_NAME, "dev_root": dev, "proc_root": proc}
    report = check_template_path(("0", "1", "2"), 1, sandbox_options=options, require_cuda=False, work_root=tmp_path)
    assert report.problems == []
    seen = [(j["leased"], j["nodes"], j["visible"]) for j in report.jobs]
    # GPU 0 is minor 1, GPU 1 minor 2, GPU 2 minor 0 (DRIVER)
    assert seen == [(["0"], ["nvidia1"], "GPU-aaaa"), (["1"], ["nvidia2"], "GPU-bbbb"),
                    (["2"], ["nvidia0"], "GPU-cccc")]  # fmt: skip


def test_the_gpu_smoke_check_names_a_job_that_sees_another_gpu(
    stand_in_host: tuple[Path, Path], local_sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broken plan (every GPU's node bound into every job) must be reported, not passed.
    proc, dev = stand_in_host

    def every_node(ids: tuple[str, ...], **kwargs: Any) -> DevicePlan:
        plan = device_plan(ids, **kwargs)
        extra = tuple((str(dev / n), f"/dev/{n}") for n in ("nvidia0", "nvidia1", "nvidia2"))
        return DevicePlan(tuple(dict.fromkeys(plan.nodes + extra)), plan.env)

    monkeypatch.setattr(local_backend, "device_plan", every_node)
    options = {"user": local_sandbox.user, "cgroup_name": CGROUP_NAME, "dev_root": dev, "proc_root": proc}
    report = check_template_path(("0", "1"), 1, sandbox_options=options, require_cuda=False, work_root=tmp_path)
    assert report.problems == [
        "the job leased GPUs 0 (nodes ['nvidia1']) but saw ['nvidia0', 'nvidia1', 'nvidia2']",
        "the job leased GPUs 1 (nodes ['nvidia2']) but saw ['nvidia0', 'nvidia1', 'nvidia2']",
    ]


@pytest.mark.parametrize(
    ("count", "matmul", "problems"),
    [
        (1, True, []),
        (1, False, ["the job for GPUs 1 could not compute a matmul on cuda:0"]),
        (2, True, ["the job leased 1 GPU(s) but torch counted 2"]),
        (0, False, ["the job leased 1 GPU(s) but torch counted 0"]),  # no device: no matmul to blame
    ],
)
def test_the_smoke_checks_cuda_problems_each_name_their_own_cause(
    host: tuple[Path, Path], count: int, matmul: bool, problems: list[str]
) -> None:
    # What a real GPU job's probe would print (nothing here runs CUDA): only the failing promise is named.
    proc, _ = host
    gpus = read_gpus(proc)
    by_id = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    seen = {"nodes": ["nvidia2"], "visible": "GPU-bbbb", "count": count, "matmul": matmul}
    outcome = SimpleNamespace(stdout="SEEN " + json.dumps(seen), stderr="", verdict=Verdict.passed)
    report = Report()
    _judge_job(report, ("1",), outcome, by_id, 1, True)
    assert report.problems == problems
