"""The ``local`` backend: bubblewrap namespaces, an unprivileged uid, rlimits and per-job cgroups.

Contract (on top of ``worker/sandbox/base.py``):
- Needs root, ``bwrap``, ``setpriv`` and ``prlimit``, the sandbox user, and cgroups (see ``cgroups.py``);
  ``check()`` says which is missing.
- Process chain: ``launch.py`` (root: joins the job's cgroups, private mount namespace, binds) ->
  ``setpriv`` (sandbox uid/gid, no groups, no capabilities, no_new_privs) -> ``prlimit`` (CPU, file size,
  open files, no core) -> ``bwrap`` (new user/pid/net/ipc/uts/mount namespaces, no nested user namespaces)
  -> ``python -m runner /job``. The environment is exactly ``sandbox_env()``: nothing of the host's.
- Inside: read-only ``/usr`` and library folders, the host Python at its own paths, the runner at
  ``/opt/gpulab/runner``, ``/job`` as in ``base.py``, private ``/tmp`` and ``/dev/shm`` tmpfs, only loopback.
- ``exit_code`` is negative when the sandboxed program was killed by a signal (bwrap reports 128+N).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from app.errors import PlatformError, SandboxUnavailable
from worker.sandbox.base import SandboxRun
from worker.sandbox.cgroups import JobCgroups, detect_layout
from worker.sandbox.process import run_process
from worker.spec import Limits

RUNNER_DIR = Path(__file__).resolve().parent.parent / "runner"
LAUNCHER = Path(__file__).resolve().parent / "launch.py"
SANDBOX_RUNNER_ROOT = "/opt/gpulab"
JOB_MOUNT = "/job"
SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's own private tmpfs, not the host's /tmp
SANDBOX_SHM = "/dev/shm"  # noqa: S108 - likewise private to the sandbox
HARD_OUTPUT_CAP = 8 * 1024 * 1024
EXIT_LAUNCH_FAILED = 125
OPEN_FILES = 1024
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def sandbox_env(limits: Limits, pythonpath: str) -> dict[str, str]:
    """Return the whole environment the sandboxed program sees."""
    threads = str(max(1, int(limits.cpus)))
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_TMP,
        "TMPDIR": SANDBOX_TMP,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "PYTHONPATH": pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONSAFEPATH": "1",
    }
    env.update(dict.fromkeys(THREAD_VARS, threads))
    return env


def hard_output_cap(limits: Limits) -> int:
    """Return the total output past which a run is stopped rather than just truncated."""
    return max(HARD_OUTPUT_CAP, 64 * limits.output_bytes)


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


class LocalSandbox:
    """Run the runner under bubblewrap as an unprivileged user inside per-job cgroups."""

    name = "local"
    isolated = True

    def __init__(
        self,
        *,
        user: str = "gpulab-sandbox",
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        cgroup_name: str = "gpulab",
        timeout_margin_s: float = 5.0,
    ) -> None:
        self.user = user
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

    def _ids(self) -> tuple[int, int]:
        try:
            entry = pwd.getpwnam(self.user)
        except KeyError:
            raise SandboxUnavailable(
                f"sandbox user {self.user!r} does not exist: create it with "
                f"'useradd -r -M -s /usr/sbin/nologin {self.user}'"
            ) from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise SandboxUnavailable(f"sandbox user {self.user!r} must not be root or in group root")
        return entry.pw_uid, entry.pw_gid

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` naming what this host lacks for the local sandbox."""
        if os.geteuid() != 0:
            raise SandboxUnavailable("the local sandbox must run as root (it drops to the sandbox user itself)")
        self._tools()
        self._ids()
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
        """Run the runner over ``job_dir`` in the sandbox; see the module contract."""
        self.check()
        tools = self._tools()
        uid, gid = self._ids()
        job_dir = job_dir.resolve()
        os.chown(job_dir / "out", uid, gid)
        cgroups = JobCgroups(self.cgroup_root, self.cgroup_name, uuid.uuid4().hex)
        stage = Path(tempfile.mkdtemp(prefix="gpulab-stage-"))
        try:
            stage.chmod(0o711)
            procs = cgroups.create(limits)
            binds, bwrap_args = self._mounts(stage, job_dir, limits, uid, gid)
            error_file = stage / "launch-error"
            spec = {
                "cgroup_procs": [str(p) for p in procs],
                "binds": binds,
                "argv": self._argv(tools, uid, gid, limits, bwrap_args),
                "env": sandbox_env(limits, SANDBOX_RUNNER_ROOT),
            }
            result = run_process(
                [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec), str(error_file)],
                timeout_s=limits.timeout_s + self.timeout_margin_s,
                output_bytes=limits.output_bytes,
                hard_cap_bytes=hard_output_cap(limits),
                kill=lambda _proc: cgroups.kill(),
                env={},
                cwd="/",
            )
            if result.exit_code == EXIT_LAUNCH_FAILED and error_file.exists():
                raise PlatformError(f"sandbox launcher failed: {error_file.read_text()[:500]}")
            memory_exceeded = cgroups.oom_killed()
        finally:
            try:
                cgroups.remove()
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        exit_code = result.exit_code
        if exit_code is not None and 128 < exit_code <= 128 + 64:
            exit_code = 128 - exit_code
        return SandboxRun(
            exit_code=exit_code,
            timed_out=result.timed_out,
            memory_exceeded=memory_exceeded,
            output_exceeded=result.output_exceeded,
            stdout=result.stdout,
            stderr=result.stderr,
            output_truncated=result.output_truncated,
            wall_s=result.wall_s,
        )

    def _mounts(
        self, stage: Path, job_dir: Path, limits: Limits, uid: int, gid: int
    ) -> tuple[list[list[str]], list[str]]:
        """Return the launcher's bind list and bwrap's filesystem arguments."""
        binds: list[list[str]] = []
        tmpfs_bytes = str(limits.tmpfs_mb * 1024 * 1024)
        # The private tmpfs comes first: a checkout under the host's /tmp (CI clones there) must be bound
        # on top of it, not hidden below it.
        args: list[str] = [
            "--ro-bind", "/usr", "/usr",
            "--size", tmpfs_bytes, "--tmpfs", SANDBOX_TMP,
        ]  # fmt: skip

        def staged(source: str) -> str:
            target = stage / f"m{len(binds)}"
            target.mkdir(mode=0o755)
            binds.append([source, str(target)])
            return str(target)

        for name in ROOT_LINKS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{name}"]
        for name in ETC_FILES:
            if (Path("/etc") / name).exists():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        generated = {
            "passwd": f"root:x:0:0::/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}::/tmp:/usr/sbin/nologin\n",
            "group": f"root:x:0:\nsandbox:x:{gid}:\n",
            "hosts": "127.0.0.1 localhost\n::1 localhost ip6-localhost\n",
        }
        for name, text in generated.items():
            path = stage / name
            path.write_text(text)
            path.chmod(0o644)
            args += ["--ro-bind", str(path), f"/etc/{name}"]
        for root in python_roots():
            args += ["--ro-bind", staged(root), root]
        args += ["--ro-bind", staged(str(RUNNER_DIR)), f"{SANDBOX_RUNNER_ROOT}/runner"]
        job = staged(str(job_dir))
        args += [
            "--ro-bind", f"{job}/job.json", f"{JOB_MOUNT}/job.json",
            "--ro-bind", f"{job}/submission", f"{JOB_MOUNT}/submission",
            "--ro-bind", f"{job}/tests", f"{JOB_MOUNT}/tests",
            "--bind", f"{job}/out", f"{JOB_MOUNT}/out",
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", tmpfs_bytes, "--tmpfs", SANDBOX_SHM,
            "--remount-ro", "/",
        ]  # fmt: skip
        return binds, args

    def _argv(self, tools: dict[str, str], uid: int, gid: int, limits: Limits, fs_args: list[str]) -> list[str]:
        """Return the setpriv -> prlimit -> bwrap -> python command line."""
        cpu_s = int(limits.timeout_s) + 2
        fsize = limits.file_size_mb * 1024 * 1024
        return [
            tools["setpriv"],
            f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all",
            tools["prlimit"],
            f"--cpu={cpu_s}:{cpu_s + 1}", f"--fsize={fsize}", f"--nofile={OPEN_FILES}", "--core=0",
            "--",
            tools["bwrap"],
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session",
            "--hostname", "gpulab",
            *fs_args,
            "--chdir", JOB_MOUNT,
            "--",
            sys.executable, "-m", "runner", JOB_MOUNT,
        ]  # fmt: skip
