"""Launcher run as root by the local backend between ``Popen`` and ``setpriv``; stdlib and ``linux.py`` only.

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
leaves (so no zombie waits for a slow init) and exits with the child's code, 128+N if signal N killed it
(``linux.exit_code``). If the child fails before exec, it writes the reason to ``ERROR_FILE`` (root-only, so
sandboxed code cannot fake it) and the launcher exits ``linux.EXIT_LAUNCH_FAILED`` (125).

Why: bwrap resolves bind sources as the unprivileged uid, so a Python installed under ``/root`` cannot be
bound directly; doing it here (root, private namespace) avoids both a chmod of ``/root`` and a copy.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Isolated mode (``-I``) keeps even this script's folder off sys.path, so nothing implicit is on the path of a
# root process; the shared helper sits in this (root-owned) folder, so the folder goes on by hand, and last, so
# nothing in it can shadow the standard library.
sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from linux import (
    CLONE_NEWNS,
    EXIT_LAUNCH_FAILED,
    MS_BIND,
    MS_PRIVATE,
    MS_REC,
    check,
    die_with_parent,
    libc,
    reap,
)

PR_SET_CHILD_SUBREAPER = 36
MNT_DETACH = 2
MAX_PROC_COVERS = 256


def _unmask_proc() -> None:
    """Detach, in this private namespace only, whatever is mounted below ``/proc`` (deepest first).

    Why: a container engine covers parts of its containers' ``/proc`` (``/proc/kcore``, ``/proc/sys``, ...),
    and the kernel lets bwrap mount the sandbox's own, fresh ``/proc`` inside its user namespace only where
    no such cover hides part of the one it already sees. So in the grading-host container the covers go here,
    in the launcher's throwaway namespace, and the worker's own ``/proc`` keeps them. The sandbox never sees
    this ``/proc``: it gets a new one of its own pid namespace. On a host without covers this detaches nothing
    that matters (``binfmt_misc`` at most).
    """
    for _ in range(MAX_PROC_COVERS):  # re-read each time: covers may be stacked on one path
        with open("/proc/self/mountinfo") as handle:
            points = [line.split()[4] for line in handle if line.split()[4].startswith("/proc/")]
        if not points:
            return
        point = max(points, key=len)
        check(libc.umount2(point.encode(), MNT_DETACH), f"detach {point}")
    raise OSError(f"more than {MAX_PROC_COVERS} mounts below /proc")


def _exec_child(spec: dict[str, Any]) -> None:
    """Join the cgroups, set up the mounts and exec; only returns by raising."""
    pid = str(os.getpid())
    for procs in spec["cgroup_procs"]:
        with open(procs, "w") as handle:
            handle.write(pid)
    if spec["binds"]:
        check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        # Private propagation: nothing mounted here may appear in the host's namespace.
        check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
        _unmask_proc()
        for source, target in spec["binds"]:
            check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"bind {source}")
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
    check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "become a subreaper")
    # Die with the worker: the whole chain below has --die-with-parent or a dead pid namespace after us.
    die_with_parent()
    child = os.fork()
    if child == 0:
        try:
            _exec_child(spec)
        except BaseException as exc:
            with open(argv[2], "w") as report:
                report.write(f"{type(exc).__name__}: {exc}")
        os._exit(EXIT_LAUNCH_FAILED)
    return reap(child, every=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
