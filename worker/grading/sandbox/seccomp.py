"""The sandbox's seccomp filter: a classic BPF program written here, loaded by ``bwrap --seccomp FD``.

Contract:
- ``build_filter()`` returns the program as bytes (``struct sock_filter`` array, native byte order);
  ``write_filter(path)`` writes it root-only (0600) for the launcher to open as an inherited fd.
- Architectures: x86_64 and aarch64 by their own syscall numbers; any other ``arch`` (i386 or x32 calls
  from an x86_64 process, for instance) kills the process, so a second syscall table cannot bypass the
  rules. On x86_64 an x32 number (bit 30 set) is denied too.
- Denied with ``EPERM``: every name in ``DENIED`` (debugging other processes, mounts and namespaces,
  kernel keyrings, BPF, perf, userfaultfd, kexec and modules, swap, reboot, accounting, clock changes,
  io_uring, file handles, chroot and other admin calls); ``personality`` except the query
  (``0xffffffff``) and ``PER_LINUX`` (0); ``clone`` whose flags ask for any new namespace.
  ``clone3`` fails with ``ENOSYS`` (its flags sit in memory a filter cannot read) so that libc falls back
  to ``clone``, whose flags it can check. Everything else is allowed: the namespaces, the unprivileged
  uid, no capabilities and cgroups already bound it; this filter shrinks the kernel surface.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

from worker.grading.boot.linux import CLONE_NEW_FLAGS

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16 if struct.pack("=I", 1) == struct.pack("<I", 1) else 20

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06

RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000

PERSONALITY_QUERY = 0xFFFFFFFF

# name: (x86_64 number, aarch64 number or None where the call does not exist there)
DENIED: dict[str, tuple[int, int | None]] = {
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "move_mount": (429, 429),
    "open_tree": (428, 428),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "acct": (163, 89),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "quotactl": (179, 60),
    "syslog": (103, 116),
    "vhangup": (153, 58),
    "lookup_dcookie": (212, 18),
    "iopl": (172, None),
    "ioperm": (173, None),
    "uselib": (134, None),
}
CHECKED: dict[str, tuple[int, int]] = {"clone": (56, 220), "clone3": (435, 435), "personality": (135, 92)}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _ret(value: int) -> bytes:
    return _insn(BPF_RET_K, value)


def _load(offset: int) -> bytes:
    return _insn(BPF_LD_W_ABS, offset)


def _arch_section(arch_index: int, x32_guard: bool) -> list[bytes]:
    """Return the rules for one architecture; the accumulator holds nothing yet."""
    eperm = RET_ERRNO | errno.EPERM
    out = [_load(OFFSET_NR)]
    if x32_guard:
        out += [_insn(BPF_JGE_K, X32_SYSCALL_BIT, jt=0, jf=1), _ret(eperm)]
    for numbers in DENIED.values():
        number = numbers[arch_index]
        if number is not None:
            out += [_insn(BPF_JEQ_K, number, jt=0, jf=1), _ret(eperm)]
    out += [_insn(BPF_JEQ_K, CHECKED["clone3"][arch_index], jt=0, jf=1), _ret(RET_ERRNO | errno.ENOSYS)]
    # clone: deny when any CLONE_NEW* flag is set in the low 32 bits of the first argument.
    out += [
        _insn(BPF_JEQ_K, CHECKED["clone"][arch_index], jt=0, jf=4),
        _load(OFFSET_ARG0_LOW),
        _insn(BPF_JSET_K, CLONE_NEW_FLAGS, jt=0, jf=1),
        _ret(eperm),
        _ret(RET_ALLOW),
    ]
    # personality: only the query and the default persona.
    out += [
        _insn(BPF_JEQ_K, CHECKED["personality"][arch_index], jt=0, jf=5),
        _load(OFFSET_ARG0_LOW),
        _insn(BPF_JEQ_K, PERSONALITY_QUERY, jt=2, jf=0),
        _insn(BPF_JEQ_K, 0, jt=1, jf=0),
        _ret(eperm),
        _ret(RET_ALLOW),
    ]
    out.append(_ret(RET_ALLOW))
    return out


def build_filter() -> bytes:
    """Return the whole BPF program (see the module contract)."""
    x86 = _arch_section(0, x32_guard=True)
    arm = _arch_section(1, x32_guard=False)
    if len(x86) > 255:
        raise ValueError("the x86_64 section is too long for an 8-bit jump")
    program = [
        _load(OFFSET_ARCH),
        _insn(BPF_JEQ_K, AUDIT_ARCH_X86_64, jt=2, jf=0),
        _insn(BPF_JEQ_K, AUDIT_ARCH_AARCH64, jt=len(x86) + 1, jf=0),
        _ret(RET_KILL_PROCESS),
        *x86,
        *arm,
    ]
    return b"".join(program)


def write_filter(path: Path) -> Path:
    """Write the program to ``path``, readable by root only; return ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(build_filter())
    return path
