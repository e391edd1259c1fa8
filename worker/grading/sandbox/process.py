"""Run one child process with a wall clock and capped output: the part every process-based backend shares.

Contract:
- ``run_process(argv, ...)`` starts ``argv`` with stdin from /dev/null and stdout/stderr on pipes, reads
  both concurrently, keeps at most ``output_bytes`` of each, and keeps draining so the child never blocks.
- At the deadline it calls ``kill()`` and reports ``timed_out``; past ``hard_cap_bytes`` of total output it
  calls ``kill()`` and reports ``output_exceeded``. ``kill`` must end every process of the run.
- After the child exits, pipes still held open by its leftovers are given ``LINGER_S``, then ``kill()``.
- ``exit_code`` is the child's status as ``subprocess`` reports it (negative: killed by that signal).
- ``supervise(proc, ...)`` is the same loop for a process started elsewhere (a warm template's child):
  anything with ``poll()``, ``wait(timeout)`` and the two pipe files.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol, TypeVar

P = TypeVar("P", bound="Supervised")
LINGER_S = 1.0
READ_CHUNK = 65536


@dataclass
class ProcessResult:
    exit_code: int | None
    timed_out: bool
    output_exceeded: bool
    stdout: bytes
    stderr: bytes
    output_truncated: bool
    wall_s: float


class Capped:
    """Keep the first ``limit`` bytes of a stream and count the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


def run_process(
    argv: Sequence[str],
    *,
    timeout_s: float,
    output_bytes: int,
    hard_cap_bytes: int,
    kill: Callable[[subprocess.Popen[bytes]], None],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
) -> ProcessResult:
    """Run ``argv`` to completion under a wall clock and output caps; see the module contract."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        pass_fds=tuple(pass_fds),
        close_fds=True,
        start_new_session=True,
    )
    return supervise(proc, started=started, timeout_s=timeout_s, output_bytes=output_bytes,
                     hard_cap_bytes=hard_cap_bytes, kill=kill)  # fmt: skip


class Supervised(Protocol):
    """What ``supervise`` needs of a process: a ``Popen`` or a stand-in (a warm template's child)."""

    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def supervise(
    proc: P,
    *,
    started: float,
    timeout_s: float,
    output_bytes: int,
    hard_cap_bytes: int,
    kill: Callable[[P], None],
) -> ProcessResult:
    """Drain ``proc``'s output pipes under the wall clock and caps of ``run_process``, then reap it."""
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): Capped(output_bytes), proc.stderr.fileno(): Capped(output_bytes)}
    timed_out = output_exceeded = killed = False
    deadline = started + timeout_s
    linger_until: float | None = None
    selector = selectors.DefaultSelector()
    try:
        for fd in streams:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if proc.poll() is not None and linger_until is None:
                linger_until = now + LINGER_S
            if not killed and now >= deadline:
                timed_out = killed = True
                kill(proc)
                linger_until = time.monotonic() + LINGER_S
            elif not killed and linger_until is not None and now >= linger_until:
                # The child is gone but something it started still holds the pipes: end it.
                killed = True
                kill(proc)
                linger_until = time.monotonic() + LINGER_S
            elif killed and linger_until is not None and now >= linger_until:
                break
            wait = min(deadline, linger_until or deadline) - now
            for key, _ in selector.select(timeout=max(0.01, min(wait, 0.25))):
                fd = int(key.fd)
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                    continue
                streams[fd].add(chunk)
                if not killed and sum(s.total for s in streams.values()) > hard_cap_bytes:
                    output_exceeded = killed = True
                    kill(proc)
                    linger_until = time.monotonic() + LINGER_S
    finally:
        selector.close()
        if proc.poll() is None:
            kill(proc)
        exit_code = _reap(proc)
        proc.stdout.close()
        proc.stderr.close()
    stdout, stderr = list(streams.values())
    return ProcessResult(
        exit_code=exit_code,
        timed_out=timed_out,
        output_exceeded=output_exceeded,
        stdout=bytes(stdout.data),
        stderr=bytes(stderr.data),
        output_truncated=stdout.truncated or stderr.truncated,
        wall_s=time.monotonic() - started,
    )


def _reap(proc: Supervised) -> int | None:
    """Wait for the child after it was told to die; ``None`` if it still would not."""
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None
