"""The sandbox's seccomp rules, written once by syscall name, and the two forms the backends load them in.

Contract:
- ``RULES`` is the whole rule set; each ``Rule`` names a syscall, the errno it fails with and, for some, a
  condition on the first argument (``arg0 & mask == value``). Rules are or-ed; anything no rule matches is
  allowed: the namespaces, the unprivileged uid, no capabilities and cgroups already bound the sandbox,
  this filter shrinks the kernel surface. Refused:
  - with ``EPERM``, every name in ``DENIED`` (debugging other processes, mounts and namespaces, kernel
    keyrings, BPF, perf, userfaultfd, kexec and modules, swap, reboot, accounting, clock changes, io_uring,
    file handles, chroot and other admin calls);
  - with ``EPERM``, ``clone`` whose flags ask for any new namespace (``linux.CLONE_NEW_FLAGS``);
  - with ``EPERM``, ``personality`` except the query (``0xffffffff``) and ``PER_LINUX`` (0);
  - with ``ENOSYS``, ``clone3``: its flags sit in memory a filter cannot read, and ``ENOSYS`` makes libc fall
    back to ``clone``, whose flags it can check.
- Architectures: x86_64 and aarch64. libseccomp resolves each name to that architecture's own number (a
  name one of them lacks, like ``iopl`` on aarch64, matches nothing there), so there is no syscall table
  of ours. A call through any other table (i386 by ``int 0x80``, or x32: bit 30 of the number, from an
  x86_64 process) matches no architecture of the filter and kills the process, so a second table cannot
  bypass the rules.
- ``write_filter(path)`` writes the rules as a classic BPF program (libseccomp's ``export_bpf``: a
  ``struct sock_filter`` array, native byte order), readable by root only (0600), for ``bwrap --seccomp
  FD`` (cold path) and ``entry.py`` (warm path, loads it with ``prctl``). ``docker_profile()`` returns the
  same rules as a Docker seccomp profile (JSON) for the ``docker`` backend, whose engine hands them to
  libseccomp too. Importing this module loads ``libseccomp.so.2`` (Debian's ``libseccomp2``, which apt
  itself needs) through ``pyseccomp``.
"""

from __future__ import annotations

import errno
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyseccomp as seccomp

from worker.grading.boot.linux import CLONE_NEW_FLAGS

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "mount_setattr", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "reboot", "acct",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at", "name_to_handle_at",
    "quotactl", "syslog", "vhangup", "lookup_dcookie", "iopl", "ioperm", "uselib",
)  # fmt: skip
PERSONA_BITS = 32  # the kernel reads the persona as a 32-bit value
# libseccomp and Docker profiles name architectures differently; the values are libseccomp's tokens.
ARCHITECTURES = {"SCMP_ARCH_X86_64": seccomp.Arch.X86_64, "SCMP_ARCH_AARCH64": seccomp.Arch.AARCH64}


@dataclass(frozen=True)
class Rule:
    """Fail ``name`` with ``errno`` (when ``arg0_masked`` is set: only if ``arg0 & mask == value``)."""

    name: str
    errno: int
    arg0_masked: tuple[int, int] | None = None  # (mask, value)


def _clone_rules() -> list[Rule]:
    """Return one rule per namespace flag: libseccomp or-s rules, and a mask tests them one at a time."""
    flags = [1 << bit for bit in range(32) if CLONE_NEW_FLAGS & (1 << bit)]
    return [Rule("clone", errno.EPERM, (flag, flag)) for flag in flags]


def _personality_rules() -> list[Rule]:
    """Return rules that refuse every persona but all-zero (``PER_LINUX``) and all-one (the query) bits.

    A rule may test an argument once, so "neither 0 nor 0xffffffff" is written as rules "bit i set and bit
    i+1 clear", i around the 32 bits: a value with both set and clear bits has such a pair, 0 and 0xffffffff
    have none.
    """
    rules = []
    for bit in range(PERSONA_BITS):
        low, high = 1 << bit, 1 << ((bit + 1) % PERSONA_BITS)
        rules.append(Rule("personality", errno.EPERM, (low | high, low)))
    return rules


