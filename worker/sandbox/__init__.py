"""Sandbox backends and the one function that picks the configured one.

Contract: ``get_sandbox(settings)`` returns the backend named by ``settings.sandbox`` (``local``: bubblewrap
and cgroups; ``unsafe``: plain subprocess, dev/demo only; ``docker``: not yet available) without checking the
host; call ``check()`` on it to get a clear ``SandboxUnavailable`` early.
"""

from __future__ import annotations

from app.config import SandboxKind, Settings
from app.errors import SandboxUnavailable
from worker.sandbox.base import Sandbox, SandboxRun

__all__ = ["Sandbox", "SandboxRun", "get_sandbox"]


def get_sandbox(settings: Settings) -> Sandbox:
    """Return the sandbox backend ``settings`` asks for."""
    if settings.sandbox is SandboxKind.local:
        from worker.sandbox.local import LocalSandbox

        return LocalSandbox(
            user=settings.sandbox_user,
            cgroup_root=settings.cgroup_root,
            cgroup_name=settings.cgroup_name,
            timeout_margin_s=settings.timeout_margin_s,
        )
    if settings.sandbox is SandboxKind.unsafe:
        from worker.sandbox.unsafe import UnsafeSandbox

        return UnsafeSandbox(timeout_margin_s=settings.timeout_margin_s)
    raise SandboxUnavailable("docker backend arrives with the isolation issue; use GPULAB_SANDBOX=local for now")
