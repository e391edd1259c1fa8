"""The device plan of a GPU job on the template path, against a stand-in driver table and stand-in /dev nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.core.errors import SandboxUnavailable
from worker.grading.sandbox.gpu_devices import NO_GPUS, device_plan, read_gpus

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
