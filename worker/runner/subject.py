"""The subject: the untrusted side, which runs the learner's code and answers the judge with data only.

Contract:
- ``python -m runner.subject JOB_DIR`` (or ``--fd N`` with a connected socket inherited as fd N) reads
  ``JOB_DIR/subject.json`` (``{"version": 1, "module": "submission", "preload": ["torch"],
  "max_reply_bytes": int, "devices": {"framework": "torch"|"tensorflow"|"none", "replicas": int, "gpus": int}}``;
  ``gpus``, the real GPUs the host gave the job, is 0 when absent),
  imports each ``preload`` module, prepares the virtual devices (``vdev.setup``), imports
  ``JOB_DIR/probes/probes.py`` (if any),
  connects to ``JOB_DIR/ipc/judge.sock`` and sends ``{"status": "hello", "version": 1}``. It never imports
  the learner's module itself: nothing the learner does can outlive one test inside this process.
- Then it serves the judge, one request and one reply at a time (frames of ``wire.py``):
  ``{"op": "begin"}`` hands the test a fresh child (its own process group, forked from this process ahead of
  time: it waits for the word ``GO`` and has run nothing of the learner's before) that imports
  ``JOB_DIR/submission/<module>.py`` and answers ``{"status": "ready"}`` or
  ``{"status": "import_error", "message": teaching text}``; ``{"op": "call", "path": ["f"], "args": [...],
  "kwargs": {...}}`` calls ``module.f(*args, **kwargs)``; ``{"op": "probe", "name": "p", ...}`` calls
  ``probes.p(module, *args, **kwargs)``. Both answer ``{"status": "returned", "value": encoded}`` or
  ``{"status": "raised", "type": "ValueError", "builtin": true, "message": str, "line": int|null}``.
  ``{"op": "end"}`` kills the child's process group and answers ``{"status": "ended"}`` at once (SIGKILL leaves
  it nothing to run; its exit is collected later). When the judge goes, every learner process is killed and
  collected (``Subject.close``).
- If the child dies while a request is open (``sys.exit``, ``os._exit``, a signal, the OOM killer), the
  answer is ``{"status": "exited", "code": int}`` or ``{"status": "killed", "signal": int}``.
- Learner output goes to this process's stdout/stderr; the wire carries only frames.
Everything here is as untrusted as the learner's code: the judge checks every byte it gets back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

from . import vdev, wire

PROTOCOL_VERSION = 1
CONNECT_WAIT_S = 30.0
REQUEST_MAX_BYTES = 64 * 1024 * 1024
REAP_WAIT_S = 0.5
MAX_MESSAGE = 2000
PR_SET_PDEATHSIG = 1
GO = b"g"  # the subject's word to a spare learner process: this test is yours, import and serve


def _trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 15].rstrip() + "\n... (trimmed)"


def _learner_line(exc: BaseException, path: str) -> int | None:
    """Return the last line of the learner's file the traceback passes through."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == path:
            line = lineno
    return line


