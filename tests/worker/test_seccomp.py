"""The seccomp rules: the BPF program the local backend loads, run by the kernel and by a small interpreter
here (every rule on both architectures and the foreign tables), and the Docker profile made of the same rules.
"""

from __future__ import annotations

import errno
import json
import platform
import signal
import stat
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

from worker.bank.spec import ExerciseSpec
from worker.core.config import REPO_ROOT
from worker.grading.boot.linux import CLONE_NEW_FLAGS, CLONE_NEWNET, CLONE_NEWUSER
from worker.grading.jobdir import write_job_dir
from worker.grading.sandbox.local import LocalSandbox
from worker.grading.sandbox.seccomp import (
    DENIED,
    HOST_NEEDS,
    RULES,
    Rule,
    docker_profile,
    grading_host_profile,
    write_filter,
)

ALLOW = 0x7FFF0000
KILL_PROCESS = 0x80000000
EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "i386": 0x40000003, "arm": 0x40000028}
LIBSECCOMP_ARCH = {"x86_64": pyseccomp.Arch.X86_64, "aarch64": pyseccomp.Arch.AARCH64}
# A few numbers from the kernel's tables, so name resolution itself is checked, not only taken from libseccomp.
KNOWN_NUMBERS = {
    "x86_64": {"ptrace": 101, "clone": 56, "clone3": 435, "personality": 135, "getpid": 39},
    "aarch64": {"ptrace": 117, "clone": 220, "clone3": 435, "personality": 92, "getpid": 172},
}
SIGCHLD, CLONE_VM = 17, 0x100
GLIBC_THREAD_FLAGS = 0x3D0F00  # CLONE_VM, _FS, _FILES, _SIGHAND, _THREAD, _SYSVSEM, _SETTLS, _*_TID
X32_SYSCALL_BIT = 0x40000000
ADDR_NO_RANDOMIZE, PER_LINUX32 = 0x0040000, 0x0008
PERSONALITY_QUERY = 0xFFFFFFFF


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_filter(tmp_path_factory.mktemp("seccomp") / "filter.bpf").read_bytes()


def run_bpf(program: bytes, arch: str, nr: int, arg0: int = 0) -> int:
    """Return what ``program`` answers for one call (classic BPF, the instructions libseccomp emits)."""
    data = struct.pack("=iIQ6Q", nr, AUDIT_ARCH[arch], 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc = acc = 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:  # and #k
            acc &= k
        elif code == 0x06:  # ret #k
            return k
        elif code == 0x05:  # ja
            pc += k
        elif code in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"instruction {code:#x} is not interpreted here")


def number(arch: str, name: str) -> int:
    return int(pyseccomp.resolve_syscall(LIBSECCOMP_ARCH[arch], name))


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_rule_applies_on_both_architectures_by_their_own_numbers(program: bytes, arch: str) -> None:
    for name, known in KNOWN_NUMBERS[arch].items():
        assert number(arch, name) == known
    absent = {name for name in DENIED if number(arch, name) < 0}
    assert absent == ({"iopl", "ioperm", "uselib"} if arch == "aarch64" else set())
    for name in set(DENIED) - absent:
        assert run_bpf(program, arch, number(arch, name)) == EPERM, name
    assert run_bpf(program, arch, number(arch, "clone3")) == ENOSYS
    for name in ("read", "write", "getpid", "mmap", "futex", "execve", "wait4", "openat"):
        assert run_bpf(program, arch, number(arch, name)) == ALLOW, name


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_clone_is_refused_any_namespace_but_allowed_threads_and_forks(program: bytes, arch: str) -> None:
    clone = number(arch, "clone")
    flags = [1 << bit for bit in range(32) if CLONE_NEW_FLAGS & (1 << bit)]
    assert len(flags) == 8
    for flag in flags:
        assert run_bpf(program, arch, clone, flag | SIGCHLD) == EPERM, hex(flag)
    assert run_bpf(program, arch, clone, CLONE_NEWUSER | CLONE_NEWNET | CLONE_VM) == EPERM
    assert run_bpf(program, arch, clone, SIGCHLD) == ALLOW  # fork
    assert run_bpf(program, arch, clone, GLIBC_THREAD_FLAGS) == ALLOW  # pthread_create


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_personality_allows_only_the_query_and_the_default_persona(program: bytes, arch: str) -> None:
    personality = number(arch, "personality")
    for persona in (0, PERSONALITY_QUERY, 1 << 32, PERSONALITY_QUERY | 1 << 40):  # the kernel reads 32 bits
        assert run_bpf(program, arch, personality, persona) == ALLOW, hex(persona)
    refused = [ADDR_NO_RANDOMIZE, PER_LINUX32, 1, 0x80000000, 0x7FFFFFFF, 0xFFFFFFFE, 0x12345678]
    refused += [1 << bit for bit in range(32)] + [PERSONALITY_QUERY ^ (1 << bit) for bit in range(32)]
    for persona in refused:
        assert run_bpf(program, arch, personality, persona) == EPERM, hex(persona)


