"""The ``local`` backend: two bubblewrap sandboxes (judge, subject), unprivileged uids, rlimits, cgroups.

Contract (on top of ``worker/grading/sandbox/base.py``, which defines the two roles and their mounts):
- Needs root, ``bwrap``, ``setpriv`` and ``prlimit``, the users ``gpulab-sandbox`` (subject) and
  ``gpulab-judge`` (judge), and cgroups (see ``cgroups.py``); ``check()`` says which is missing.
- Per role, the process chain is ``launch.py`` (root: joins that role's cgroups, private mount namespace,
  binds, opens the seccomp program as an inherited fd) -> ``setpriv`` (the role's uid/gid, no groups, no
  capabilities, no_new_privs) -> ``prlimit`` (CPU, file size, open files, no core) -> ``bwrap`` (new
  user/pid/net/ipc/uts/mount namespaces, no nested user namespaces, ``--seccomp``) -> ``python -m
  runner.judge /job`` or ``python -m runner.subject /job``. The environment is exactly ``policy.sandbox_env()``.
- Inside: read-only ``/usr`` and library folders, the host Python at its own paths, the runner at
  ``/opt/gpulab/runner``, ``/job`` as ``base.py`` says for the role, private size-capped ``/tmp`` and
  ``/dev/shm``, only loopback (each role its own network namespace; the Unix socket is a file).
- Each role's cgroup has that role's limits (``policy.role_limits``). Both are killed and removed when the
  judge ends or the wall clock (``timeout_s`` + margin) runs out.
- ``exit_code`` is the judge's, negative when it was killed by a signal (bwrap reports 128+N: ``linux.returncode``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.bank.spec import Limits
from worker.core.errors import HostUnfit, PlatformError, SandboxUnavailable
from worker.grading.boot.linux import EXIT_LAUNCH_FAILED, returncode
from worker.grading.sandbox.base import ROLE_MOUNTS, SandboxRun
from worker.grading.sandbox.cgroups import JobCgroups, detect_layout
from worker.grading.sandbox.gpu_devices import NO_GPUS, DevicePlan, device_plan, device_rules
from worker.grading.sandbox.gpu_health import probe as probe_gpus
from worker.grading.sandbox.gpus import GpuSlots
from worker.grading.sandbox.policy import (
    JOB_MOUNT,
    OPEN_FILES,
    RUNNER_DIR,
    SANDBOX_RUNNER_ROOT,
    SANDBOX_TMP,
    cpu_rlimit_s,
    hard_output_cap,
    role_limits,
    sandbox_env,
)
from worker.grading.sandbox.process import ProcessResult, run_process
from worker.grading.sandbox.seccomp import write_filter

LAUNCHER = Path(__file__).resolve().parents[1] / "boot" / "launch.py"
SANDBOX_SHM = "/dev/shm"  # noqa: S108 - private to the sandbox, like policy.SANDBOX_TMP
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
SECCOMP_FD = 10
GPU_WAIT_S = 300.0  # how long a GPU job waits for its GPUs before a retry (docker.py waits as long)


def _within(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def python_roots() -> list[str]:
    """Return the folders that make the worker's Python (venv included) work at its own paths."""
    roots: list[str] = []
    real_exe_dir = os.path.dirname(os.path.realpath(sys.executable))
    for candidate in (sys.base_prefix, sys.prefix, os.path.dirname(real_exe_dir)):
        path = os.path.realpath(candidate)
        if not _within(path, ["/usr", *roots]):
            roots.append(path)
    # A venv whose own path is a symlink must also appear at the unresolved path sys.executable uses.
    if not _within(sys.prefix, ["/usr", *roots]):
        roots.append(sys.prefix)
    return sorted(roots, key=len)


MountOp = tuple[str, ...]


