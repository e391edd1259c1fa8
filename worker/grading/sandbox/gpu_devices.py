"""Which NVIDIA device nodes, and which CUDA environment, one job's sandbox gets for the GPUs it leased.

Contract:
- ``read_gpus(proc_root)`` lists the driver's GPUs from ``<proc_root>/driver/nvidia/gpus/<bus id>/information``
  (the kernel module's own table): each ``Gpu`` has its index (its place in PCI bus order, the order
  ``nvidia-smi`` numbers GPUs in by default), its ``GPU-<uuid>`` and the minor number of its ``/dev/nvidia<N>``.
  The minor is read, not assumed: it need not equal the index.
- ``device_plan(ids, dev_root=..., proc_root=...)`` takes a lease's ids (indexes or UUIDs, as ``gpus.py``
  accepts them) and returns a ``DevicePlan``: the nodes to bind into the sandbox, each at the same path under
  ``/dev`` (``nvidia<minor>`` of each leased GPU, then the shared ``nvidiactl`` and ``nvidia-uvm``, and
  ``nvidia-uvm-tools`` where present), and the environment that goes with them: ``CUDA_VISIBLE_DEVICES`` the
  leased GPUs' UUIDs (absolute, so they name the same GPUs whatever order CUDA enumerates the bound nodes in)
  and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Nothing else of ``/dev/nvidia*`` is in the plan: another job's GPU has
  no node in this sandbox. An id the driver does not list, or a node missing under ``dev_root``, raises
  ``SandboxUnavailable`` naming it (a misconfigured node, not the learner's fault).

Why by hand: the NVIDIA container toolkit does this for containers (``--gpus``); the template path binds nodes
into bubblewrap sandboxes itself, and the driver's /proc table is the one source that maps an id to its node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from worker.core.errors import SandboxUnavailable

SHARED_NODES = ("nvidiactl", "nvidia-uvm")
OPTIONAL_NODES = ("nvidia-uvm-tools",)
SANDBOX_DEV = "/dev"
_FIELD_RE = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$")


@dataclass(frozen=True)
class Gpu:
    """One GPU as the driver lists it."""

    index: int
    uuid: str
    minor: int
    bus_id: str


@dataclass(frozen=True)
class DevicePlan:
    """The device nodes (host path, sandbox path) and environment of one job's GPUs."""

    nodes: tuple[tuple[str, str], ...] = ()
    env: dict[str, str] = field(default_factory=dict)


NO_GPUS = DevicePlan()


def read_gpus(proc_root: Path = Path("/proc")) -> list[Gpu]:
    """Return the driver's GPUs in PCI bus order (their indexes); empty when no NVIDIA driver is loaded."""
    folder = proc_root / "driver" / "nvidia" / "gpus"
    if not folder.is_dir():
        return []
    gpus = []
    for index, entry in enumerate(sorted(folder.iterdir(), key=lambda p: p.name.lower())):
        fields = {}
        for line in (entry / "information").read_text().splitlines():
            match = _FIELD_RE.match(line)
            if match:
                fields[match.group(1)] = match.group(2)
        try:
            gpus.append(Gpu(index, fields["GPU UUID"], int(fields["Device Minor"]), entry.name))
        except (KeyError, ValueError):
            raise SandboxUnavailable(f"cannot read GPU {entry.name} from {entry / 'information'}") from None
    return gpus


def device_plan(ids: tuple[str, ...], *, dev_root: Path = Path("/dev"), proc_root: Path = Path("/proc")) -> DevicePlan:
    """Return the nodes and environment of a job that leased the GPUs ``ids``; see the module contract."""
    if not ids:
        return NO_GPUS
    gpus = read_gpus(proc_root)
    by_id = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        listed = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none"
        raise SandboxUnavailable(f"GPU id(s) {', '.join(unknown)} are not among the driver's GPUs: {listed}")
    leased = [by_id[i] for i in ids]
    names = [f"nvidia{g.minor}" for g in leased] + list(SHARED_NODES)
    names += [name for name in OPTIONAL_NODES if (dev_root / name).exists()]
    missing = [name for name in names if not (dev_root / name).exists()]
    if missing:
        raise SandboxUnavailable(f"device node(s) {', '.join(missing)} missing under {dev_root}")
    nodes = tuple((str(dev_root / name), f"{SANDBOX_DEV}/{name}") for name in names)
    env = {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in leased), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return DevicePlan(nodes, env)
