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
- A MIG instance is a slot like a GPU: its id is ``MIG-<uuid>@<gpu>/<gi>/<ci>`` (the instance's UUID from
  ``nvidia-smi -L``, its GPU's index or uuid, and its GPU and compute instance ids from ``nvidia-smi mig -lgi``
  and ``-lci``). Its plan binds the parent GPU's node, the two ``nvidia-caps`` nodes that open that instance
  (minors from ``/proc/driver/nvidia-caps/mig-minors``) and no other instance's, and sets
  ``CUDA_VISIBLE_DEVICES`` to the instance's UUID: two jobs on two instances of one GPU share its node but
  neither can open the other's instance.
- ``device_rules(plan)`` is the device cgroup's allow list that goes with a plan (``cgroups.JobCgroups``
  writes it for every sandbox, GPU job or not): ``c <major>:<minor> rw`` for each node of the minimal ``/dev``
  (``boot.linux.DEV_NODES``, read off the host's nodes), the new devpts instance's terminals and ptmx, and each of
  the plan's nodes that is a character device. Everything else is refused by the kernel at ``open``, so even a
  node reached some other way (another GPU's, if it were ever bound by mistake) cannot be opened.

Why by hand: the NVIDIA container toolkit does this for containers (``--gpus``); the template path binds nodes
into bubblewrap sandboxes itself, and the driver's /proc table is the one source that maps an id to its node.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from worker.core.errors import SandboxUnavailable
from worker.grading.boot.linux import DEV_NODES

SHARED_NODES = ("nvidiactl", "nvidia-uvm")
OPTIONAL_NODES = ("nvidia-uvm-tools",)
SANDBOX_DEV = "/dev"
# A new devpts instance's terminals (major 136, every minor: Linux numbers all pty slaves there) and /dev/ptmx;
# the same two rules a container engine grants by default, so a grading host's own group allows them too.
PTY_RULES = ("c 136:* rw", "c 5:2 rw")
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


def read_information(proc_root: Path, bus_id: str) -> dict[str, str]:
    """Return the fields of the driver's ``information`` file of the GPU at ``bus_id`` (empty if unreadable)."""
    fields = {}
    try:
        text = (proc_root / "driver" / "nvidia" / "gpus" / bus_id / "information").read_text()
    except OSError:
        return {}
    for line in text.splitlines():
        match = _FIELD_RE.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    return fields


def read_gpus(proc_root: Path = Path("/proc"), *, strict: bool = True) -> list[Gpu]:
    """Return the driver's GPUs in PCI bus order (their indexes); empty when no NVIDIA driver is loaded.

    ``strict=False`` (a health probe) leaves out an entry it cannot read instead of raising.
    """
    folder = proc_root / "driver" / "nvidia" / "gpus"
    if not folder.is_dir():
        return []
    gpus = []
    for index, entry in enumerate(sorted(folder.iterdir(), key=lambda p: p.name.lower())):
        fields = read_information(proc_root, entry.name)
        try:
            gpus.append(Gpu(index, fields["GPU UUID"], int(fields["Device Minor"]), entry.name))
        except (KeyError, ValueError):
            if strict:
                raise SandboxUnavailable(f"cannot read GPU {entry.name} from {entry / 'information'}") from None
    return gpus


@dataclass(frozen=True)
class MigSlot:
    """A MIG instance as a slot: its UUID and where it lives (parent GPU index or uuid, GPU and compute instance)."""

    uuid: str
    gpu: str
    gi: int
    ci: int


_MIG_RE = re.compile(r"^(MIG-[A-Za-z0-9-]{1,80})@([A-Za-z0-9-]{1,80})/(\d{1,3})/(\d{1,3})$")


def mig_parts(gpu_id: str) -> MigSlot | None:
    """Return the MIG slot ``MIG-<uuid>@<gpu>/<gi>/<ci>`` names, or ``None`` for a whole GPU's id."""
    match = _MIG_RE.match(gpu_id)
    if match is None:
        return None
    return MigSlot(match.group(1), match.group(2), int(match.group(3)), int(match.group(4)))


def mig_cap_nodes(mig: MigSlot, *, dev_root: Path, proc_root: Path) -> list[str]:
    """Return the ``nvidia-caps`` nodes (names under ``dev_root``) that give access to ``mig``'s instance.

    The driver lists every capability's minor in ``/proc/driver/nvidia-caps/mig-minors``
    (``gpu<N>/gi<G>/access <minor>``, ``gpu<N>/gi<G>/ci<C>/access <minor>``); ``N`` is the parent's index.
    """
    gpus = read_gpus(proc_root)
    parent = next((g for g in gpus if mig.gpu in (str(g.index), g.uuid)), None)
    if parent is None:
        raise SandboxUnavailable(f"MIG slot {mig.uuid}: its GPU {mig.gpu} is not among the driver's GPUs")
    try:
        table = (proc_root / "driver" / "nvidia-caps" / "mig-minors").read_text()
    except OSError:
        raise SandboxUnavailable(f"MIG slot {mig.uuid}: the driver lists no MIG capabilities (MIG off?)") from None
    minors = dict(line.split() for line in table.splitlines() if len(line.split()) == 2)
    wanted = (f"gpu{parent.index}/gi{mig.gi}/access", f"gpu{parent.index}/gi{mig.gi}/ci{mig.ci}/access")
    missing = [w for w in wanted if w not in minors]
    if missing:
        raise SandboxUnavailable(f"MIG slot {mig.uuid}: no instance {', '.join(missing)} on GPU {parent.index}")
    names = [f"nvidia-caps/nvidia-cap{minors[w]}" for w in wanted]
    gone = [n for n in names if not (dev_root / n).exists()]
    if gone:
        raise SandboxUnavailable(f"MIG slot {mig.uuid}: capability node(s) {', '.join(gone)} missing under {dev_root}")
    return names


def device_plan(ids: tuple[str, ...], *, dev_root: Path = Path("/dev"), proc_root: Path = Path("/proc")) -> DevicePlan:
    """Return the nodes and environment of a job that leased the GPUs ``ids``; see the module contract."""
    if not ids:
        return NO_GPUS
    gpus = read_gpus(proc_root)
    by_id = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    migs = {i: mig_parts(i) for i in ids}
    unknown = [i for i in ids if (migs[i].gpu if migs[i] else i) not in by_id]  # type: ignore[union-attr]
    if unknown:
        listed = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none"
        raise SandboxUnavailable(f"GPU id(s) {', '.join(unknown)} are not among the driver's GPUs: {listed}")
    names: list[str] = []
    visible: list[str] = []
    for gpu_id in ids:
        mig = migs[gpu_id]
        parent = by_id[mig.gpu if mig else gpu_id]
        names.append(f"nvidia{parent.minor}")
        if mig is not None:  # a MIG instance: its parent's node, and the capabilities of its own instance only
            names += mig_cap_nodes(mig, dev_root=dev_root, proc_root=proc_root)
            visible.append(mig.uuid)
        else:
            visible.append(parent.uuid)
    names = list(dict.fromkeys(names)) + list(SHARED_NODES)
    names += [name for name in OPTIONAL_NODES if (dev_root / name).exists()]
    missing = [name for name in names if not (dev_root / name).exists()]
    if missing:
        raise SandboxUnavailable(f"device node(s) {', '.join(missing)} missing under {dev_root}")
    nodes = tuple((str(dev_root / name), f"{SANDBOX_DEV}/{name}") for name in names)
    env = {"CUDA_VISIBLE_DEVICES": ",".join(visible), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return DevicePlan(nodes, env)


def _char_rule(path: Path) -> str | None:
    """Return ``c <major>:<minor> rw`` for the character device at ``path``; ``None`` for anything else."""
    try:
        rdev = path.stat()
    except OSError:
        return None
    if not stat.S_ISCHR(rdev.st_mode):
        return None
    return f"c {os.major(rdev.st_rdev)}:{os.minor(rdev.st_rdev)} rw"


@functools.cache
def _minimal_dev_rules(host_dev: Path) -> tuple[str | None, ...]:
    """Return the rules of the minimal /dev's nodes, read once: the host's nodes do not change under a worker."""
    return tuple(_char_rule(host_dev / name) for name in DEV_NODES)


def device_rules(plan: DevicePlan, *, host_dev: Path = Path("/dev")) -> tuple[str, ...]:
    """Return the device cgroup's allow list for a sandbox whose GPUs are ``plan``; see the module contract."""
    rules = [*_minimal_dev_rules(host_dev), *(_char_rule(Path(source)) for source, _ in plan.nodes)]
    return tuple(dict.fromkeys(r for r in rules if r is not None)) + PTY_RULES
