"""Enter a role's sandbox (subject or judge) from inside a running process (a fork of a warm template); stdlib only.

Contract: ``enter(spec, stdout_fd, stderr_fd)`` is called as root in a freshly forked child of a template
that has imported a framework (subject) or pytest and the judge's modules (judge) but never seen a job. It
turns the caller into the same sandbox the cold path (``launch.py`` -> ``setpriv`` -> ``prlimit`` -> ``bwrap``)
builds for ``spec["role"]``, then returns **in a new process**: the sandboxed subject or judge, pid 2 of a new
pid namespace under a small init (pid 1), like bwrap's. Every other process of the chain exits with that
process's status and never returns. The spec (``warm.py`` writes it; the role decides only what the caller
passes in: the role's mount plan, uid/gid, cgroups and limits)::

    {"role": "subject"|"judge", "cgroup_procs": [path...], "plan": [[kind, ...]...] (local.mount_plan for
     the role), "root": empty dir for the new root, "uid": int, "gid": int, "rlimits": {"cpu": [s, h],
     "fsize": n, "nofile": n}, "env": {...}, "seccomp": path (root-only BPF program of seccomp.py),
     "hostname": "gpulab", "chdir": "/job", "runner_root": "/opt/gpulab", "error_file": path}

Steps, in this order (each acts on the calling process only):
1. join the job's cgroups (so everything after is accounted), die with the template, stdio from the job;
2. ``unshare`` mount, pid, IPC and UTS namespaces; fork: the child is pid 1 of the new namespace;
3. pid 1 (still root, host user namespace): private mount propagation, a tmpfs root built from the mount
   plan (read-only binds, /proc, a minimal /dev plus a GPU job's own nodes, sized tmpfs /tmp and /dev/shm),
   ``pivot_root``, old root detached, ``/`` read-only; hostname;
4. rlimits; capability bounding set emptied; no groups; ``setresgid``/``setresuid`` to the sandbox ids
   (this clears every capability); a new user namespace mapping only that uid/gid and a new network
   namespace it owns (as bwrap's: so loopback comes up without ``CAP_NET_ADMIN`` over the host's), loopback
   up, then every capability dropped (effective, permitted, inheritable, bounding, ambient all 0); ``no_new_privs``; the
   seccomp filter; the parent-death signal; the environment is exactly ``spec["env"]``; every inherited fd
   but 0, 1, 2 is closed; a new session;
5. fork the subject or judge (pid 2); pid 1 stays as a reaper and exits with its status.
Before step 4 completes a failure is written to ``error_file`` (root-only) and the chain exits
``linux.EXIT_LAUNCH_FAILED`` (125); otherwise each process of the chain passes the status on (``linux.exit_code``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import sys
from typing import Any

from linux import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    DEV_NODES,
    EXIT_LAUNCH_FAILED,
    MS_BIND,
    MS_PRIVATE,
    MS_REC,
    check,
    die_with_parent,
    libc,
    reap,
)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MNT_DETACH = 2
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda v: v.encode() if v is not None else None  # noqa: E731
    check(libc.mount(enc(source), target.encode(), enc(fstype), flags, enc(data)), f"mount {target}")


def _prctl(option: int, arg: int, what: str) -> None:
    check(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), what)


def _syscall_no(table: dict[str, int]) -> int:
    return table[os.uname().machine]


def _mkdirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _target(root: str, path: str) -> str:
    return root + path if path.startswith("/") else f"{root}/{path}"


def _bind(source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        _mkdirs(target)
    else:
        _mkdirs(os.path.dirname(target))
        if not os.path.exists(target):
            open(target, "w").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
    _mount(None, target, None, flags)


def _dev(target: str) -> None:
    """A minimal /dev like bwrap's ``--dev``: a tmpfs with the harmless nodes bound from the host."""
    _mkdirs(target)
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for name in DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{target}/{name}", "w").close()
            _mount(f"/dev/{name}", f"{target}/{name}", None, MS_BIND)
    for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                       ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"), ("ptmx", "pts/ptmx")):  # fmt: skip
        os.symlink(link, f"{target}/{name}")
    _mkdirs(f"{target}/shm")
    _mkdirs(f"{target}/pts")
    with contextlib.suppress(OSError):  # without pseudo-terminals: nothing here needs one
        _mount("devpts", f"{target}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _apply_plan(plan: list[list[str]], root: str, uid: int, gid: int) -> None:
    """Build the sandbox's tree under ``root`` (a fresh tmpfs) from ``local.mount_plan``'s operations."""
    for op in plan:
        kind = op[0]
        if kind in ("ro-bind", "bind", "stage-ro-bind", "stage-bind"):
            _bind(op[1], _target(root, op[2]), read_only=kind.endswith("ro-bind"))
        elif kind == "tmpfs":
            target = _target(root, op[1])
            _mkdirs(target)
            # bwrap mounts it as the sandbox user inside its user namespace: owned by that uid, 0755.
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={op[2]},mode=0755,uid={uid},gid={gid}")
        elif kind == "symlink":
            target = _target(root, op[2])
            _mkdirs(os.path.dirname(target))
            os.symlink(op[1], target)
        elif kind == "proc":
            target = _target(root, op[1])
            _mkdirs(target)
            _mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            for name in PROC_READ_ONLY:
                path = f"{target}/{name}"
                if os.path.exists(path):
                    _mount(path, path, None, MS_BIND | MS_REC)
                    _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        elif kind == "dev":
            _dev(_target(root, op[1]))
        elif kind == "dev-bind":
            # A GPU job's own device node (gpu_devices.py), on the minimal /dev: the one bind without nodev.
            target = _target(root, op[2])
            open(target, "w").close()
            _mount(op[1], target, None, MS_BIND)
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID)
        elif kind == "remount-ro":
            pass  # after pivot_root, below
        else:
            raise ValueError(f"unknown mount operation {kind!r}")