def mount_plan(
    stage: Path, job_dir: Path, role: str, limits: Limits, uid: int, gid: int, devices: DevicePlan = NO_GPUS
) -> list[MountOp]:
    """Return the sandbox's filesystem for ``role``, in order, as ``(kind, ...)`` operations.

    Kinds: ``("ro-bind"|"bind", host_source, target)`` (a source needing root to reach is marked by
    ``stage-bind``/``stage-ro-bind``), ``("tmpfs", target, size_bytes)``, ``("symlink", link_text, target)``,
    ``("proc", target)``, ``("dev", target)``, ``("dev-bind", host_node, target)`` (a GPU job's own device
    nodes from ``gpu_devices.device_plan``, on the minimal ``/dev``: nothing else of the host's),
    ``("remount-ro", target)``. The cold path renders it as bwrap arguments (``bwrap_args``), the warm path
    applies it with mount(2) (``entry.py``): one plan, so both sandboxes see the same tree. Generated ``/etc``
    files are written into ``stage`` here.
    """
    tmpfs_bytes = str(limits.tmpfs_mb * 1024 * 1024)
    # The private tmpfs comes first: a checkout under the host's /tmp (CI clones there) must be bound
    # on top of it, not hidden below it.
    plan: list[MountOp] = [("ro-bind", "/usr", "/usr"), ("tmpfs", SANDBOX_TMP, tmpfs_bytes)]
    for name in ROOT_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            plan.append(("symlink", os.readlink(host), f"/{name}"))
        elif host.is_dir():
            plan.append(("ro-bind", str(host), f"/{name}"))
    for name in ETC_FILES:
        if (Path("/etc") / name).exists():
            plan.append(("ro-bind", f"/etc/{name}", f"/etc/{name}"))
    generated = {
        "passwd": f"root:x:0:0::/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}::/tmp:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nsandbox:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost ip6-localhost\n",
    }
    for name, text in generated.items():
        path = stage / name
        path.write_text(text)
        path.chmod(0o644)
        plan.append(("ro-bind", str(path), f"/etc/{name}"))
    for root in python_roots():
        plan.append(("stage-ro-bind", root, root))
    plan.append(("stage-ro-bind", str(RUNNER_DIR), f"{SANDBOX_RUNNER_ROOT}/runner"))
    for name, mode in ROLE_MOUNTS[role]:
        kind = "stage-bind" if mode == "rw" else "stage-ro-bind"
        plan.append((kind, str(job_dir / name), f"{JOB_MOUNT}/{name}"))
    plan += [("proc", "/proc"), ("dev", "/dev")]
    plan += [("dev-bind", source, target) for source, target in devices.nodes]
    plan += [("tmpfs", SANDBOX_SHM, tmpfs_bytes), ("remount-ro", "/")]
    return plan


def bwrap_args(plan: list[MountOp], staged: Callable[[str], str]) -> list[str]:
    """Render a mount plan as bwrap arguments; ``staged(source)`` returns where root bound ``source``."""
    args: list[str] = []
    job_stage: dict[str, str] = {}
    for op in plan:
        kind = op[0]
        if kind in ("ro-bind", "bind", "dev-bind"):
            args += [f"--{kind}", op[1], op[2]]
        elif kind in ("stage-ro-bind", "stage-bind"):
            source = op[1]
            if op[2].startswith(JOB_MOUNT + "/"):
                # The job folder is staged once; its parts are bound from there.
                parent = os.path.dirname(source)
                if parent not in job_stage:
                    job_stage[parent] = staged(parent)
                source = f"{job_stage[parent]}/{os.path.basename(source)}"
            else:
                source = staged(source)
            args += ["--ro-bind" if kind == "stage-ro-bind" else "--bind", source, op[2]]
        elif kind == "tmpfs":
            args += ["--size", op[2], "--tmpfs", op[1]]
        elif kind == "symlink":
            args += ["--symlink", op[1], op[2]]
        elif kind in ("proc", "dev", "remount-ro"):
            args += [f"--{kind}", op[1]]
        else:
            raise ValueError(f"unknown mount operation {kind!r}")
    return args


