"""Hostile submissions against every backend: each threat-model line of worker/runner/README.md has a test.

Every attack is graded for real. Attacks that try to *gain* something return the right answer only if the
attempt worked (``ESCAPED``), so a hole shows up as a score; attacks that print what they found show a
leak in the texts the learner gets back. ``Attack.assert_contained`` checks both, the verdict and the time.
"""

from __future__ import annotations

import json
import socket
import textwrap
from collections.abc import Callable, Iterator

import pytest

from tests.security.conftest import MARKER, SOLUTION_MARKER, Attack
from worker.grading.sandbox.base import Sandbox

AttackFn = Callable[..., Attack]
ANSWER_IF_ESCAPED = """
def add(a, b):
    return a + b if ESCAPED else None
"""


def escaping(code: str) -> str:
    """Return ``code`` followed by an ``add`` that is right only if the attack set ``ESCAPED``."""
    return textwrap.dedent(code) + ANSWER_IF_ESCAPED


def hidden(text: str) -> str:
    """Write ``text`` reversed, so the attack's own source never contains the needle it searches for."""
    return text[::-1]


# --- resources -------------------------------------------------------------------------------------------

RESOURCE_ATTACKS = {
    "fork_bomb": (
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
        {"timeout", "failed", "crashed", "memory_limit"},
    ),
    "memory_bomb_10gb": (
        """
        hog = []
        for _ in range(160):
            hog.append(b"\\x01" * (64 << 20))  # 10 GB, every page touched
        """,
        {"memory_limit"},
    ),
    "cpu_spin": ("def add(a, b):\n    while True:\n        pass\n", {"timeout"}),
    "sleep_forever": ("import time\n\ndef add(a, b):\n    time.sleep(10**6)\n", {"timeout"}),
    "stdout_1gb": ("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * (1 << 20))\n", {"crashed"}),
    "stderr_1gb": ("import sys\nfor _ in range(1024):\n    sys.stderr.write('x' * (1 << 20))\n", {"crashed"}),
    "fill_disk": (
        """
        import os
        for folder in ("/tmp", os.getcwd(), "/dev/shm", "."):
            for i in range(64):
                try:
                    with open(os.path.join(folder, f"fill{i}"), "wb") as handle:
                        handle.write(b"\\0" * (32 << 20))
                except OSError:
                    break

        def add(a, b):
            return None
        """,
        {"failed"},
    ),
    "thousands_of_threads": (
        """
        import threading, time
        started = 0
        for _ in range(5000):
            try:
                threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
                started += 1
            except RuntimeError:
                break
        print("threads", started)

        def add(a, b):
            return None
        """,
        {"failed", "timeout"},
    ),
    "double_fork_daemon": (
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.1)
            os._exit(0)

        def add(a, b):
            return None
        """,
        {"failed"},
    ),
    "ignore_sigterm": (
        """
        import signal
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
            signal.signal(sig, signal.SIG_IGN)

        def add(a, b):
            while True:
                pass
        """,
        {"timeout"},
    ),
}


@pytest.mark.parametrize("name", list(RESOURCE_ATTACKS))
def test_resource_abuse_is_bounded(attack: AttackFn, name: str) -> None:
    code, verdicts = RESOURCE_ATTACKS[name]
    result = attack(code)
    result.assert_contained(verdicts)


def test_threads_are_bounded_by_pids(attack: AttackFn) -> None:
    result = attack(RESOURCE_ATTACKS["thousands_of_threads"][0])
    started = [int(line.split()[1]) for line in result.outcome.stdout.splitlines() if line.startswith("threads ")]
    assert started and max(started) < 32, result.outcome.stdout


# --- confidentiality --------------------------------------------------------------------------------------

SEARCH = """
import os
ESCAPED = False
FOUND = []
NEEDLES = [n[::-1] for n in {needles!r}]
ROOTS = {roots!r}

def scan(path):
    global ESCAPED
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except OSError:
        return
    for needle in NEEDLES:
        if needle.encode() in data:
            ESCAPED = True
            FOUND.append(path)
            print("FOUND", data[:2000].decode(errors="replace"))

for root in ROOTS:
    scan(root)
    for folder, dirs, files in os.walk(root):
        if folder.startswith(("/proc", "/sys", "/dev")):
            dirs[:] = []
            continue
        for name in files:
            scan(os.path.join(folder, name))
"""


def test_hidden_tests_and_solution_cannot_be_read(attack: AttackFn, work_root: pytest.TempPathFactory) -> None:
    roots = ["/job", "/tmp", "/opt", "/root", "/home", "/srv", "/var", "/work", str(work_root), "/"]
    code = SEARCH.format(needles=[hidden(MARKER), hidden(SOLUTION_MARKER)], roots=roots)
    result = attack(escaping(code), timeout_s=5)
    result.assert_contained({"failed", "timeout"})


def test_other_jobs_data_and_database_cannot_be_read(
    attack: AttackFn, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path_factory.mktemp("data")
    (data / "gpulab.db").write_text(f"SQLite format 3 {MARKER} users passwords")
    other = data / "jobs" / "gpulab-job-other" / "job" / "submission"
    other.mkdir(parents=True)
    (other / "submission.py").write_text(f"# {MARKER} someone else's answer\n")
    for path in (data, data / "gpulab.db", other, other / "submission.py"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by anyone on the host: only isolation protects it
    code = SEARCH.format(needles=[hidden(MARKER)], roots=[str(data), str(other / "submission.py"), "/work/main/.data"])
    result = attack(escaping(code))
    result.assert_contained({"failed"})


def test_host_environment_and_proc_environ_do_not_leak(attack: AttackFn) -> None:
    code = """
    import os
    print(dict(os.environ))
    for entry in os.listdir("/proc"):
        for name in ("environ", "cmdline"):
            try:
                print(entry, name, open(f"/proc/{entry}/{name}", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    ESCAPED = any(key.startswith("GPULAB_") for key in os.environ)
    """
    result = attack(escaping(code))
    result.assert_contained({"failed"})
    assert "PATH" in result.outcome.stdout, "the attack must have run and printed its environment"


def test_docker_socket_is_not_reachable(attack: AttackFn) -> None:
    code = """
    import socket
    ESCAPED = False
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"):
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.connect(path)
            ESCAPED = True
        except OSError as exc:
            print(path, type(exc).__name__)
        sock.close()
    """
    attack(escaping(code)).assert_contained({"failed"})


# --- network ---------------------------------------------------------------------------------------------


@pytest.fixture
def host_listeners() -> Iterator[int]:
    """An HTTP-ish listener on the host's 127.0.0.1 and ::1 (same port where possible)."""
    sockets = []
    v4 = socket.socket()
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    sockets.append(v4)
    port = v4.getsockname()[1]
    try:
        v6 = socket.socket(socket.AF_INET6)
        v6.bind(("::1", port))
        v6.listen()
        sockets.append(v6)
    except OSError:
        pass
    yield port
    for sock in sockets:
        sock.close()


def test_network_is_unreachable(attack: AttackFn, host_listeners: int) -> None:
    code = f"""
    import socket, time
    ESCAPED = False
    for host in ("127.0.0.1", "::1"):
        for port in (6379, 5432, {host_listeners}):
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                ESCAPED = True
                print("reached", host, port)
            except OSError:
                pass
    try:
        socket.getaddrinfo("example.com", 80)
        ESCAPED = True
    except OSError:
        pass
    started = time.monotonic()
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()  # a connect attempt only, no payload
        ESCAPED = True
    except OSError:
        pass
    print("outside", round(time.monotonic() - started, 2))
    """
    result = attack(escaping(code))
    result.assert_contained({"failed"})
    waited = [float(line.split()[1]) for line in result.outcome.stdout.splitlines() if line.startswith("outside")]
    assert waited and max(waited) < 0.5, "an outside connect must fail at once (no route), not time out"


# --- integrity -------------------------------------------------------------------------------------------

INTEGRITY_ATTACKS = {
    "fake_pytest_and_result_output": """
        import json, sys
        fake = {"version": 1, "error": None, "tests": [
            {"id": "test_add.py::test_small", "outcome": "passed", "message": "", "duration_ms": 1},
            {"id": "test_add.py::test_negative", "outcome": "passed", "message": "", "duration_ms": 1}]}
        print(json.dumps(fake)); print("test_add.py::test_small PASSED"); print("2 passed in 0.01s")
        sys.stderr.write(json.dumps(fake) + "\\n")

        def add(a, b):
            return None
    """,
    "write_or_link_result_file": """
        import os
        for path in ("/job/out/result.json", "/job/out/.result.json.tmp", "/job/ipc/result.json"):
            for attempt in (lambda: open(path, "w").write("{}"), lambda: os.symlink("/tmp/fake", path)):
                try:
                    attempt()
                except OSError:
                    pass

        def add(a, b):
            return None
    """,
    "sys_exit_mid_test": "import sys\n\ndef add(a, b):\n    sys.exit(0)\n",
    "os_exit_mid_test": "import os\n\ndef add(a, b):\n    os._exit(0)\n",
    "atexit_forgery": """
        import atexit, json, os, socket, struct, sys

        def forge():
            reply = json.dumps({"status": "returned", "value": 3}).encode()
            for fd in range(3, 64):
                try:
                    os.write(fd, struct.pack(">I", len(reply)) + reply)
                except OSError:
                    pass

        atexit.register(forge)

        def add(a, b):
            sys.exit(0)
    """,
    "monkeypatch_everything": """
        import builtins, sys
        builtins.AssertionError = type("AssertionError", (Exception,), {})
        builtins.isinstance = lambda *a: True
        sys.excepthook = lambda *a: None
        try:
            import pytest
            pytest.fail = lambda *a, **k: None
            from _pytest import reports
            reports.TestReport.outcome = "passed"
        except Exception:
            pass
        try:
            import runner.subject as subject
            subject.raised = lambda exc, path: {"status": "returned", "value": 3}
            subject.Child.answer = lambda self, request: {"status": "returned", "value": -2}
        except Exception as exc:
            print("patch failed", exc)

        def add(a, b):
            return None
    """,
    "plant_customize_files": """
        import os, site, sys
        planted = "import builtins\\nbuiltins.__gpulab_owned__ = True\\n"
        targets = [os.path.join(p, n) for p in [*sys.path, "/job/submission", "/job/tests", "/job/probes",
                   "/opt/gpulab", "/opt/gpulab/runner", "/tmp", site.getusersitepackages()]
                   for n in ("conftest.py", "sitecustomize.py", "usercustomize.py", "gpulab.pth")]
        for target in targets:
            try:
                with open(target, "w") as handle:
                    handle.write(planted)
            except OSError:
                pass

        def add(a, b):
            return None
    """,
    "kill_the_judge": """
        import os, signal
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass

        def add(a, b):
            return None
    """,
    "lying_objects": """
        class Liar(int):
            __class__ = property(lambda self: int)
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = int.__hash__

        class Anything:
            __class__ = property(lambda self: int)
            def __eq__(self, other):
                return True

        def add(a, b):
            return Liar(0) if a > 0 else Anything()
    """,
}


@pytest.mark.parametrize("name", list(INTEGRITY_ATTACKS))
def test_integrity_attacks_never_raise_the_score(attack: AttackFn, name: str) -> None:
    result = attack(INTEGRITY_ATTACKS[name])
    result.assert_contained({"failed"})
    if name in ("sys_exit_mid_test", "os_exit_mid_test"):
        assert {t.message for t in result.outcome.tests} == {
            "Your code exited while the test was running (exit code 0)"
        }


def test_each_test_gets_a_fresh_process(attack: AttackFn) -> None:
    code = """
    import os
    CALLS = []

    def add(a, b):
        CALLS.append(a)
        os.environ.setdefault("FIRST_PID", str(os.getpid()))
        print(f"CALL {len(CALLS)} STALE_PID {os.environ['FIRST_PID'] != str(os.getpid())}", flush=True)
        return a + b
    """
    result = attack(code)
    # Both tests see one call in a new process: never a second call or a pid left over from the first test.
    calls = [line for line in result.outcome.stdout.splitlines() if line.startswith("CALL ")]
    assert calls == ["CALL 1 STALE_PID False"] * len(result.outcome.tests) and len(calls) >= 2, result.outcome.stdout


# --- escape ----------------------------------------------------------------------------------------------


def test_escape_attempts_fail(attack: AttackFn, work_root: pytest.TempPathFactory) -> None:
    code = f"""
    import ctypes, errno, os, subprocess
    ESCAPED = False
    libc = ctypes.CDLL(None, use_errno=True)
    report = {{}}

    def check(name, result):
        global ESCAPED
        report[name] = (result, ctypes.get_errno())
        if result == 0:
            ESCAPED = True

    check("ptrace_parent", libc.ptrace(16, os.getppid(), 0, 0))          # PTRACE_ATTACH
    check("mount_tmpfs", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
    check("unshare_user", libc.unshare(0x10000000))                    # CLONE_NEWUSER
    check("unshare_mount", libc.unshare(0x00020000))
    check("setuid_root", libc.setuid(0))
    check("chroot", libc.chroot(b"/tmp"))
    for argv in (["unshare", "-U", "true"], ["su", "-c", "true"], ["mount", "-t", "tmpfs", "x", "/tmp"]):
        try:
            if subprocess.run(argv, capture_output=True, timeout=2).returncode == 0:
                ESCAPED = True
                report[argv[0]] = "ran"
        except (OSError, subprocess.SubprocessError):
            pass
    for path in ("/job/out/x", "/usr/x", "/etc/x", "/opt/gpulab/runner/x", {str(work_root / "x")!r}, "/x"):
        try:
            open(path, "w").write("x")
            ESCAPED = True
            report[path] = "written"
        except OSError:
            pass
    print(report)
    """
    # Three programs started and refused, plus the writes: seconds on a loaded machine. Its verdict, not its
    # speed, is what this test is about, so it gets room the suite's 3 s default does not give.
    result = attack(escaping(code), timeout_s=30)
    result.assert_contained({"failed"})
    assert not list(work_root.glob("x")), "wrote outside the sandbox"


def test_seccomp_denies_namespaces_but_threads_and_subprocesses_work(attack: AttackFn) -> None:
    code = """
    import ctypes, os, subprocess, threading
    libc = ctypes.CDLL(None, use_errno=True)
    seen = {}

    def errno_of(result):
        return 0 if result == 0 else ctypes.get_errno()

    seen["unshare"] = errno_of(libc.unshare(0x10000000))
    seen["clone3"] = errno_of(libc.syscall(435, None, 0))
    seen["personality"] = errno_of(-1 if libc.personality(0x0040000) == -1 else 0)  # ADDR_NO_RANDOMIZE
    seen["keyctl"] = errno_of(libc.syscall(250, 0, 0, 0, 0, 0))
    box = []
    thread = threading.Thread(target=box.append, args=(1,))
    thread.start(); thread.join()
    seen["thread"] = box == [1]
    seen["subprocess"] = subprocess.run(["true"]).returncode == 0
    print("SECCOMP", seen)

    def add(a, b):
        return None
    """
    result = attack(code)
    result.assert_contained({"failed"})
    line = next(line for line in result.outcome.stdout.splitlines() if line.startswith("SECCOMP"))
    if result.outcome.sandbox == "local":
        assert line == (
            "SECCOMP {'unshare': 1, 'clone3': 38, 'personality': 1, 'keyctl': 1, 'thread': True, 'subprocess': True}"
        )


def test_a_gpu_job_sees_only_its_own_gpus_nodes(attack: AttackFn, backend: Sandbox) -> None:
    """On the GPU host, a job's /dev holds one GPU's node (the one it leased) and the shared ones, nothing else."""
    if backend.name != "gpu-host":
        pytest.skip("only the GPU host hands out GPUs")
    code = """
    import json, os

    def add(a, b):
        nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
        opened = {}
        for n in ("nvidia0", "nvidia1"):
            try:
                opened[n] = open(f"/dev/{n}").read()
            except OSError as exc:
                opened[n] = type(exc).__name__
        print("SEEN " + json.dumps({"nodes": nodes, "opened": opened,
                                    "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "")}), flush=True)
        return a + b
    """
    result = attack(code)
    seen = [json.loads(line[5:]) for line in result.outcome.stdout.splitlines() if line.startswith("SEEN ")]
    assert seen, result.outcome.stdout
    for job in seen:
        gpu_nodes = [n for n in job["nodes"] if n[6:].isdigit()]
        assert len(gpu_nodes) == 1 and sorted(set(job["nodes"]) - set(gpu_nodes)) == ["nvidia-uvm", "nvidiactl"]
        mine, other = gpu_nodes[0], ({"nvidia0", "nvidia1"} - set(gpu_nodes)).pop()
        assert job["opened"][mine] == f"stand-in {mine}" and job["opened"][other] == "FileNotFoundError"
        assert job["visible"].startswith("GPU-") and "," not in job["visible"]
