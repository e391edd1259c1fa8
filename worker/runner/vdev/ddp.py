"""Run a learner's ``train(rank, world_size) -> dict[str, Tensor]`` in ``world_size`` real processes.

Contract:
- ``run(train, world_size)`` forks one process per rank from the calling process (torch must already be
  imported; forking keeps the start near 0.1 s where spawning re-imports torch for seconds). Each rank gets
  ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT``, runs with one
  intra-op thread (a fork after the parent's OpenMP pool started would otherwise hang at the first matmul),
  and virtual CUDA turned off (DDP on CPU workers is real DDP over gloo on CPU tensors).
- Each rank sends its returned tensors (or its exception) to the parent over a pipe as a JSON header plus
  raw little-endian bytes, never pickle, then leaves with ``os._exit`` (gloo can hang at interpreter exit).
- Every ``DistributedDataParallel`` a rank makes stays referenced until that exit (``_keep_wrappers``): freeing
  one when ``train`` returns can hang in gloo's teardown (below), and a rank never needs it freed.
- Every rank is killed when ``timeout_s`` passes; ``RankResult`` says which ranks finished, failed, timed
  out or died, and ``RankResult.plain()`` is JSON-ready data for the judge.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Numeric dtypes only: the bytes are re-read with numpy.frombuffer, which is safe for these.
_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}
MAX_BYTES = 256 * 1024 * 1024
_HEADER = struct.Struct("<Q")


@dataclass
class RankError:
    """What a rank raised: exception type name, message and the last lines of its traceback."""

    type: str
    message: str
    traceback: str


@dataclass
class RankResult:
    """The outcome of one rank."""

    rank: int
    state: dict[str, np.ndarray] = field(default_factory=dict)
    error: RankError | None = None
    timed_out: bool = False
    exit_code: int | None = None
    destroyed: bool | None = None  # whether the process group was destroyed when train returned
    seconds: float = 0.0
    comm: dict[str, Any] | None = None  # runner.vdev.comm.report() when run with measure=True

    @property
    def ok(self) -> bool:
        """Return whether the rank returned a result."""
        return self.error is None and not self.timed_out and self.destroyed is not None

    def describe(self) -> str:
        """Return one teaching line about this rank's outcome."""
        if self.timed_out:
            return f"rank {self.rank} did not finish in time"
        if self.error is not None:
            return f"rank {self.rank} raised {self.error.type}: {self.error.message}"
        if self.destroyed is None:
            return f"rank {self.rank} died without a result (exit code {self.exit_code})"
        return f"rank {self.rank} finished"

    def plain(self) -> dict[str, Any]:
        """Return this result as JSON-ready data: tensors become dtype, shape and a flat list."""
        return {
            "rank": self.rank,
            "state": {
                k: {"dtype": str(v.dtype), "shape": list(v.shape), "data": v.ravel().tolist()}
                for k, v in self.state.items()
            },
            "error": None if self.error is None else vars(self.error),
            "timed_out": self.timed_out,
            "exit_code": self.exit_code,
            "destroyed": self.destroyed,
            "seconds": round(self.seconds, 3),
            "comm": self.comm,
        }


def encode(payload: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """Return ``payload`` plus ``arrays`` as length-prefixed JSON followed by the raw array bytes."""
    blobs, specs = [], []
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        if a.dtype.name not in _DTYPES:
            raise TypeError(f"{name}: dtype {a.dtype} cannot be sent")
        specs.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape), "nbytes": a.nbytes})
        blobs.append(a.tobytes())
    header = json.dumps({**payload, "arrays": specs}).encode()
    return _HEADER.pack(len(header)) + header + b"".join(blobs)