RULES: tuple[Rule, ...] = (
    *(Rule(name, errno.EPERM) for name in DENIED),
    *_clone_rules(),
    *_personality_rules(),
    Rule("clone3", errno.ENOSYS),
)


def build_filter() -> seccomp.SyscallFilter:
    """Return ``RULES`` as a libseccomp filter for the architectures of ``ARCHITECTURES``."""
    syscall_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    syscall_filter.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    wanted = set(ARCHITECTURES.values())
    for arch in wanted:
        if not syscall_filter.exist_arch(arch):
            syscall_filter.add_arch(arch)
    native = seccomp.system_arch()
    if native not in wanted:
        syscall_filter.remove_arch(native)  # like any other foreign table: killed
    for rule in RULES:
        args = [] if rule.arg0_masked is None else [seccomp.Arg(0, seccomp.MASKED_EQ, *rule.arg0_masked)]
        syscall_filter.add_rule(seccomp.ERRNO(rule.errno), rule.name, *args)
    return syscall_filter


@functools.cache
def bpf_program() -> bytes:
    """Return the BPF program of ``RULES`` (built once per process: the rules never change)."""
    fd = os.memfd_create("gpulab-seccomp", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as handle:
        build_filter().export_bpf(handle)
        handle.seek(0)
        return handle.read()


def write_filter(path: Path) -> Path:
    """Write the BPF program to ``path``, readable by root only; return ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(bpf_program())
    return path


@functools.cache
def docker_profile() -> str:
    """Return ``RULES`` as a Docker seccomp profile (JSON), so both backends filter alike.

    Docker's built-in profile allows ``ptrace`` between processes of one container on current kernels,
    which would let learner code stop or steer the subject's relay; these rules deny it, as ``local`` does.
    """
    return _profile(RULES)


def _profile(rules: tuple[Rule, ...]) -> str:
    """Return ``rules`` as a Docker seccomp profile (JSON): unlisted calls allowed, other tables killed."""
    by_errno: dict[int, list[str]] = {}
    conditional: list[dict[str, Any]] = []
    for rule in rules:
        if rule.arg0_masked is None:
            by_errno.setdefault(rule.errno, []).append(rule.name)
            continue
        mask, value = rule.arg0_masked
        # Docker's MASKED_EQ: ``value`` is the mask, ``valueTwo`` what the masked argument must equal.
        condition = {"index": 0, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
        conditional.append({"names": [rule.name], **_errno_action(rule.errno), "args": [condition]})
    unconditional = [{"names": sorted(names), **_errno_action(number)} for number, names in by_errno.items()]
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        # Calls through another syscall table (i386, x32) match no listed architecture and are killed.
        "architectures": list(ARCHITECTURES),
        "syscalls": unconditional + conditional,
    }
    return json.dumps(profile, separators=(",", ":"))


def _errno_action(number: int) -> dict[str, Any]:
    return {"action": "SCMP_ACT_ERRNO", "errnoRet": number}


# What the grading host's own processes must be able to call that ``DENIED`` refuses the learner: the launcher
# and the warm entry build each sandbox with them (private mount namespaces, binds, ``pivot_root``), bwrap too
# (it also ``chroot``s into the new root), and both create namespaces with ``clone``/``unshare``.
HOST_NEEDS = ("mount", "umount2", "pivot_root", "chroot", "unshare", "setns")


@functools.cache
def grading_host_profile() -> str:
    """Return the Docker seccomp profile of the grading-host container (``docker/grading-host-seccomp.json``).

    The learner's own ``RULES`` less ``HOST_NEEDS`` and the namespace flags of ``clone``: the worker builds
    sandboxes with those, and every sandbox loads the full ``RULES`` again before any learner code runs.
    Everything else the learner is refused (tracing, keyrings, BPF, perf, kexec and modules, swap, reboot,
    clocks, io_uring, file handles, ...) the worker is refused too. Why not Docker's own profile: it refuses
    ``pivot_root`` even with ``CAP_SYS_ADMIN``, which every sandbox needs.
    """
    rules = tuple(r for r in RULES if r.name not in HOST_NEEDS and r.name != "clone")
    profile = json.loads(_profile(rules))
    return json.dumps(profile, indent=1, sort_keys=True) + "\n"