@dataclasses.dataclass(frozen=True)
class RolePlan:
    """One role's sandbox for one job, as both start paths (cold launcher, warm fork) apply it."""

    role: str
    stage: Path  # the role's own folder in the job's stage (mount points, the warm path's new root)
    job_dir: Path
    limits: Limits
    uid: int
    gid: int
    tools: dict[str, str]
    cgroups: JobCgroups
    procs: list[Path]  # the cgroup.procs files the started process joins
    seccomp: Path
    error_file: Path  # where a launcher that could not enter the sandbox says why
    devices: DevicePlan = NO_GPUS  # the subject's GPUs (a GPU job's), none for the judge

    @classmethod
    def prepare(
        cls,
        stage: Path,
        job_dir: Path,
        role: str,
        limits: Limits,
        ids: tuple[int, int],
        tools: dict[str, str],
        cgroups: JobCgroups,
        seccomp: Path,
        devices: DevicePlan = NO_GPUS,
    ) -> RolePlan:
        """Make the role's stage folder and its cgroups (with ``limits``); return the plan."""
        role_stage = stage / role
        role_stage.mkdir(mode=0o711)
        procs = cgroups.create(limits, devices=device_rules(devices))
        return cls(role, role_stage, job_dir, limits, *ids, tools, cgroups, procs, seccomp,
                   stage / f"{role}-launch-error", devices)  # fmt: skip

    def mount_plan(self) -> list[MountOp]:
        return mount_plan(self.stage, self.job_dir, self.role, self.limits, self.uid, self.gid, self.devices)

    def env(self) -> dict[str, str]:
        """Return the role's whole environment: ``policy.sandbox_env`` and its GPUs' CUDA variables."""
        return {**sandbox_env(self.limits, SANDBOX_RUNNER_ROOT), **self.devices.env}

    def rlimits(self) -> dict[str, Any]:
        """Return the process limits both start paths set: CPU seconds (soft, hard), file size, open files."""
        cpu_s = list(cpu_rlimit_s(self.limits))
        return {"cpu": cpu_s, "fsize": self.limits.file_size_mb * 1024 * 1024, "nofile": OPEN_FILES}


def _note_gpus(job_dir: Path, count: int) -> None:
    """Write the GPUs the job was given into its ``subject.json`` (``devices.gpus``: vdev and the template key)."""
    path = job_dir / "subject.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.setdefault("devices", {})["gpus"] = count
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