def decode(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Return the payload and arrays that ``encode`` wrote; raise ``ValueError`` on anything malformed."""
    if len(data) < _HEADER.size:
        raise ValueError("truncated message")
    (size,) = _HEADER.unpack_from(data)
    end = _HEADER.size + size
    payload = json.loads(data[_HEADER.size : end])
    if not isinstance(payload, dict):
        raise ValueError("header is not an object")
    arrays: dict[str, np.ndarray] = {}
    offset = end
    for spec in payload.pop("arrays", []):
        dtype, shape, nbytes = spec["dtype"], [int(n) for n in spec["shape"]], int(spec["nbytes"])
        if dtype not in _DTYPES:
            raise ValueError(f"bad dtype for {spec.get('name')!r}")
        item = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape, dtype=np.int64))
        if min(shape, default=0) < 0 or nbytes != count * item.itemsize or offset + nbytes > len(data):
            raise ValueError(f"bad array {spec.get('name')!r}")
        arrays[str(spec["name"])] = np.frombuffer(data, dtype=item, count=count, offset=offset).reshape(shape).copy()
        offset += nbytes
    return payload, arrays


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _to_arrays(state: Any) -> dict[str, np.ndarray]:
    import torch

    if not isinstance(state, Mapping):
        raise TypeError(f"train must return a dict of tensors, not {type(state).__name__}")
    out = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"train returned {type(value).__name__} for {name!r}; expected a tensor")
        out[str(name)] = value.detach().cpu().contiguous().numpy()
    return out


def _no_tls_context(torch: Any) -> None:
    """Stop backward from stashing a Python object in C++ thread-local state (avoids a deadlock at teardown).

    torch 2.13's ``autograd.graph._engine_run_backward`` stashes ``contextvars.copy_context()`` in TLS for
    the duration of ``backward``. DDP's gradient hooks launch gloo all-reduces during backward, and each
    ``AsyncWork`` captures that TLS. When the last reference to the Reducer/process group is dropped (train
    returning, locals freed) the main thread runs ``~ProcessGroupGloo`` *holding the GIL* and joins the gloo
    worker thread, while that thread destroys a finished work whose TLS holds the stashed object: its
    ``SafePyObject`` destructor waits for the GIL. Deadlock (gdb: main in ``std::thread::join`` from
    ``~Reducer``; ``pt_gloo_runloop`` in ``take_gil`` from ``~ThreadLocalState``), seen in 1 of 5 to 2 of 3
    warm runs. The stash only serves torch.compile's config in autograd device threads: not used in ranks.
    """
    c = torch._C
    if hasattr(c, "_stash_obj_in_tls") and hasattr(c, "_remove_obj_from_tls"):
        c._stash_obj_in_tls = lambda *args, **kwargs: None
        c._remove_obj_from_tls = lambda *args, **kwargs: None


_KEPT: list[Any] = []  # this rank's DDP wrappers, referenced until os._exit


def _keep_wrappers(torch: Any) -> None:
    """Keep every ``DistributedDataParallel`` the rank makes alive until the rank leaves with ``os._exit``.

    When ``train`` returns, its locals are freed, and with them the wrapper, its Reducer and their hold on the
    process group. In torch 2.13 on gloo, freeing them while the other rank is still in its last collective
    (a submission without a final barrier, whose ranks leave ``train`` at different moments) hung about 1 rank
    run in 10 (seen in the capstone's variants). The hang is in the destructors, which ``os._exit`` never runs,
    so the harness keeps the wrappers referenced instead (not reproduced here in 35 runs without it: the test
    checks the reference, not the race). ``_no_tls_context`` covers the other teardown deadlock, in backward's
    thread-local state.
    """
    ddp = torch.nn.parallel.DistributedDataParallel
    if getattr(ddp.__init__, "_gpulab_kept", False):
        return
    original = ddp.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _KEPT.append(self)

    init._gpulab_kept = True  # type: ignore[attr-defined]
    ddp.__init__ = init


def _rank_main(
    train: Callable[[int, int], Any], rank: int, world_size: int, port: int, fd: int, release: int, measure: bool
) -> None:
    """Run one rank in the forked child, report through ``fd``, wait for ``release`` to close; never returns."""
    code = 0
    comm: Any = None
    try:
        import torch
        import torch.distributed as dist

        from . import torch_cuda

        torch_cuda.disable()
        torch.set_num_threads(1)
        _no_tls_context(torch)
        _keep_wrappers(torch)
        if measure:
            from . import comm

            comm.install()
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world_size),
        )
        state = train(rank, world_size)
        arrays = _to_arrays(state)
        header: dict[str, Any] = {"destroyed": not dist.is_initialized()}
        if comm is not None:
            header["comm"] = comm.report()
        message = encode(header, arrays)
    except BaseException as exc:
        code = 1
        tail = "".join(traceback.format_exception(exc)[-12:])[-4000:]
        error = {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": tail}
        message = encode({"error": error}, {})
    try:
        view = memoryview(message)
        while view:
            view = view[os.write(fd, view) :]
        os.close(fd)
        # Rank 0 hosts the TCPStore: leaving before the others finish (destroy_process_group talks to the
        # store) leaves them hanging. Wait until the parent has every rank's result and closes the pipe.
        os.read(release, 1)
    finally:
        os._exit(code)


def run(
    train: Callable[[int, int], Any], world_size: int = 2, timeout_s: float = 60.0, *, measure: bool = False
) -> list[RankResult]:
    """Run ``train(rank, world_size)`` in ``world_size`` forked processes; return one result per rank.

    With ``measure``, each rank records its communication (``runner.vdev.comm``) into ``RankResult.comm``.
    """
    port = _free_port()
    started = time.monotonic()
    children: dict[int, tuple[int, int]] = {}  # read fd -> (rank, pid)
    release_r, release_w = os.pipe()
    for rank in range(world_size):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.close(release_w)
            _rank_main(train, rank, world_size, port, w, release_r, measure)
        os.close(w)
        children[r] = (rank, pid)
    os.close(release_r)
    buffers: dict[int, bytearray] = {fd: bytearray() for fd in children}
    results = {rank: RankResult(rank) for rank in range(world_size)}
    open_fds = set(children)
    while open_fds:
        left = timeout_s - (time.monotonic() - started)
        if left <= 0:
            break
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk and len(buffers[fd]) + len(chunk) <= MAX_BYTES + (1 << 20):
                buffers[fd] += chunk
                continue
            open_fds.discard(fd)  # EOF (or too much data): this rank is done talking
            results[children[fd][0]].seconds = time.monotonic() - started
    os.close(release_w)
    for fd, (rank, pid) in children.items():
        res = results[rank]
        if fd in open_fds:
            res.timed_out, res.seconds = True, timeout_s
            os.kill(pid, signal.SIGKILL)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        res.exit_code = os.waitstatus_to_exitcode(status)
        if res.timed_out or not buffers[fd]:
            continue
        try:
            payload, arrays = decode(bytes(buffers[fd]))
        except (ValueError, KeyError, TypeError) as exc:
            res.error = RankError("ProtocolError", f"unreadable result: {exc}", "")
            continue
        if isinstance(payload.get("error"), dict):
            e = payload["error"]
            res.error = RankError(str(e.get("type")), str(e.get("message")), str(e.get("traceback")))
        else:
            res.state, res.destroyed = arrays, bool(payload.get("destroyed"))
            res.comm = payload["comm"] if isinstance(payload.get("comm"), dict) else None
    return [results[rank] for rank in range(world_size)]