def test_other_syscall_tables_kill_the_process(program: bytes) -> None:
    for arch in ("i386", "arm"):
        for nr in (0, 20, 26, 120):  # restart_syscall, getpid on i386, ptrace on i386, clone on i386
            assert run_bpf(program, arch, nr) == KILL_PROCESS
    for nr in (0, 39, 101, 512, 545):  # x32: bit 30 set on an x86_64 number
        assert run_bpf(program, "x86_64", X32_SYSCALL_BIT | nr) == KILL_PROCESS


def test_the_program_is_written_once_and_for_root_only(tmp_path: Path) -> None:
    path = write_filter(tmp_path / "filter.bpf")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_size % 8 == 0
    with pytest.raises(FileExistsError):
        write_filter(path)


LOADER = """
import ctypes, json, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
program = open(sys.argv[1], "rb").read()
numbers = json.loads(sys.argv[2])

class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

buffer = ctypes.create_string_buffer(program, len(program))
prog = Prog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS, as bwrap and entry.py set it
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER

def errno_of(result):
    return 0 if result >= 0 else ctypes.get_errno()
"""


def run_filtered(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python under the program (loaded the way ``entry.py`` loads it)."""
    path = write_filter(tmp_path / "filter.bpf")
    names = ("clone", "clone3", "keyctl", "getpid")
    numbers = json.dumps({name: int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)) for name in names})
    script = LOADER + textwrap.dedent(code)
    # A session of its own: no controlling terminal, whatever a call it makes would do to one.
    return subprocess.run([sys.executable, "-c", script, str(path), numbers], capture_output=True, text=True,
                          timeout=60, start_new_session=True, stdin=subprocess.DEVNULL)  # fmt: skip


def test_a_filtered_process_is_refused_the_denied_calls_and_keeps_threads_and_forks(tmp_path: Path) -> None:
    code = f"""
    seen = {{}}
    seen["unshare_user"] = errno_of(libc.unshare({CLONE_NEWUSER}))
    pid = libc.syscall(numbers["clone"], {CLONE_NEWUSER | SIGCHLD}, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)  # only if the rule failed: the clone's child must not run the rest
    seen["clone_newuser"] = errno_of(pid)
    seen["clone3"] = errno_of(libc.syscall(numbers["clone3"], None, 0))
    seen["keyctl"] = errno_of(libc.syscall(numbers["keyctl"], 0, 0, 0, 0, 0))
    seen["mount"] = errno_of(libc.mount(None, None, None, 0, None))  # EFAULT if it got to the kernel
    seen["ptrace_traceme"] = errno_of(libc.ptrace(0, 0, None, None))
    seen["personality_no_aslr"] = errno_of(libc.personality(ctypes.c_ulong({ADDR_NO_RANDOMIZE})))
    seen["personality_query"] = errno_of(libc.personality(ctypes.c_ulong({PERSONALITY_QUERY})))
    child = os.fork()
    if child == 0:
        os._exit(7)
    seen["fork"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    box = []
    thread = threading.Thread(target=box.append, args=(1,))
    thread.start(); thread.join()
    seen["thread"] = box
    print(json.dumps(seen))
    """
    done = run_filtered(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "unshare_user": errno.EPERM, "clone_newuser": errno.EPERM, "clone3": errno.ENOSYS, "keyctl": errno.EPERM,
        "mount": errno.EPERM, "ptrace_traceme": errno.EPERM, "personality_no_aslr": errno.EPERM,
        "personality_query": 0, "fork": 7, "thread": [1],
    }  # fmt: skip


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 calls exist on x86_64 only")
def test_an_x32_call_kills_the_filtered_process(tmp_path: Path) -> None:
    done = run_filtered(tmp_path, f"libc.syscall({X32_SYSCALL_BIT} | numbers['getpid'])\nprint('survived')\n")
    assert done.returncode == -signal.SIGSYS, (done.returncode, done.stdout, done.stderr)
    assert "survived" not in done.stdout


def profile_rules(profile: dict[str, Any]) -> set[Rule]:
    """Return the rules a Docker profile holds, in ``seccomp.py``'s terms."""
    rules = set()
    for entry in profile["syscalls"]:
        assert entry["action"] == "SCMP_ACT_ERRNO"
        masked = None
        if "args" in entry:
            (condition,) = entry["args"]
            assert (condition["index"], condition["op"]) == (0, "SCMP_CMP_MASKED_EQ")
            masked = (condition["value"], condition["valueTwo"])
        rules |= {Rule(name, entry["errnoRet"], masked) for name in entry["names"]}
    return rules


def test_the_docker_profile_holds_the_same_rules() -> None:
    profile = json.loads(docker_profile())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert profile["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]
    assert profile_rules(profile) == set(RULES)
    denied = {r.name for r in RULES if r.arg0_masked is None and r.errno == errno.EPERM}
    assert denied == set(DENIED)
    clone_masks = {r.arg0_masked for r in RULES if r.name == "clone"}
    assert clone_masks == {(1 << b, 1 << b) for b in range(32) if CLONE_NEW_FLAGS & (1 << b)}


def test_a_local_sandbox_run_is_refused_namespaces_and_tracing(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    code = f"""
        import ctypes, json
        libc = ctypes.CDLL(None, use_errno=True)

        def errno_of(result):
            return 0 if result >= 0 else ctypes.get_errno()

        print(json.dumps({{
            "ptrace": errno_of(libc.ptrace(0, 0, None, None)),
            "unshare": errno_of(libc.unshare({CLONE_NEWUSER})),
            "clone3": errno_of(libc.syscall({number(platform.machine(), "clone3")}, None, 0)),
            "personality_query": errno_of(libc.personality(ctypes.c_ulong({PERSONALITY_QUERY}))),
        }}))

        def add(a, b):
            return a + b
    """
    spec = tiny_spec(timeout_s=10, memory_mb=256)
    job = write_job_dir(tmp_path / "job", spec=spec, code=textwrap.dedent(code))
    run = local_sandbox.run(job, spec.limits)
    lines = [line for line in run.stdout.decode().splitlines() if line.startswith("{")]
    assert lines, (run.stdout, run.stderr, run.judge_stderr)
    assert json.loads(lines[-1]) == {"ptrace": errno.EPERM, "unshare": errno.EPERM, "clone3": errno.ENOSYS,
                                     "personality_query": 0}  # fmt: skip


def test_the_grading_host_profile_is_the_learners_less_what_building_a_sandbox_takes() -> None:
    shipped = REPO_ROOT / "docker" / "grading-host" / "seccomp.json"
    stale = "stale: write worker.grading.sandbox.seccomp.grading_host_profile() to it"
    assert shipped.read_text() == grading_host_profile(), stale
    profile = json.loads(grading_host_profile())
    refused = {name for rule in profile["syscalls"] for name in rule["names"]}
    assert refused == {r.name for r in RULES} - set(HOST_NEEDS) - {"clone"}
    assert set(DENIED) - set(HOST_NEEDS) <= refused and not set(HOST_NEEDS) & refused
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW" and profile["architectures"] == json.loads(docker_profile())[
        "architectures"]  # fmt: skip