class LocalSandbox:
    """Run the judge and the subject under bubblewrap as two unprivileged users in per-job cgroups."""

    name = "local"
    isolated = True

    def __init__(
        self,
        *,
        user: str = "gpulab-sandbox",
        judge_user: str = "gpulab-judge",
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        cgroup_name: str = "gpulab",
        timeout_margin_s: float = 5.0,
        stage_root: Path | None = None,
        gpu_slots: GpuSlots | None = None,
        dev_root: Path = Path("/dev"),
        proc_root: Path = Path("/proc"),
    ) -> None:
        self.stage_root = stage_root
        # A GPU worker's: each job leases its GPUs here and its subject gets their nodes (gpu_devices.py).
        self.gpu_slots = gpu_slots
        self.dev_root = dev_root
        self.proc_root = proc_root
        self.user = user
        self.judge_user = judge_user
        self.cgroup_root = cgroup_root
        self.cgroup_name = cgroup_name
        self.timeout_margin_s = timeout_margin_s

    def _tools(self) -> dict[str, str]:
        tools = {name: shutil.which(name) for name in ("bwrap", "setpriv", "prlimit")}
        missing = [name for name, path in tools.items() if path is None]
        if missing:
            raise SandboxUnavailable(
                f"the local sandbox needs {', '.join(missing)}: install bubblewrap and util-linux "
                "(apt-get install -y bubblewrap util-linux)"
            )
        return {name: str(path) for name, path in tools.items()}

    def _ids(self, user: str | None = None) -> tuple[int, int]:
        user = user or self.user
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise SandboxUnavailable(
                f"sandbox user {user!r} does not exist: create it with "
                f"'useradd -r -M -s /usr/sbin/nologin {user}' (scripts/setup does)"
            ) from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise SandboxUnavailable(f"sandbox user {user!r} must not be root or in group root")
        return entry.pw_uid, entry.pw_gid

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` naming what this host lacks for the local sandbox."""
        if os.geteuid() != 0:
            raise SandboxUnavailable("the local sandbox must run as root (it drops to the sandbox users itself)")
        self._tools()
        subject, judge = self._ids(self.user), self._ids(self.judge_user)
        if subject[0] == judge[0]:
            raise SandboxUnavailable(f"{self.user!r} and {self.judge_user!r} must be different users")
        if detect_layout(self.cgroup_root) is None:
            raise SandboxUnavailable(
                f"no usable cgroups at {self.cgroup_root}: need cgroup v1 memory/pids/cpu or cgroup v2 with them"
            )
        if not os.access(self.cgroup_root, os.W_OK) and not os.access(self.cgroup_root / "memory", os.W_OK):
            raise SandboxUnavailable(f"cgroups at {self.cgroup_root} are not writable")
        max_ns = Path("/proc/sys/user/max_user_namespaces")
        if max_ns.exists() and max_ns.read_text().strip() == "0":
            raise SandboxUnavailable("user namespaces are disabled (user.max_user_namespaces = 0); bwrap needs them")

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Run the judge and the subject over ``job_dir``; see the module contract."""
        self.check()
        lease = self.gpu_slots.acquire(GPU_WAIT_S) if self.gpu_slots else None
        try:
            devices = NO_GPUS
            if lease is not None:
                self._check_gpus(lease.ids, when="before")
                devices = device_plan(lease.ids, dev_root=self.dev_root, proc_root=self.proc_root)
                _note_gpus(job_dir, len(lease.ids))
            run = self._run(job_dir, limits, devices)
            if lease is not None:
                self._check_gpus(lease.ids, when="during")  # a result from a failing GPU is not a verdict
            return run
        finally:
            if lease is not None:
                lease.release()

    def _check_gpus(self, ids: tuple[str, ...], *, when: str) -> None:
        """Mark the GPUs of ``ids`` that failed (``gpu_health``) and raise ``HostUnfit`` if any did."""
        assert self.gpu_slots is not None
        problems = probe_gpus(ids, dev_root=self.dev_root, proc_root=self.proc_root)
        for gpu_id, problem in problems.items():
            self.gpu_slots.failed.mark(gpu_id, problem)
        if problems:
            said = "; ".join(f"GPU {i}: {p}" for i, p in problems.items())
            raise HostUnfit(f"this host's GPU failed {when} the job ({said}): it goes back to the queue")

    def _run(self, job_dir: Path, limits: Limits, devices: DevicePlan) -> SandboxRun:
        tools = self._tools()
        subject_ids, judge_ids = self._ids(self.user), self._ids(self.judge_user)
        job_dir = job_dir.resolve()
        for name in ("out", "ipc"):
            os.chown(job_dir / name, *judge_ids)
        job_id = uuid.uuid4().hex
        judge_limits = role_limits("judge", limits)
        groups = {"judge": JobCgroups(self.cgroup_root, self.cgroup_name, f"{job_id}-judge"),
                  "subject": JobCgroups(self.cgroup_root, self.cgroup_name, f"{job_id}-subject")}  # fmt: skip
        stage = Path(tempfile.mkdtemp(prefix="gpulab-stage-", dir=self.stage_root))
        results: dict[str, ProcessResult] = {}
        try:
            stage.chmod(0o711)
            seccomp = stage / "seccomp.bpf"
            write_filter(seccomp)
            timeout_s = limits.timeout_s + self.timeout_margin_s
            plans = {
                role: RolePlan.prepare(stage, job_dir, role, role_limits, ids, tools, groups[role], seccomp, gpus)
                for role, role_limits, ids, gpus in (("judge", judge_limits, judge_ids, NO_GPUS),
                                                     ("subject", limits, subject_ids, devices))
            }  # fmt: skip
            starters = {role: self._starter(plan) for role, plan in plans.items()}

            def start(role: str) -> None:
                results[role] = starters[role](timeout_s)

            subject_thread = threading.Thread(target=start, args=("subject",), daemon=True)
            subject_thread.start()
            try:
                start("judge")
            finally:
                # The verdict is the judge's; whatever the learner left running ends with it.
                groups["subject"].kill()
                subject_thread.join(timeout=timeout_s + 10)
            for role in ("judge", "subject"):
                result = results.get(role)
                error_file = plans[role].error_file
                if result is None or (result.exit_code == EXIT_LAUNCH_FAILED and error_file.exists()):
                    detail = error_file.read_text()[:500] if error_file.exists() else "no result"
                    raise PlatformError(f"sandbox launcher ({role}) failed: {detail}")
            memory_exceeded = groups["subject"].oom_killed()
            judge_oom = groups["judge"].oom_killed()
        finally:
            try:
                for group in groups.values():
                    group.remove()
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        judge, subject = results["judge"], results["subject"]
        if judge_oom and not memory_exceeded:
            raise PlatformError("the judge ran out of memory (JUDGE_EXTRA_MB too small for this exercise?)")
        return SandboxRun(
            exit_code=returncode(judge.exit_code),
            timed_out=judge.timed_out,
            memory_exceeded=memory_exceeded,
            output_exceeded=subject.output_exceeded,
            stdout=subject.stdout,
            stderr=subject.stderr,
            output_truncated=subject.output_truncated,
            wall_s=judge.wall_s,
            judge_stderr=judge.stderr,
        )

    def _starter(self, plan: RolePlan) -> Callable[[float], ProcessResult]:
        """Return the function that starts ``plan.role`` cold (``warm.WarmLocalSandbox`` may fork it instead)."""
        launch = {
            "cgroup_procs": [str(p) for p in plan.procs],
            "binds": (mounts := self._mounts(plan))[0],
            "fds": {str(SECCOMP_FD): str(plan.seccomp)},
            "argv": self._argv(plan, mounts[1]),
            "env": plan.env(),
        }

        def start(timeout_s: float) -> ProcessResult:
            return run_process(
                [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(launch), str(plan.error_file)],
                timeout_s=timeout_s,
                output_bytes=plan.limits.output_bytes,
                hard_cap_bytes=hard_output_cap(plan.limits),
                kill=lambda _proc: plan.cgroups.kill(),
                env={},
                cwd="/",
            )

        return start

    def _mounts(self, plan: RolePlan) -> tuple[list[list[str]], list[str]]:
        """Return the launcher's bind list and bwrap's filesystem arguments for the role."""
        binds: list[list[str]] = []

        def staged(source: str) -> str:
            target = plan.stage / f"m{len(binds)}"
            target.mkdir(mode=0o755)
            binds.append([source, str(target)])
            return str(target)

        return binds, bwrap_args(plan.mount_plan(), staged)

    def _argv(self, plan: RolePlan, fs_args: list[str]) -> list[str]:
        """Return the setpriv -> prlimit -> bwrap -> python command line of the role."""
        tools, limits = plan.tools, plan.rlimits()
        cpu_soft, cpu_hard = limits["cpu"]
        return [
            tools["setpriv"],
            f"--reuid={plan.uid}", f"--regid={plan.gid}", "--clear-groups",
            "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all",
            tools["prlimit"],
            f"--cpu={cpu_soft}:{cpu_hard}", f"--fsize={limits['fsize']}", f"--nofile={limits['nofile']}", "--core=0",
            "--",
            tools["bwrap"],
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session",
            "--hostname", "gpulab",
            "--seccomp", str(SECCOMP_FD),
            *fs_args,
            "--chdir", JOB_MOUNT,
            "--",
            sys.executable, "-m", f"runner.{plan.role}", JOB_MOUNT,
        ]  # fmt: skip
