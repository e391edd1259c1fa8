"""Sandbox backends and the one function that picks the configured one.

Contract: ``get_sandbox(settings)`` returns the backend named by ``settings.sandbox`` (``local``: bubblewrap
and cgroups, GPUs per job from ``GPULAB_GPU_IDS`` as device nodes, see ``gpu_devices.py``; ``unsafe``: plain
subprocess, dev/demo only; ``docker``: a fresh container per run, GPUs per job from ``GPULAB_GPU_IDS``;
``local`` with ``GPULAB_WARM_POOLS`` forks subjects from warm templates, see ``warm.py``, and ``docker`` with
it runs jobs in container pairs started before them, see ``docker_warm.py``) without checking the host; call
``check()`` on it to get a clear ``SandboxUnavailable`` early.

Importing this package (as every backend's import does) needs only the standard library: the settings
(pydantic) are read when ``get_sandbox`` is called, so ``scripts/gpu-check`` can run the ``unsafe`` backend on a
Python that has only torch and pytest (``docs/gpu.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker.grading.sandbox.base import Sandbox, SandboxRun
from worker.grading.sandbox.budget import MemoryBudget, budget_mb, shared_budget

if TYPE_CHECKING:
    from worker.core.config import Settings

__all__ = ["Sandbox", "SandboxRun", "close_warm_pools", "get_sandbox", "warm_status"]


def close_warm_pools() -> None:
    """Close this process's warm templates and container pairs: a graceful stop leaves nothing running.

    Called by ``gpulab serve``'s lifespan and a worker's shutdown: ``atexit`` alone is not enough, since uvicorn
    ends a process stopped by SIGTERM by raising the signal again, and no exit hook runs then. Only the modules
    this process imported are asked (nothing imports the Docker SDK for this).
    """
    import sys

    for name in ("worker.grading.sandbox.warm", "worker.grading.sandbox.docker_warm"):
        close = getattr(sys.modules.get(name), "close_shared", None)  # None while another thread imports it
        if close is not None:
            close()


def warm_status() -> list[dict[str, Any]]:
    """Return what this process keeps warm, per kind: ``WarmPool.status`` and ``WarmContainers.status`` together.

    Each entry: ``kind``, ``warm`` (slots or pairs up), ``size``, ``hits``, ``misses`` (by reason), ``memory_mb``
    and ``cold`` (why a kind has nothing up now; "" when it has). The heartbeat carries it to the dashboard and
    ``/metrics``.
    """
    import sys

    found: list[dict[str, Any]] = []
    for name in ("worker.grading.sandbox.warm", "worker.grading.sandbox.docker_warm"):
        # Another thread may be importing it right now: a half-initialised module has no status to give yet.
        status = getattr(sys.modules.get(name), "shared_status", None)
        if status is not None:
            found.extend(status())
    return found


def gpu_status(settings: Settings) -> dict[str, Any] | None:
    """Return this host's GPU slots for the heartbeat: ``ids``, ``per_job``, ``failed`` (id -> why); None: no GPUs.

    A failed GPU (``gpu_health``) takes no job; with fewer than ``per_job`` left the host takes none.
    """
    from worker.grading.sandbox.gpu_health import FailedGpus
    from worker.grading.sandbox.gpus import parse_gpu_ids

    ids = parse_gpu_ids(settings.gpu_ids)
    if not ids:
        return None
    failed = FailedGpus(settings.data_dir / "gpu-locks").failed(ids)
    return {"ids": list(ids), "per_job": settings.gpus_per_job, "failed": failed}


def warm_budget(settings: Settings) -> MemoryBudget:
    """Return this process's warm memory budget (``GPULAB_WARM_MEMORY_MB``, else a quarter of the machine)."""
    return shared_budget(budget_mb(settings.warm_memory_mb))


def get_sandbox(settings: Settings) -> Sandbox:
    """Return the sandbox backend ``settings`` asks for."""
    from worker.core.config import SandboxKind

    if settings.sandbox is SandboxKind.local:
        from worker.grading.sandbox.gpus import GpuSlots, parse_gpu_ids
        from worker.grading.sandbox.local import LocalSandbox
        from worker.grading.sandbox.warm import WarmLocalSandbox, parse_runtimes, shared_pool

        gpu_ids = parse_gpu_ids(settings.gpu_ids)
        # A GPU node's worker: each job leases its GPUs and its sandbox gets their device nodes (gpu_devices.py).
        gpus = GpuSlots(gpu_ids, settings.gpus_per_job, settings.data_dir / "gpu-locks") if gpu_ids else None
        runtimes = parse_runtimes(settings.warm_pools)
        if runtimes:
            # One pool per worker process, sized like its grading concurrency (see warm.py).
            pool = shared_pool(runtimes, settings.grading_workers, budget=warm_budget(settings),
                               idle_s=settings.warm_idle_s)  # fmt: skip
            return WarmLocalSandbox(
                pool=pool,
                user=settings.sandbox_user,
                cgroup_root=settings.cgroup_root,
                cgroup_name=settings.cgroup_name,
                timeout_margin_s=settings.timeout_margin_s,
                gpu_slots=gpus,
                dev_root=settings.gpu_dev_root,
                proc_root=settings.gpu_proc_root,
            )
        return LocalSandbox(
            user=settings.sandbox_user,
            cgroup_root=settings.cgroup_root,
            cgroup_name=settings.cgroup_name,
            timeout_margin_s=settings.timeout_margin_s,
            gpu_slots=gpus,
            dev_root=settings.gpu_dev_root,
            proc_root=settings.gpu_proc_root,
        )
    if settings.sandbox is SandboxKind.unsafe:
        from worker.grading.sandbox.unsafe import UnsafeSandbox

        return UnsafeSandbox(timeout_margin_s=settings.timeout_margin_s)
    from worker.grading.sandbox.docker import DockerSandbox
    from worker.grading.sandbox.gpus import GpuSlots, parse_gpu_ids
    from worker.grading.sandbox.warm import parse_runtimes

    gpu_ids = parse_gpu_ids(settings.gpu_ids)
    options: dict[str, Any] = {
        "image": settings.docker_image,
        "url": settings.docker_url,
        "api_timeout_s": settings.docker_api_timeout_s,
        "timeout_margin_s": settings.timeout_margin_s,
        # Every job of a GPU worker gets its own GPUs; the locks live with the worker's data.
        "gpu_slots": GpuSlots(gpu_ids, settings.gpus_per_job, settings.data_dir / "gpu-locks") if gpu_ids else None,
    }
    runtimes = parse_runtimes(settings.warm_pools)
    if runtimes and not gpu_ids:
        from worker.grading.sandbox.docker_warm import WarmDockerSandbox

        # One pool per worker process, sized like its grading concurrency (see docker_warm.py).
        return WarmDockerSandbox(
            runtimes=runtimes, pool_size=settings.grading_workers, budget=warm_budget(settings),
            idle_s=settings.warm_idle_s, **options,
        )  # fmt: skip
    return DockerSandbox(**options)
