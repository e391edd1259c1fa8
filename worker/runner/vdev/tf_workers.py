"""Run ``work(workers, index)`` in N forked TensorFlow worker processes that can form a cluster on loopback.

Contract:
- ``run(work, num_workers)`` picks one free loopback port per worker (``workers``: ``["127.0.0.1:P0", ...]``) and
  forks one process per worker from the caller, which must have imported TensorFlow without starting its runtime
  (no op, no tensor, no device listing): ``MultiWorkerMirroredStrategy`` has to be created before any other
  TensorFlow operation of a process ("Collective ops must be configured at program startup"), and a fork after
  the runtime started inherits it. Forking keeps the start near a second where a spawned worker re-imports
  TensorFlow (seconds each).
- The harness sets no ``TF_CONFIG``: forming the cluster from ``workers`` and ``index`` is the caller's ``work``.
- ``work`` returns a dict: numpy arrays travel as raw bytes, everything else must be JSON data (``ddp.encode``);
  an exception is reported with its type, message and traceback tail. Each worker leaves with ``os._exit``.
- A worker that fails usually leaves the others waiting for it in a collective that never completes, so once one
  has failed or died the others get ``grace_s`` more seconds, then are killed (``stopped``); every worker still
  running at ``timeout_s`` is killed (``timed_out``).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ddp import MAX_BYTES, RankError, decode, encode


@dataclass
class WorkerResult:
    """The outcome of one worker."""

    index: int
    value: dict[str, Any] | None = None  # what work returned (JSON part), None unless it returned
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    error: RankError | None = None
    timed_out: bool = False
    stopped: bool = False  # killed grace_s after another worker failed or died
    exit_code: int | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Return whether the worker returned a result."""
        return self.value is not None

    def describe(self) -> str:
        """Return one line about this worker's outcome."""
        if self.stopped:
            return f"worker {self.index} was stopped: it was still running after another worker had failed"
        if self.timed_out:
            return f"worker {self.index} did not finish in time"
        if self.error is not None:
            return f"worker {self.index} raised {self.error.type}: {self.error.message}"
        if self.value is None:
            return f"worker {self.index} died without a result (exit code {self.exit_code})"
        return f"worker {self.index} finished"

    def plain(self) -> dict[str, Any]:
        """Return this result as JSON-ready data: arrays become dtype, shape and a flat list."""
        return {
            "index": self.index,
            "value": self.value,
            "arrays": {
                k: {"dtype": str(v.dtype), "shape": list(v.shape), "data": v.ravel().tolist()}
                for k, v in self.arrays.items()
            },
            "error": None if self.error is None else vars(self.error),
            "timed_out": self.timed_out,
            "stopped": self.stopped,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
        }


def free_ports(n: int) -> list[int]:
    """Return ``n`` distinct loopback ports that were free a moment ago (all held open together while picked)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def _split(result: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not isinstance(result, Mapping):
        raise TypeError(f"work must return a dict, not {type(result).__name__}")
    payload: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for key, value in result.items():
        if isinstance(value, np.ndarray):
            arrays[str(key)] = value
        else:
            payload[str(key)] = value
    return payload, arrays


def _worker_main(work: Callable[[list[str], int], Any], workers: list[str], index: int, fd: int) -> None:
    """Run one worker in the forked child and report through ``fd``; never returns."""
    code = 0
    try:
        payload, arrays = _split(work(list(workers), index))
        message = encode({"value": payload}, arrays)
    except BaseException as exc:
        code = 1
        tail = "".join(traceback.format_exception(exc)[-12:])[-4000:]
        error = {"type": type(exc).__name__, "message": str(exc)[:4000], "traceback": tail}
        message = encode({"error": error}, {})
    try:
        view = memoryview(message)
        while view:
            view = view[os.write(fd, view) :]
        os.close(fd)
    finally:
        # TensorFlow's gRPC threads can keep a normal interpreter exit waiting; nothing more is needed from here.
        os._exit(code)


def run(
    work: Callable[[list[str], int], Any], num_workers: int = 2, timeout_s: float = 60.0, *, grace_s: float = 10.0
) -> list[WorkerResult]:
    """Run ``work(workers, index)`` in ``num_workers`` forked processes; return one result per worker."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(num_workers)]
    started = time.monotonic()
    children: dict[int, tuple[int, int]] = {}  # read fd -> (index, pid)
    for index in range(num_workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            for other in children:
                os.close(other)
            _worker_main(work, workers, index, w)
        os.close(w)
        children[r] = (index, pid)
    buffers: dict[int, bytearray] = {fd: bytearray() for fd in children}
    results = [WorkerResult(index) for index in range(num_workers)]
    open_fds = set(children)
    deadline = started + timeout_s
    stop_at: float | None = None  # set when a worker has failed: the others get grace_s more
    while open_fds:
        end = deadline if stop_at is None else min(deadline, stop_at)
        left = end - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk and len(buffers[fd]) + len(chunk) <= MAX_BYTES + (1 << 20):
                buffers[fd] += chunk
                continue
            open_fds.discard(fd)  # EOF (or too much data): this worker is done talking
            results[children[fd][0]].seconds = time.monotonic() - started
            if stop_at is None and not _returned(buffers[fd]):
                stop_at = time.monotonic() + grace_s
    # The loop ended at stop_at (a worker had failed) or at the deadline, whichever came first.
    by_grace = stop_at is not None and stop_at < deadline
    for fd, (index, pid) in children.items():
        res = results[index]
        if fd in open_fds:
            res.stopped, res.timed_out = by_grace, not by_grace
            res.seconds = time.monotonic() - started
            os.kill(pid, signal.SIGKILL)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        res.exit_code = os.waitstatus_to_exitcode(status)
        if fd in open_fds or not buffers[fd]:
            continue
        try:
            payload, arrays = decode(bytes(buffers[fd]))
        except (ValueError, KeyError, TypeError) as exc:
            res.error = RankError("ProtocolError", f"unreadable result: {exc}", "")
            continue
        if isinstance(payload.get("error"), dict):
            e = payload["error"]
            res.error = RankError(str(e.get("type")), str(e.get("message")), str(e.get("traceback")))
        elif isinstance(payload.get("value"), dict):
            res.value, res.arrays = payload["value"], arrays
        else:
            res.error = RankError("ProtocolError", "unreadable result: no value", "")
    return results


def _returned(data: bytearray) -> bool:
    """Return whether a finished worker's message is a result (not an error, not empty or cut short)."""
    try:
        payload, _ = decode(bytes(data))
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(payload.get("value"), dict)
