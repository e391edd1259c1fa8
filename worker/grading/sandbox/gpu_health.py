"""Whether this host's GPUs still work: a GPU that fell off the bus or errs takes no more jobs.

Contract:
- ``probe(ids, dev_root=..., proc_root=...)`` returns ``{id: problem}`` for each id that is not usable now (an
  empty dict: all are). A GPU is unusable when the driver no longer lists it (``/proc/driver/nvidia/gpus``: a
  GPU that fell off the bus, Xid 79, leaves the table), when its device node is gone, when the driver reports
  it lost (``information``'s ``GPU Excluded``/``Lost`` fields), or, where ``nvidia-smi`` is on ``PATH``, when
  ``nvidia-smi`` cannot query it (an Xid that left the GPU unusable makes the query fail or answer ``[Unknown
  Error]``/``[GPU requires reset]``). A MIG slot (``MIG-<uuid>@<gpu>/<gi>/<ci>``, ``gpu_devices``) is usable
  while its parent GPU is and its capability nodes exist.
- ``FailedGpus(lock_dir)``: the GPUs this host found broken, kept as files beside the lease locks so every
  worker process of the host sees them (``mark``, ``failed``); a file holds the reason. ``clear`` forgets them
  (an admin who replaced or reset a GPU restarts the worker, which clears them at start).
Why by hand: NVML's Python binding is not in the images, and what is read here (the driver's own table, the
node, ``nvidia-smi``'s answer) is what a node's admin checks first.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

from worker.core.errors import SandboxUnavailable
from worker.grading.sandbox.gpu_devices import mig_cap_nodes, mig_parts, read_gpus, read_information

SMI_TIMEOUT_S = 10.0
SMI_BROKEN = ("[Unknown Error]", "[GPU requires reset]", "[GPU is lost]", "ERR!")


def _smi_problems(uuids: dict[str, str]) -> dict[str, str]:
    """Return ``{id: problem}`` for GPUs ``nvidia-smi`` cannot query (``uuids``: id -> GPU uuid)."""
    smi = shutil.which("nvidia-smi")
    if smi is None or not uuids:
        return {}
    try:
        done = subprocess.run(
            [smi, "--query-gpu=uuid,pstate", "--format=csv,noheader"], capture_output=True, text=True,
            timeout=SMI_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return dict.fromkeys(uuids, f"nvidia-smi did not answer: {exc}")
    answered = {}
    for line in done.stdout.splitlines():
        listed, _, pstate = line.partition(",")
        answered[listed.strip()] = pstate.strip()
    problems = {}
    for gpu_id, uuid in uuids.items():
        state = answered.get(uuid)
        if state is None:
            problems[gpu_id] = f"nvidia-smi does not list it (exit {done.returncode}: {done.stderr.strip()[:120]})"
        elif any(mark in state for mark in SMI_BROKEN):
            problems[gpu_id] = f"nvidia-smi reports it {state}"
    return problems


def probe(ids: tuple[str, ...], *, dev_root: Path = Path("/dev"), proc_root: Path = Path("/proc")) -> dict[str, str]:
    """Return ``{id: problem}`` for every GPU (or MIG slot) of ``ids`` that is not usable now."""
    gpus = read_gpus(proc_root, strict=False)
    by_id = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    problems: dict[str, str] = {}
    uuids: dict[str, str] = {}
    for gpu_id in ids:
        mig = mig_parts(gpu_id)
        parent = by_id.get(mig.gpu if mig else gpu_id)
        if parent is None:
            problems[gpu_id] = "the driver no longer lists it (fell off the bus, or removed)"
            continue
        if not (dev_root / f"nvidia{parent.minor}").exists():
            problems[gpu_id] = f"its device node /dev/nvidia{parent.minor} is gone"
            continue
        fields = read_information(proc_root, parent.bus_id)
        for name in ("GPU Excluded", "GPU Lost"):
            if fields.get(name, "").lower() in ("yes", "true"):
                problems[gpu_id] = f"the driver marks it {name.split()[-1].lower()}"
        if mig is not None and gpu_id not in problems:
            try:
                mig_cap_nodes(mig, dev_root=dev_root, proc_root=proc_root)
            except SandboxUnavailable as exc:  # its instance was destroyed or reconfigured
                problems[gpu_id] = exc.message
        if gpu_id not in problems:
            uuids[gpu_id] = parent.uuid
    problems |= _smi_problems(uuids)
    return problems


def file_name(gpu_id: str) -> str:
    """Return ``gpu_id`` as a file name (a MIG slot's ``@gpu/gi/ci`` holds slashes)."""
    return gpu_id.replace("/", "_").replace("@", "+")


class FailedGpus:
    """The GPUs this host found broken, shared by its worker processes as marker files."""

    def __init__(self, lock_dir: Path) -> None:
        self.lock_dir = lock_dir

    def _path(self, gpu_id: str) -> Path:
        return self.lock_dir / f"gpu-{file_name(gpu_id)}.failed"

    def mark(self, gpu_id: str, problem: str) -> None:
        """Record that ``gpu_id`` is broken and why (once: the first reason stays)."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(gpu_id)
        if not path.exists():
            path.write_text(problem[:500], encoding="utf-8")

    def failed(self, ids: tuple[str, ...]) -> dict[str, str]:
        """Return ``{id: reason}`` of the ids marked broken."""
        found = {}
        for gpu_id in ids:
            with contextlib.suppress(OSError):
                found[gpu_id] = self._path(gpu_id).read_text(encoding="utf-8")
        return found

    def clear(self, ids: tuple[str, ...]) -> None:
        """Forget every mark (a worker starting on a node whose GPUs were reset or replaced)."""
        for gpu_id in ids:
            with contextlib.suppress(OSError):
                self._path(gpu_id).unlink()
