"""The Linux constants and exit-status rules the boot scripts and the sandbox backends share; stdlib only.

Contract:
- Imported by the boot scripts by its top-level name (``import linux``: they run as files, with this folder on
  ``sys.path``) and by the host side as ``worker.grading.boot.linux``; it imports only the standard library.
- Constants: the ``CLONE_NEW*`` namespace flags (``CLONE_NEW_FLAGS`` is all of them, what the seccomp rules
  refuse in ``clone``), the ``MS_*`` mount flags and ``prctl`` options more than one script uses.
- ``EXIT_LAUNCH_FAILED`` (125) is the exit code of a launcher or entry chain that could not enter the sandbox;
  the code alone proves nothing (a program may exit 125 itself), the root-only error file beside it does.
- Exit status of a signalled child: a process that reports a child's end reports ``exit_code(status)``, the
  child's code or 128+N when signal N killed it (bwrap, Docker's init and the shell do the same);
  the host turns such a code back into ``subprocess``'s ``-N`` with ``returncode(code)``.
- ``die_with_parent()`` sets the parent-death signal to ``SIGKILL`` (it follows the thread that started the
  caller, and credential changes clear it: call it again after them).
"""

from __future__ import annotations

import ctypes
import os
import signal

CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEW_FLAGS = (
    CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
    | CLONE_NEWNET
)  # fmt: skip

# The minimal /dev of every sandbox: the host nodes bwrap's --dev binds, and entry.py's _dev binds too.
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

PR_SET_PDEATHSIG = 1

EXIT_LAUNCH_FAILED = 125
SIGNAL_EXIT_BASE = 128
MAX_SIGNAL = 64  # SIGRTMAX on Linux

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raise ``OSError`` with ``errno`` when a libc call returned non-zero."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def die_with_parent() -> None:
    """Have the kernel kill this process with ``SIGKILL`` when its parent (thread) ends."""
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "set parent-death signal")


def exit_code(wait_status: int) -> int:
    """Return the exit code that passes a child's end on: its own code, or 128+N when signal N killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else SIGNAL_EXIT_BASE - code


def returncode(code: int | None) -> int | None:
    """Return an exit code as ``subprocess`` reports it: 128+N (N a signal) becomes ``-N``."""
    if code is not None and SIGNAL_EXIT_BASE < code <= SIGNAL_EXIT_BASE + MAX_SIGNAL:
        return SIGNAL_EXIT_BASE - code
    return code


def reap(child: int, *, every: bool) -> int:
    """Reap children until ``child`` ends (``every``: until none is left); return its exit code to pass on.

    A subreaper (``launch``) keeps reaping what its child left behind; pid 1 of a sandbox (``entry``) may stop at
    its child, because the kernel kills the rest of the namespace when pid 1 exits.
    """
    code = EXIT_LAUNCH_FAILED
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return code
        except InterruptedError:
            continue
        if pid == child:
            code = exit_code(status)
            if not every:
                return code