def _pivot(root: str) -> None:
    os.chdir(root)
    check(libc.syscall(_syscall_no(SYS_PIVOT_ROOT), b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        import fcntl

        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except OSError:
        return 40


def _drop_capabilities(last_cap: int) -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets of this process."""
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap, f"drop capability {cap} from the bounding set")
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = struct.pack("=Ii", LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two zeroed __user_cap_data_struct
    hbuf, dbuf = ctypes.create_string_buffer(header), ctypes.create_string_buffer(data)
    check(libc.syscall(_syscall_no(SYS_CAPSET), hbuf, dbuf), "capset")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _own_user_namespace(uid: int, gid: int, last_cap: int) -> None:
    """A user namespace mapping only the sandbox ids (like bwrap's) and the network namespace it owns, loopback up,
    then every capability dropped.

    Why the network namespace here and not with the others: bringing loopback up takes ``CAP_NET_ADMIN`` over
    the namespace's owner; owned by this new user namespace (as bwrap's is), that holds for a moment here, so a
    worker in a container needs no ``CAP_NET_ADMIN`` of its own.
    """
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(CLONE_NEWUSER | CLONE_NEWNET)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    _loopback_up()
    _drop_capabilities(last_cap)


def _load_seccomp(program: bytes) -> None:
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "no_new_privs")
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "load the seccomp filter")


def _set_rlimits(limits: dict[str, Any]) -> None:
    import resource

    cpu = limits["cpu"]
    resource.setrlimit(resource.RLIMIT_CPU, (int(cpu[0]), int(cpu[1])))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["fsize"]), int(limits["fsize"])))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["nofile"]), int(limits["nofile"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _die_with_parent() -> None:
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the parent ended before the signal was set: nobody would kill us
        os._exit(EXIT_LAUNCH_FAILED)


def _fail(stage_fd: int | None, name: str, exc: BaseException) -> None:
    """Report a failure before the sandbox was complete (root-only file in the stage) and exit 125."""
    try:
        if stage_fd is not None:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=stage_fd)
            os.write(fd, f"{type(exc).__name__}: {exc}".encode()[:4000])
    finally:
        os._exit(EXIT_LAUNCH_FAILED)


def enter(spec: dict[str, Any], stdout_fd: int, stderr_fd: int) -> None:
    """Turn the calling (root, forked) process into the sandboxed subject or judge; see the module contract."""
    stage_fd: int | None = None
    error_name = os.path.basename(spec["error_file"])
    try:
        pid = str(os.getpid())
        for procs in spec["cgroup_procs"]:
            _write(procs, pid)
        _die_with_parent()
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        # Nothing of the template (its control socket, framework handles) crosses into the sandbox.
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
        stage_fd = os.open(os.path.dirname(spec["error_file"]), os.O_RDONLY | os.O_DIRECTORY)
        with open(spec["seccomp"], "rb") as handle:
            program = handle.read()
        last_cap = _last_cap()
        check(
            libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS),
            "unshare namespaces",
        )
    except BaseException as exc:
        _fail(stage_fd, error_name, exc)
    init = os.fork()
    if init != 0:
        # Outside the new namespaces: wait for pid 1 and pass its status on (the template reads it).
        os._exit(reap(init, every=False))
    try:
        _die_with_parent()
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        root = spec["root"]
        _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        _apply_plan(spec["plan"], root, int(spec["uid"]), int(spec["gid"]))
        _pivot(root)
        if any(op[0] == "remount-ro" for op in spec["plan"]):
            _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        hostname = spec.get("hostname", "gpulab").encode()
        check(libc.sethostname(hostname, len(hostname)), "sethostname")
        os.chdir(spec["chdir"])
        _set_rlimits(spec["rlimits"])
        for cap in range(last_cap + 1):
            _prctl(PR_CAPBSET_DROP, cap, f"drop capability {cap} from the bounding set")
        uid, gid = int(spec["uid"]), int(spec["gid"])
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        # The cold chain's execve makes the process dumpable again (its own /proc files are its own); so here.
        _prctl(PR_SET_DUMPABLE, 1, "set dumpable")
        _own_user_namespace(uid, gid, last_cap)
        _load_seccomp(program)
        _die_with_parent()  # credential changes cleared it
        os.environ.clear()
        os.environ.update(spec["env"])
        os.setsid()
        if stage_fd is not None:
            os.close(stage_fd)
        stage_fd = None
    except BaseException as exc:
        _fail(stage_fd, error_name, exc)
    subject = os.fork()
    if subject != 0:
        os._exit(reap(subject, every=False))
    _die_with_parent()
    sys.argv = [f"{spec['runner_root']}/runner/{spec.get('role', 'subject')}.py", spec["chdir"]]
