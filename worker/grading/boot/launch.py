"""Launcher run as root by the local backend between ``Popen`` and ``setpriv``; stdlib only.

Contract: ``python -I -S launch.py SPEC_JSON ERROR_FILE`` where the spec is ``{"cgroup_procs": [path...],
"binds": [[source, target]...], "fds": {"10": path...}, "argv": [...], "env": {...}}``. It forks one child
that writes its pid into every ``cgroup.procs`` (so everything it becomes is accounted from its first
instruction), enters a private mount namespace, bind-mounts each source onto its target there (targets are
empty folders the sandbox uid can reach; sources may sit below folders it cannot, like ``/root``), opens
each ``fds`` path read-only as exactly that inheritable fd (bwrap's ``--seccomp FD`` reads it; the file
may be root-only) and ``execve``s ``argv`` with exactly ``env``. The launcher works the same in a child
forked from a warm, pre-imported template process: every step acts on the calling process only.
The mounts vanish with the namespace when the run ends.
The launcher itself stays outside the job's cgroups as a child subreaper: it reaps every process the run
leaves (so no zombie waits for a slow init) and exits with the child's code, 128+N if signal N killed it.
If the child fails before exec, it writes the reason to ``ERROR_FILE`` (root-only, so sandboxed code cannot
fake it) and the launcher exits 125.

Why: bwrap resolves bind sources as the unprivileged uid, so a Python installed under ``/root`` cannot be
bound directly; doing it here (root, private namespace) avoids both a chmod of ``/root`` and a copy.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_LAUNCH_FAILED = 125


def _check(result: int, libc: ctypes.CDLL, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _exec_child(spec: dict[str, Any], libc: ctypes.CDLL) -> None:
    """Join the cgroups, set up the mounts and exec; only returns by raising."""
    pid = str(os.getpid())
    for procs in spec["cgroup_procs"]:
        with open(procs, "w") as handle:
            handle.write(pid)
    if spec["binds"]:
        _check(libc.unshare(CLONE_NEWNS), libc, "unshare(CLONE_NEWNS)")
        # Private propagation: nothing mounted here may appear in the host's namespace.
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), libc, "make / private")
        for source, target in spec["binds"]:
            _check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), libc, f"bind {source}")
    for number, path in spec.get("fds", {}).items():
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        if fd != int(number):
            os.dup2(fd, int(number))
            os.close(fd)
        os.set_inheritable(int(number), True)
    os.execve(spec["argv"][0], spec["argv"], spec["env"])  # noqa: S606 - an exact argv, no shell involved


def main(argv: list[str]) -> int:
    """Start the child, reap everything, and return the exit code to report."""
    spec = json.loads(argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), libc, "become a subreaper")
    # Die with the worker: the whole chain below has --die-with-parent or a dead pid namespace after us.
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), libc, "set parent-death signal")
    child = os.fork()
    if child == 0:
        try:
            _exec_child(spec, libc)
        except BaseException as exc:
            with open(argv[2], "w") as report:
                report.write(f"{type(exc).__name__}: {exc}")
        os._exit(EXIT_LAUNCH_FAILED)
    code = EXIT_LAUNCH_FAILED
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return code
        except InterruptedError:
            continue
        if pid == child:
            exit_code = os.waitstatus_to_exitcode(status)
            code = exit_code if exit_code >= 0 else 128 - exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
