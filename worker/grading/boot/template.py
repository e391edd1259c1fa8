"""A warm template: one root process per runtime (or the judge's) that has imported what it needs, forking per job.

Contract: started by ``warm.Template`` as ``python template.py CONFIG_JSON`` with exactly the sandbox's
environment (``policy.sandbox_env``: no host variable, so nothing secret sits in memory the children share)
and a ``SOCK_SEQPACKET`` control socket at fd ``CONFIG["fd"]``. ``CONFIG`` is ``{"fd": int, "runner_parent":
host folder holding runner/, "runner_root": "/opt/gpulab", "role": "subject"|"judge", "preload": [...],
"devices": {"framework", "replicas", "gpus"}}`` (``gpus``: the real GPUs its jobs get; with them it must never
initialise CUDA, which a fork cannot carry: ``runner/vdev/README.md``). It:

- imports the runner and calls ``runner.subject.warm(preload, devices)`` (framework import, virtual devices:
  no job is read, no learner code runs, no multi-threaded op) or, for ``role == "judge"``,
  ``runner.warm.warm_judge(preload)`` (the judge's modules, pytest and its plugins, and the framework in ``preload``;
  no job, no hidden test), then sends ``{"event": "ready"}``;
- stays single-threaded in Python and waits for messages: ``{"op": "spawn", "id": str, "spec": {...}}``
  with two fds (the job's stdout and stderr pipes) forks a child that calls ``entry.enter(spec, ...)`` and
  then runs ``runner.subject.main`` (``runner.judge.main`` for the judge) in the sandbox; the template
  answers ``{"event": "started", "id", "pid"}`` and, when that child ends, ``{"event": "exited", "id",
  "code"}`` (the subject's or judge's status, 128+N for signal N: ``linux.exit_code``;
  ``linux.EXIT_LAUNCH_FAILED`` when the sandbox could not be entered);
- exits when the control socket closes, and dies with the worker (parent-death signal).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
from typing import Any

# The sandbox environment's PYTHONSAFEPATH keeps this script's folder off sys.path; its siblings (``entry``,
# ``linux``) are imported from there by their top-level names, ahead of anything installed.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from linux import die_with_parent, exit_code  # noqa: E402 - found through the path above

MAX_MESSAGE = 1 << 20


def _send(ctrl: socket.socket, message: dict[str, Any]) -> None:
    ctrl.send(json.dumps(message).encode())


def _child(config: dict[str, Any], spec: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: enter the sandbox, then be the subject or the judge. Never returns."""
    code = 70
    role = config.get("role", "subject")
    try:
        entry = sys.modules["entry"]
        entry.enter({**spec, "role": role}, fds[0], fds[1])
        torch = sys.modules.get("torch")
        if torch is not None:
            # One torch template serves jobs of every CPU share (``warm.RuntimeKey``): its OpenMP read the
            # template's thread count at import, so the job's own count (its environment, now set) is applied here,
            # before anything ran a parallel op.
            torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        # Now sandboxed: forget the host folders the template imported from (all it needs is imported), and the
        # boot modules, so a learner's own ``entry`` or ``linux`` imports as it would in a cold sandbox.
        for name in ("entry", "linux"):
            sys.modules.pop(name, None)
        import runner

        root = config["runner_root"]
        sys.path[:] = [p for p in sys.path if p not in (config["runner_parent"], HERE)]
        if root not in sys.path:
            sys.path.insert(0, root)
        runner.__path__ = [f"{root}/runner"]
        if "runner.vdev" in sys.modules:
            sys.modules["runner.vdev"].__path__ = [f"{root}/runner/vdev"]
        sys.path_importer_cache.clear()
        if role == "judge":
            from runner import judge

            code = judge.main(["judge", spec["chdir"]])
        else:
            from runner import subject

            code = subject.main(["subject", spec["chdir"]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # report to the role's stderr: it is our failure, shown as a crash
        with contextlib.suppress(OSError):
            os.write(2, f"gpulab {role}: {type(exc).__name__}: {exc}\n".encode())
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing left to report to
                stream.flush()
        os._exit(code)


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    die_with_parent()
    ctrl = socket.socket(fileno=int(config["fd"]))
    sys.path.insert(0, config["runner_parent"])
    import entry  # noqa: F401 - imported before any fork

    if config.get("role", "subject") == "judge":
        from runner.warm import warm_judge

        warm_judge(config["preload"])
    else:
        from runner import subject

        subject.warm(config["preload"], config["devices"])
    # Children share the template's objects copy-on-write: a collection in a child would touch (and so copy)
    # every page of them, and rescan the framework's objects each time. Frozen objects are never collected.
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    jobs: dict[int, str] = {}
    _send(ctrl, {"event": "ready", "pid": os.getpid()})
    while True:
        try:
            ready, _, _ = select.select([ctrl.fileno(), wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        while jobs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            job = jobs.pop(pid, None)
            if job is not None:
                _send(ctrl, {"event": "exited", "id": job, "code": exit_code(status)})
        if ctrl.fileno() in ready:
            message, fds, _flags, _addr = socket.recv_fds(ctrl, MAX_MESSAGE, 2)
            if not message:
                return 0  # the worker went away
            request = json.loads(message)
            if request.get("op") != "spawn" or len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                _send(ctrl, {"event": "error", "id": request.get("id"), "message": "bad request"})
                continue
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            pid = os.fork()
            if pid == 0:
                _child(config, request["spec"], fds)
            for fd in fds:
                os.close(fd)
            jobs[pid] = request["id"]
            _send(ctrl, {"event": "started", "id": request["id"], "pid": pid})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