def _safe_str(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a hostile __str__ must not break the reply
        text = ""
    return text if type(text) is str else ""


def import_message(exc: BaseException, path: str) -> str:
    """Explain why importing the learner's module failed."""
    if isinstance(exc, SyntaxError):
        where = f" on line {exc.lineno}" if exc.lineno else ""
        source = f"\n    {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        return _trim(f"Your code has a syntax error{where}: {exc.msg}{source}")
    if isinstance(exc, SystemExit):
        return f"Your code called exit() (exit code {exc.code!r}) while being imported"
    line = _learner_line(exc, path)
    where = f" (line {line})" if line is not None else ""
    return _trim(f"Your code raised {type(exc).__name__} while being imported: {_safe_str(exc)}{where}")


def raised(exc: BaseException, path: str) -> dict[str, Any]:
    """Describe an exception from the learner's code as a reply."""
    kind = type(exc)
    return {
        "status": "raised",
        "type": getattr(kind, "__name__", "Exception"),
        "builtin": getattr(kind, "__module__", "") == "builtins",
        "message": _trim(_safe_str(exc)),
        "line": _learner_line(exc, path),
    }


class Child:
    """The per-test process: import the learner's module, then answer calls until told to stop."""

    def __init__(self, sock: socket.socket, job: Path, module_name: str, probes: types.ModuleType | None,
                 max_reply: int) -> None:  # fmt: skip
        self.sock = sock
        self.path = str(job / "submission" / f"{module_name}.py")
        self.module_name = module_name
        self.probes = probes
        self.max_reply = max_reply
        self.module: types.ModuleType | None = None

    def send(self, reply: dict[str, Any]) -> None:
        for stream in (sys.stdout, sys.stderr):
            # The learner's prints must not die with the process at the end of the test.
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            body = json.dumps(reply, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            reply = {"status": "raised", "type": "EncodeError", "builtin": False, "line": None,
                     "message": f"the value could not be sent back: {exc}"}  # fmt: skip
            body = json.dumps(reply)
        if len(body) > self.max_reply:
            reply = {"status": "raised", "type": "ReplyTooLarge", "builtin": False, "line": None,
                     "message": f"your code returned a value too large to check ({len(body)} bytes as JSON; "
                                f"the limit is {self.max_reply})"}  # fmt: skip
        wire.send_frame(self.sock, reply)

    def import_module(self) -> dict[str, Any]:
        spec = importlib.util.spec_from_file_location(self.module_name, self.path)
        if spec is None or spec.loader is None:
            return {"status": "import_error", "message": "Your code could not be loaded"}
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # anything the learner's top level does becomes the teaching message
            reply: dict[str, Any] = {"status": "import_error", "message": import_message(exc, self.path)}
            if not isinstance(exc, SyntaxError | SystemExit):  # the judge words these by their class
                reply.update(type=type(exc).__name__, raw=_trim(_safe_str(exc)), line=_learner_line(exc, self.path))
            return reply
        self.module = module
        return {"status": "ready"}

    def target(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "call":
            path = request.get("path")
            if type(path) is not list or not path or not all(type(p) is str and p.isidentifier() for p in path):
                raise ValueError("bad call path")
            target: Any = self.module
            for name in path:
                if name.startswith("__"):
                    raise AttributeError(name)
                target = getattr(target, name)
            return target
        name = request.get("name")
        if self.probes is None or type(name) is not str or name.startswith("_") or not hasattr(self.probes, name):
            raise LookupError(f"the exercise has no probe called {name!r}")
        probe = getattr(self.probes, name)
        return lambda *args, **kwargs: probe(self.module, *args, **kwargs)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            args = wire.decode(request.get("args", []), native=True)
            kwargs = wire.decode(request.get("kwargs", {}), native=True)
            function = self.target(request)
        except AttributeError:  # the learner's module lacks what the tests call (a renamed or nested function)
            path = request.get("path")
            return {"status": "missing", "name": ".".join(path) if isinstance(path, list) else ""}
        except Exception as exc:
            return {"status": "bad_request", "message": f"{type(exc).__name__}: {exc}"}
        try:
            value = function(*args, **kwargs)
        except SystemExit:
            raise
        except BaseException as exc:  # the learner's exception is an answer, not our failure
            return raised(exc, self.path)
        try:
            return {"status": "returned", "value": wire.encode(value)}
        except BaseException as exc:
            return {"status": "raised", "type": "EncodeError", "builtin": False, "line": None,
                    "message": f"your code returned a value that cannot be checked: {_safe_str(exc)}"}  # fmt: skip

    def serve(self) -> None:
        self.send(self.import_module())
        if self.module is None:
            return
        while True:
            try:
                request = wire.recv_frame(self.sock, max_bytes=REQUEST_MAX_BYTES)
            except wire.WireError:
                return
            self.send(self.answer(request))


class Subject:
    """The long-lived parent: forks one child per test and relays frames between it and the judge."""

    def __init__(
        self, judge: socket.socket, job: Path, config: dict[str, Any], probes: types.ModuleType | None
    ) -> None:
        self.judge = judge
        self.job = job
        self.module = str(config.get("module", "submission"))
        self.max_reply = int(config.get("max_reply_bytes", 4 * 1024 * 1024))
        self.probes = probes
        self.child_pid: int | None = None
        self.child_sock: socket.socket | None = None
        self.spare: tuple[int, socket.socket] | None = None  # the next test's process, waiting for GO
        self.dying: set[int] = set()  # killed, not collected yet

    def begin(self) -> dict[str, Any]:
        self.end()
        spare, self.spare = self.spare, None
        pid, sock = spare if spare is not None else self._fork()
        if not _started(sock):  # the spare died or hangs (something killed or stopped it): a fresh one instead
            self._forget(pid, sock)
            pid, sock = self._fork()
            _started(sock)  # if this one is gone too, relay() reports how it died
        self.child_pid, self.child_sock = pid, sock
        self.spare = self._fork()  # the next test's process, forked while this one works
        return self.relay()

    def _fork(self) -> tuple[int, socket.socket]:
        """Fork a learner process that waits for ``GO`` before it imports anything; return its pid and socket.

        Forking ahead takes the fork and the process's set-up off the next test's path; until ``GO`` the child
        runs nothing of the learner's, so a test still starts in a process no learner code has touched.
        """
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.setpgid(0, 0)
                _die_with_parent()
                for sock in (mine, self.judge, self.child_sock, self.spare[1] if self.spare else None):
                    if sock is not None:
                        sock.close()
                if theirs.recv(len(GO)) == GO:
                    theirs.send(GO)  # alive and listening: before any of the learner's code runs
                    Child(theirs, self.job, self.module, self.probes, self.max_reply).serve()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                code = 70
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)  # no atexit hooks of the learner's after a normal end
        theirs.close()
        return pid, mine

    def _forget(self, pid: int, sock: socket.socket) -> None:
        """Kill a learner process without waiting for it: ``_reap_strays`` collects it later."""
        sock.close()
        _kill_group(pid)
        self.dying.add(pid)

    def relay(self, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Forward ``request`` (if any) to the child and return its reply, or how it died."""
        if self.child_sock is None:
            return {"status": "no_child"}
        try:
            if request is not None:
                wire.send_frame(self.child_sock, request)
            while True:
                ready, _, _ = select.select([self.child_sock, self.judge], [], [])
                if self.child_sock in ready:
                    return wire.recv_frame(self.child_sock, max_bytes=self.max_reply + 1024)
                # The judge speaks while the child is busy: it gave up waiting (an "end").
                return {"status": "interrupted", "then": wire.recv_frame(self.judge, max_bytes=REQUEST_MAX_BYTES)}
        except wire.WireError:
            return self.died()

    def died(self) -> dict[str, Any]:
        """Reap the child after its socket closed; report its exit status."""
        pid = self.child_pid
        self.child_pid = None
        if self.child_sock is not None:
            self.child_sock.close()
            self.child_sock = None
        if pid is None:
            return {"status": "no_child"}
        deadline = time.monotonic() + REAP_WAIT_S
        pause_s = 0.0005  # a killed child is usually gone within a millisecond: look soon, then back off
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                _kill_group(pid)
                done, status = os.waitpid(pid, 0)
                break
            time.sleep(pause_s)
            pause_s = min(0.01, pause_s * 2)
        _kill_group(pid)
        code = os.waitstatus_to_exitcode(status)
        return {"status": "killed", "signal": -code} if code < 0 else {"status": "exited", "code": code}

    def end(self) -> dict[str, Any]:
        """Kill the test's process group; its exit is collected later, off the next test's path.

        Nothing of it runs again once SIGKILL is sent, so the next test need not wait while the kernel frees its
        memory (a few milliseconds for a framework's process).
        """
        if self.child_pid is not None and self.child_sock is not None:
            self._forget(self.child_pid, self.child_sock)
        self.child_pid, self.child_sock = None, None
        self.dying -= _reap_strays()
        return {"status": "ended"}

    def close(self) -> None:
        """End the test's process and the spare, and wait (briefly) until every learner process is collected."""
        self.end()
        if self.spare is not None:
            self._forget(*self.spare)
            self.spare = None
        deadline = time.monotonic() + REAP_WAIT_S
        while self.dying and time.monotonic() < deadline:
            self.dying -= _reap_strays()
            time.sleep(0.001)

    def serve(self) -> None:
        wire.send_frame(self.judge, {"status": "hello", "version": PROTOCOL_VERSION})
        self.spare = self._fork()  # the first test's process, forked while the judge's pytest starts
        while True:
            try:
                request = wire.recv_frame(self.judge, max_bytes=REQUEST_MAX_BYTES)
            except wire.WireError:
                self.close()
                return
            while True:
                reply = self.handle(request)
                if reply.get("status") != "interrupted":
                    break
                request = reply["then"]
            try:
                wire.send_frame(self.judge, reply)
            except wire.WireError:
                self.close()
                return

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "begin":
            return self.begin()
        if op in ("call", "probe"):
            return self.relay(request)
        if op == "end":
            return self.end()
        return {"status": "bad_request", "message": f"unknown op {op!r}"}


def _started(sock: socket.socket) -> bool:
    """Tell a waiting learner process ``GO``; return whether it answered that it heard (within ``REAP_WAIT_S``)."""
    try:
        sock.settimeout(REAP_WAIT_S)
        sock.send(GO)
        return sock.recv(len(GO)) == GO
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(None)


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            target()


def _die_with_parent() -> None:
    """Ask the kernel to kill this child when the subject goes (best effort; cgroups are the real bound)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reap_strays() -> set[int]:
    """Collect children that exited (killed tests, orphans the learner left to us); return their pids."""
    reaped: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.add(pid)


def _connect(path: Path) -> socket.socket:
    deadline = time.monotonic() + CONNECT_WAIT_S
    pause_s = 0.001
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(pause_s)  # the judge is starting in parallel and usually listens within milliseconds
            pause_s = min(0.02, pause_s * 2)


def _load_probes(job: Path) -> types.ModuleType | None:
    path = job / "probes" / "probes.py"
    if not path.exists():
        return None
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("probes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["probes"] = module
    spec.loader.exec_module(module)
    return module


def prepare(job: Path) -> tuple[dict[str, Any], types.ModuleType | None]:
    """Read ``subject.json``, import the preloads and the probes: the warm part a template process can share."""
    config = json.loads((job / "subject.json").read_text(encoding="utf-8"))
    if not isinstance(config, dict) or config.get("version") != 1:
        raise ValueError("subject.json has an unsupported version")
    for key in [k for k in os.environ if k.startswith("PYTEST_")]:
        del os.environ[key]
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
    sys.path.insert(0, str(job / "submission"))
    sys.dont_write_bytecode = True
    warm(config.get("preload", []), config.get("devices") or {})
    return config, _load_probes(job)


def warm(preload: list[str], devices: dict[str, Any]) -> None:
    """Import the preloads and prepare the virtual devices: all of ``prepare`` that reads no job.

    A warm template (``worker/grading/boot/template.py``) calls it once with a runtime's values and forks per
    job; ``prepare`` in the forked child calls it again with the job's values, which is then a no-op.
    """
    if "tensorflow" in preload:
        # TensorFlow reads this once, at import: its start-up chatter would otherwise open every learner's stderr.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name in preload:
        importlib.import_module(str(name))
    # Before the learner's module and before any fork: TensorFlow's logical devices can only be configured
    # before its runtime starts, and children must inherit the virtual CUDA layer.
    vdev.setup(str(devices.get("framework", "none")), int(devices.get("replicas", 1)), int(devices.get("gpus", 0)))


def main(argv: list[str]) -> int:
    """Run the subject; see the module contract."""
    args = argv[1:]
    fd: int | None = None
    if len(args) >= 2 and args[0] == "--fd":
        fd, args = int(args[1]), args[2:]
    job = Path(args[0] if args else "/job")
    try:
        config, probes = prepare(job)
    except Exception as exc:
        print(f"gpulab subject: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if fd is not None:
        # Development mode: we are the judge's own child, with no cgroup to end us; go when it goes.
        _die_with_parent()
    judge = socket.socket(fileno=fd) if fd is not None else _connect(job / "ipc" / "judge.sock")
    Subject(judge, job, config, probes).serve()
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
