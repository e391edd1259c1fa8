"""The ``docker`` backend's warm pool: judge and subject containers started before their job, one job each.

Contract:
- A ``Shape`` is what a pair of containers is made for: the grading image, the subject's runtime key (its
  preloads and virtual devices: ``warm.RuntimeKey``) and the job's ``Limits``. A job whose shape has a ready
  pair takes it; any other job runs cold (``docker.run_job``), and its shape gets pairs from then on.
- A pair is the cold run's two containers (``DockerSandbox.container_specs``: the same image, uids,
  environment, limits, lock-down and seccomp profile, no network) with two differences. The command is
  ``python3 -m runner.warm CONFIG`` (``worker/runner/warm.py``: import the role's framework and modules, then
  wait on a FIFO; no job exists yet). And the binds: each role's part of the job is a folder of the pair
  bound read-only at ``/job`` (``judge/``, ``subject/``), the pair's ``ipc/`` at ``/job/ipc`` (read-write
  for the judge, read-only for the subject), its ``out/`` read-write at ``/job/out`` for the judge, and
  ``ctl-<role>/`` read-only at ``/ctl`` with the FIFO ``go``. Once a job is copied in, each role sees what
  ``base.ROLE_MOUNTS`` gives it in a cold run, and nothing else.
- Ready: the container's process waits on its FIFO (opening the FIFO for writing without blocking succeeds
  only then); a background thread waits for both of a new pair, up to ``READY_TIMEOUT_S``.
- ``run`` of a job: copy the role's parts of the job folder into the pair's folders, attach to both
  containers' output, write ``go`` to the judge's FIFO then the subject's, and from there the cold run's
  rules (``docker.settle``): the judge's exit or the clock, both killed, inspected and force-removed. The
  judge's ``result.json`` comes back to the job folder's ``out/`` (a plain file of at most
  ``MAX_RESULT_BYTES``, never a link) and the pair's folder is deleted.
- ``WarmContainers`` keeps ``size`` ready pairs per shape it was asked to warm (``prewarm``: in the order given, the
  caller's demand order, one of every shape before a second of any, ``PREWARM_PARALLEL`` warming up at once) or has
  seen a job of, as far as the process's memory budget allows (``budget.py``: a pair holds ``pair_cost_mb``); pairs
  of a shape no job asked for in ``idle_s`` are removed (its next job runs cold and brings them back); a pair taken
  is replaced in the background once its job is over (so the replacement's framework import does not compete with
  that job for the cores). A pair that died, whose image is not the one the job would use, or older than
  ``MAX_AGE_S`` is removed, never used. One pool per worker process (``shared_containers``), closed at exit; a
  worker killed outright leaves its pairs to ``reap_stale`` (their ``gpulab.deadline`` label is their age limit).
- Nothing crosses from one job to the next: a pair serves one job and is removed, like a cold pair. GPU
  workers do not use the pool: a waiting pair would hold its GPUs (their jobs run cold, with exactly their
  GPUs).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.api.client import APIClient

from worker.bank.spec import ExerciseSpec, Limits
from worker.core.errors import PlatformError
from worker.core.files import read_capped
from worker.grading.sandbox.base import ROLE_MOUNTS, SandboxRun
from worker.grading.sandbox.budget import MemoryBudget, Reaper, cost_mb
from worker.grading.sandbox.docker import (
    API_VERSION,
    ENGINE_ERRORS,
    JUDGE_UID,
    LABEL_DEADLINE,
    LABEL_JOB,
    Attached,
    Bind,
    ContainerSpec,
    DockerSandbox,
    attach,
    create,
    engine_call,
    release,
    settle,
)
from worker.grading.sandbox.policy import JOB_MOUNT, hard_output_cap
from worker.grading.sandbox.warm import EVICT_IDLE_S, KindStats, RuntimeKey

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 180.0
READY_POLL_S = 0.05
REOPEN_S = 0.005
TAKE_TRIES = 20
CLOSE_WAIT_S = 30.0
MAX_AGE_S = 900.0
MAX_RESULT_BYTES = 1024 * 1024
CTL_MOUNT = "/ctl"
GO = b"go\n"
LABEL_WARM = "gpulab.warm"
# Which pool made a pair: "<pid>:<uuid>". Closing removes every container of its own label, pairs still being made
# included, and a test can find the pairs of one server process by its pid.
LABEL_OWNER = "gpulab.warm.owner"
# Pairs a prewarm warms up at once: each is two framework imports, so about one per two cores keeps the node
# busy without making every kind share the cores until all are up together; the kinds learners need first (the
# order prewarm is given) are up first.
PREWARM_PARALLEL = max(2, (os.cpu_count() or 2) // 2)
CLOSE_REMOVERS = 8  # containers removed at once when a pool closes: a graceful stop has seconds, not minutes
SHARED_PARTS = ("out", "ipc")  # bound on their own: written by the judge, and ipc/ shared by both roles


@dataclass(frozen=True)
class Shape:
    """What a pair is made for: a job can take it only when it asks for exactly this."""

    image: str
    key: RuntimeKey
    limits: Limits

    @classmethod
    def of_spec(cls, image: str, spec: ExerciseSpec) -> Shape:
        return cls(image, RuntimeKey.of_spec(spec), spec.limits)

    @classmethod
    def of_job(cls, image: str, job_dir: Path, limits: Limits) -> Shape:
        return cls(image, RuntimeKey.of_job(job_dir, limits), limits)

    @property
    def label(self) -> str:
        """Name the shape for people: its template kind and the job's memory limit."""
        return f"{self.key.label}, {self.limits.memory_mb} MB"


@dataclass
class Pair:
    """A judge and a subject container waiting for one job, and the host folder they see."""

    shape: Shape
    folder: Path
    names: dict[str, str]  # role -> container name
    image_id: str
    created: float = field(default_factory=time.monotonic)
    cost_mb: int = 0  # what the budget holds for it: the estimate, then what its containers measured

    def __post_init__(self) -> None:
        self.cost_mb = self.cost_mb or pair_cost_mb(self.shape)

    def fifo(self, role: str) -> Path:
        return self.folder / f"ctl-{role}" / "go"

    def open_fifos(self, *, tries: int = 1) -> dict[str, int] | None:
        """Open both FIFOs for writing if both containers wait on theirs; else None (nothing left open).

        ``tries`` > 1 looks again every ``REOPEN_S``: a container that has just answered a readiness probe
        opens its FIFO again a moment later.
        """
        for attempt in range(tries):
            fds: dict[str, int] = {}
            try:
                for role in ("judge", "subject"):
                    fds[role] = os.open(self.fifo(role), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                return fds
            except OSError:  # ENXIO: not waiting (yet, or any more); ENOENT: the folder is gone
                for fd in fds.values():
                    os.close(fd)
            if attempt + 1 < tries:
                time.sleep(REOPEN_S)
        return None


def _view(folder: Path, role: str) -> tuple[Bind, ...]:
    """Return the binds that give ``role`` its part of the pair's folder (see the module contract)."""
    binds = [Bind(folder / role, JOB_MOUNT, read_only=True)]
    access = dict(ROLE_MOUNTS[role])
    for part in SHARED_PARTS:
        if part in access:
            binds.append(Bind(folder / part, f"{JOB_MOUNT}/{part}", read_only=access[part] == "ro"))
    binds.append(Bind(folder / f"ctl-{role}", CTL_MOUNT, read_only=True))
    return tuple(binds)


def _make_folder() -> Path:
    """Make a pair's host folder: each role's view, the shared parts, the FIFOs (see the module contract)."""
    folder = Path(tempfile.mkdtemp(prefix="gpulab-warm-"))
    folder.chmod(0o755)
    for role in ("judge", "subject"):
        view = folder / role
        view.mkdir(mode=0o755)
        for part, _access in ROLE_MOUNTS[role]:
            if part in SHARED_PARTS:
                (view / part).mkdir(mode=0o755)  # where the shared part is bound over the read-only view
        ctl = folder / f"ctl-{role}"
        ctl.mkdir(mode=0o755)
        os.mkfifo(ctl / "go", 0o644)
    for part in SHARED_PARTS:
        shared = folder / part
        shared.mkdir(mode=0o755)
        if os.geteuid() == 0:
            os.chown(shared, JUDGE_UID, JUDGE_UID)
        else:
            shared.chmod(0o777)  # not root: the judge's uid can only be let in by mode
    return folder


def _copy_job(job_dir: Path, folder: Path) -> None:
    """Copy each role's parts of the job folder (written by the pipeline) into the pair's views."""
    for role in ("judge", "subject"):
        for part, _access in ROLE_MOUNTS[role]:
            if part in SHARED_PARTS:
                continue
            source, target = job_dir / part, folder / role / part
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            elif source.is_file():
                shutil.copy2(source, target)


def _bring_back_result(folder: Path, job_dir: Path) -> None:
    """Copy the judge's ``result.json`` into the job's ``out/`` when it is a plain, small file."""
    data = read_capped(folder / "out" / "result.json", MAX_RESULT_BYTES)
    if data is not None:
        (job_dir / "out" / "result.json").write_bytes(data)


class WarmContainers:
    """Ready container pairs per shape, replaced as they are used (see the module contract)."""

    def __init__(
        self,
        *,
        client: Callable[[], APIClient],
        specs: Callable[[Path, Limits], tuple[ContainerSpec, ContainerSpec]],
        size: int = 1,
        budget: MemoryBudget | None = None,
        idle_s: float = 0.0,
    ) -> None:
        self._client = client
        self._specs = specs
        self.size = max(1, size)
        self.budget = budget
        self.idle_s = idle_s
        self._last_used: dict[Shape, float] = {}
        self.reaped = 0  # waiting pairs removed because their shape was idle
        self._lock = threading.Lock()
        self._pairs: dict[Shape, list[Pair]] = {}
        self._filling: dict[Shape, int] = {}
        self._threads: list[threading.Thread] = []
        self._queued: collections.deque[Shape] = collections.deque()  # prewarm's pairs not started yet, in order
        self._prewarm_runners = 0
        self._closed = False
        self.owner = f"{os.getpid()}:{uuid.uuid4().hex}"  # LABEL_OWNER of every container this pool makes
        self.served = 0  # jobs that ran in a warm pair
        self.started = 0  # pairs created
        self._reaper = Reaper(self.reap_idle, idle_s, name="gpulab-warm-pair-reaper") if idle_s > 0 else None
        self.evicted = 0  # waiting pairs removed for another shape's job
        self._stats: dict[Shape, KindStats] = {}

    # --- making pairs ------------------------------------------------------------------------------------

    def prewarm(self, shapes: Iterable[Shape]) -> None:
        """Have ``size`` pairs of each shape made in the background, in the order given (the caller's demand
        order): one of every shape before a second of any, ``PREWARM_PARALLEL`` warming up at once."""
        order = list(dict.fromkeys(shapes))
        with self._lock:
            if self._closed:
                return
            for turn in range(self.size):
                for shape in order:
                    self._last_used.setdefault(shape, time.monotonic())
                    have = len(self._pairs.setdefault(shape, [])) + self._filling.get(shape, 0)
                    if have > turn:
                        continue
                    # Memory is reserved when a pair's turn comes, not now: by then the pairs before it are
                    # charged what they measure, usually far less than the estimate a reservation holds.
                    self._filling[shape] = self._filling.get(shape, 0) + 1
                    self._queued.append(shape)
            runners = max(0, min(PREWARM_PARALLEL, len(self._queued)) - self._prewarm_runners)
            self._prewarm_runners += runners
        for _ in range(runners):
            self._spawn(self._run_prewarm)

    def _run_prewarm(self) -> None:
        """Make the pairs a prewarm queued, one after another (``PREWARM_PARALLEL`` of these run at once)."""
        counted = True  # this runner is in ``_prewarm_runners`` until it leaves
        try:
            while True:
                with self._lock:
                    if not self._queued:  # checked and uncounted under one lock: a new prewarm starts a runner
                        self._prewarm_runners -= 1
                        counted = False
                        return
                    shape = self._queued.popleft()
                    if self._closed or not self._reserve(shape):  # closing, or no memory left for this one
                        self._filling[shape] -= 1
                        if not self._closed and not self._pairs.get(shape) and not self._filling[shape]:
                            self._stats.setdefault(shape, KindStats()).cold = "budget"
                        continue
                self._fill(shape)
        finally:
            if counted:  # an unexpected error: never leave ``prewarming()`` true for a runner that is gone
                with self._lock:
                    self._prewarm_runners -= 1

    def prewarming(self) -> bool:
        """Say whether pairs a prewarm asked for are still queued or warming up."""
        with self._lock:
            return bool(self._queued) or self._prewarm_runners > 0

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        """Run ``target`` in a tracked daemon thread (``close`` waits for them)."""
        thread = threading.Thread(target=target, args=args, name="gpulab-warm-pair", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _top_up(self, shape: Shape, *, evict: bool = False) -> None:
        """Have pairs of ``shape`` made up to ``size``; ``evict``: a job waits, idle shapes may give memory back."""
        with self._lock:
            if self._closed:
                return
            self._last_used.setdefault(shape, time.monotonic())
            have = len(self._pairs.setdefault(shape, [])) + self._filling.get(shape, 0)
            wanted = max(0, self.size - have)
            missing = 0
            while missing < wanted and self._reserve(shape):
                missing += 1
            if missing < wanted and not have:
                self._stats.setdefault(shape, KindStats()).cold = "budget"
            self._filling[shape] = self._filling.get(shape, 0) + missing
        if evict and missing == 0 and wanted and self._evict_for(shape):
            self._top_up(shape)
            return
        for _ in range(missing):
            self._spawn(self._fill, shape)

    def _evict_for(self, shape: Shape) -> bool:
        """Remove the waiting pairs of the least recently used other shape idle for ``EVICT_IDLE_S``; say if any."""
        now = time.monotonic()
        with self._lock:
            idle = [
                (self._last_used.get(other, 0.0), other)
                for other, pairs in self._pairs.items()
                if other != shape and pairs and now - self._last_used.get(other, 0.0) > EVICT_IDLE_S
            ]
            if not idle:
                return False
            _, victim = min(idle, key=lambda found: found[0])
            pairs = list(self._pairs[victim])
            self._pairs[victim].clear()
            self.evicted += len(pairs)
            self._stats.setdefault(victim, KindStats()).cold = "evicted"
        log.info("removing %d idle %s pair(s): a %s job needs their memory", len(pairs), victim.label, shape.label)
        for pair in pairs:
            self._discard(pair)
        return True

    def _reserve(self, shape: Shape) -> bool:
        runtime = shape.key.framework_runtime
        return self.budget is None or self.budget.reserve(pair_cost_mb(shape), what=f"a {runtime} container pair")

    def _release(self, shape: Shape, mb: int | None = None) -> None:
        """Give back what a pair of ``shape`` held (``mb``, measured) or was reserved for (its estimate)."""
        if self.budget is not None:
            self.budget.release(pair_cost_mb(shape) if mb is None else mb)

    def _fill(self, shape: Shape) -> None:
        made: Pair | None = None
        try:
            made = self._make(shape)
            self._wait_ready(made)
        except (PlatformError, OSError, *ENGINE_ERRORS) as exc:
            if not self._closed:  # closing interrupts the pairs still warming up: nothing to report
                log.warning("could not make a warm container pair: %s", exc)
            if made is not None:
                self._discard(made)  # which gives its reservation back
            else:
                self._release(shape)  # never made: give back what was reserved for it
            made = None
        finally:
            closing: Pair | None = None
            with self._lock:
                self._filling[shape] -= 1
                if made is not None and self._closed:
                    closing = made
                elif made is not None:
                    self._pairs.setdefault(shape, []).append(made)
                    self._stats.setdefault(shape, KindStats()).cold = ""
            if closing is not None:
                self._discard(closing)

    def _make(self, shape: Shape) -> Pair:
        folder = _make_folder()
        pair_id = uuid.uuid4().hex
        names = {role: f"gpulab-warm-{pair_id}-{role}" for role in ("judge", "subject")}
        try:
            judge, subject = self._specs(folder, shape.limits)
            with contextlib.closing(self._client()) as api:
                image_id = str(engine_call("inspect the grading image", lambda: api.inspect_image(shape.image))["Id"])
                for role, spec in (("judge", judge), ("subject", subject)):
                    config = {
                        "role": role, "job": JOB_MOUNT, "go": f"{CTL_MOUNT}/go", "preload": list(shape.key.preload),
                        "devices": {"framework": shape.key.framework, "replicas": shape.key.replicas},
                    }  # fmt: skip
                    deadline = time.time() + MAX_AGE_S + 2 * shape.limits.timeout_s + 120
                    warm_spec = dataclasses.replace(
                        spec,
                        image=image_id,
                        argv=("python3", "-m", "runner.warm", json.dumps(config)),
                        binds=_view(folder, role),
                        labels={
                            **spec.labels,
                            LABEL_JOB: pair_id,
                            LABEL_WARM: "1",
                            LABEL_OWNER: self.owner,
                            LABEL_DEADLINE: str(int(deadline)),
                        },
                        name=names[role],
                    )
                    create(api, warm_spec)
                    engine_call(f"start a warm {role}", lambda name=names[role]: api.start(name))  # type: ignore[misc]
        except BaseException:
            with contextlib.closing(self._client()) as api:
                for name in names.values():
                    with contextlib.suppress(*ENGINE_ERRORS):
                        api.remove_container(name, force=True)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        with self._lock:
            self.started += 1
        return Pair(shape=shape, folder=folder, names=names, image_id=image_id)

    def _wait_ready(self, pair: Pair) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            fds = pair.open_fifos()
            if fds is not None:
                for fd in fds.values():
                    os.close(fd)  # a probe: the container reads end of file and waits again
                self._charge_measured(pair)
                return
            if self._closed:
                raise PlatformError("the warm pool closed")
            time.sleep(READY_POLL_S)
        raise PlatformError(f"a warm container pair was not ready within {READY_TIMEOUT_S:.0f} s")

    def _charge_measured(self, pair: Pair) -> None:
        """Charge the budget what the ready pair's containers hold (the engine's memory count), not the estimate."""
        total = 0
        with contextlib.suppress(*ENGINE_ERRORS), contextlib.closing(self._client()) as api:
            for name in pair.names.values():
                stats = api.stats(name, stream=False, one_shot=True).get("memory_stats") or {}
                inner = stats.get("stats") or {}
                # What it holds without the page cache it could give back (cgroup v1 and v2 call it differently).
                cache = inner.get("total_inactive_file", inner.get("inactive_file", 0))
                total += int(stats.get("usage", 0)) - int(cache)
        measured = -(-total // (1024 * 1024))
        if measured > 0:
            if self.budget is not None:
                self.budget.adjust(pair.cost_mb, measured)
            pair.cost_mb = measured

    def _discard(self, pair: Pair) -> None:
        with contextlib.suppress(*ENGINE_ERRORS), contextlib.closing(self._client()) as api:
            for name in pair.names.values():
                with contextlib.suppress(*ENGINE_ERRORS):
                    api.remove_container(name, force=True)
        shutil.rmtree(pair.folder, ignore_errors=True)
        self._release(pair.shape, pair.cost_mb)

    # --- using them --------------------------------------------------------------------------------------

    def take(self, shape: Shape, image_id: str) -> tuple[Pair, dict[str, int]] | None:
        """Return a ready pair of ``shape`` with its FIFOs open for writing, or None (the job runs cold).

        Without one, the shape is topped up to ``size`` pairs in the background at once; a pair taken is
        replaced when its job is over (``run``).
        """
        with self._lock:
            self._last_used[shape] = time.monotonic()
            stats = self._stats.setdefault(shape, KindStats())
        while (pair := self._pop(shape)) is not None:
            # Probed outside the lock: the FIFOs may take a few retries, and other jobs need not wait for them.
            too_old = time.monotonic() - pair.created > MAX_AGE_S
            fds = None if too_old or pair.image_id != image_id else pair.open_fifos(tries=TAKE_TRIES)
            if fds is not None:
                with self._lock:
                    stats.hits += 1
                return pair, fds
            self._discard(pair)
        with self._lock:
            # Why this job found no pair: none made yet, the budget, an idle or evicted shape, pairs still
            # starting, or every ready pair taken by the jobs before it.
            reason = stats.cold or ("warming up" if self._filling.get(shape) else "used up")
            stats.missed(reason)
        self._top_up(shape, evict=True)  # this job runs cold; the next ones of its shape need not
        return None

    def _pop(self, shape: Shape) -> Pair | None:
        with self._lock:
            pairs = self._pairs.get(shape)
            return pairs.pop(0) if pairs else None

    def run(
        self, api: APIClient, pair: Pair, fds: dict[str, int], job_dir: Path, limits: Limits, *, timeout_s: float
    ) -> SandboxRun:
        """Run the job in ``job_dir`` in ``pair`` (whose FIFOs ``fds`` are open) and remove the pair."""
        started: dict[str, Attached] = {}
        try:
            _copy_job(job_dir, pair.folder)
            # The judge's output is for operators only: capped, but never a reason to stop the run.
            started["judge"] = attach(api, pair.names["judge"], limits.output_bytes, sys.maxsize)
            started["subject"] = attach(api, pair.names["subject"], limits.output_bytes, hard_output_cap(limits))
            clock = time.monotonic()
            for role in ("judge", "subject"):
                try:
                    os.write(fds[role], GO)
                except OSError as exc:  # the container went away after it was found ready
                    raise PlatformError(f"the warm {role} container did not take its job: {exc}") from exc
            result = settle(api, started, clock=clock, timeout_s=timeout_s)
            _bring_back_result(pair.folder, job_dir)
            with self._lock:
                self.served += 1
            return result
        finally:
            for fd in fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            release(api, started, list(pair.names.values()))
            shutil.rmtree(pair.folder, ignore_errors=True)
            self._release(pair.shape, pair.cost_mb)
            # The replacement starts once this job is over: its framework import would otherwise compete with
            # the job for the same cores and slow down the very verdict the pair was there to speed up.
            self._top_up(pair.shape)

    def reap_idle(self, now: float | None = None) -> int:
        """Remove the waiting pairs of shapes no job asked for in ``idle_s``; return how many pairs."""
        if self.idle_s <= 0:
            return 0
        now = time.monotonic() if now is None else now
        idle: list[Pair] = []
        old: list[Pair] = []
        with self._lock:
            for shape, pairs in self._pairs.items():
                if pairs and now - self._last_used.get(shape, now) > self.idle_s:
                    idle.extend(pairs)
                    pairs.clear()
                    self._last_used.pop(shape, None)
                else:  # in use: pairs past their age are replaced (a stopped worker's are reaped by age)
                    old.extend(p for p in pairs if now - p.created > MAX_AGE_S)
                    pairs[:] = [p for p in pairs if now - p.created <= MAX_AGE_S]
            self.reaped += len(idle)
        for pair in idle + old:
            self._discard(pair)
        for shape in dict.fromkeys(p.shape for p in old):
            self._top_up(shape)
        return len(idle)

    @property
    def closed(self) -> bool:
        return self._closed

    def ready_count(self, shape: Shape) -> int:
        return len(self.waiting(shape))

    def waiting(self, shape: Shape) -> list[Pair]:
        """Return the ready pairs of ``shape`` (only ready ones are kept; a copy of the list)."""
        with self._lock:
            return list(self._pairs.get(shape, []))

    def status(self) -> list[dict[str, Any]]:
        """Return each shape's ready pairs, hits, misses by reason, memory and why it is cold (``WarmPool.status``)."""
        with self._lock:
            found: list[dict[str, Any]] = []
            for shape in dict.fromkeys([*self._pairs, *self._stats]) if not self._closed else []:
                ready = self._pairs.get(shape, [])
                stats = self._stats.get(shape, KindStats())
                found.append({
                    "kind": shape.label,
                    "warm": len(ready),
                    "size": self.size,
                    "hits": stats.hits,
                    "misses": dict(stats.misses),
                    "memory_mb": sum(p.cost_mb for p in ready),
                    "cold": "" if ready else (stats.cold or ("warming up" if self._filling.get(shape) else "used up")),
                })  # fmt: skip
        return sorted(found, key=lambda kind: kind["kind"])

    def wait_ready(self, shape: Shape, *, count: int = 1, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Have pairs of ``shape`` made (``prewarm``) and wait until ``count`` are ready, or raise ``PlatformError``."""
        self.prewarm([shape])
        deadline = time.monotonic() + timeout_s
        while self.ready_count(shape) < count:
            if time.monotonic() > deadline:
                raise PlatformError(f"no {count} ready {shape.key.runtime} pair(s) within {timeout_s:.0f} s")
            time.sleep(READY_POLL_S)

    def close(self, *, wait_s: float = CLOSE_WAIT_S) -> None:
        """Remove every pair, waiting up to ``wait_s`` for those being made (they remove themselves).

        Fast enough for a graceful stop (compose gives 10 s): the waiting pairs are removed several at once, pairs
        still being made stop waiting for their containers at once, and whatever of this pool's label is left
        after that (a container whose creation was under way) is removed by the label.
        """
        if self._reaper is not None:
            self._reaper.stop()
        with self._lock:
            self._closed = True
            pairs = [p for ps in self._pairs.values() for p in ps]
            self._pairs.clear()
            threads = list(self._threads)
        if pairs:
            with ThreadPoolExecutor(max_workers=CLOSE_REMOVERS, thread_name_prefix="gpulab-warm-close") as removers:
                list(removers.map(self._discard, pairs))
        deadline = time.monotonic() + wait_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._remove_labelled()

    def _remove_labelled(self) -> None:
        """Remove every container that carries this pool's owner label (a pair whose making was cut short)."""
        with contextlib.suppress(*ENGINE_ERRORS), contextlib.closing(self._client()) as api:
            found = api.containers(all=True, filters={"label": f"{LABEL_OWNER}={self.owner}"})
            for container in found:
                with contextlib.suppress(*ENGINE_ERRORS):
                    api.remove_container(container["Id"], force=True)


_shared: dict[tuple[str, str, int], WarmContainers] = {}
_shared_lock = threading.Lock()


def pair_cost_mb(shape: Shape) -> int:
    """Return what a waiting pair of ``shape`` holds: two processes that imported its framework."""
    return 2 * cost_mb(shape.key.framework_runtime)


def shared_containers(
    url: str,
    image: str,
    size: int,
    *,
    client: Callable[[], APIClient],
    specs: Callable[[Path, Limits], tuple[ContainerSpec, ContainerSpec]],
    budget: MemoryBudget | None = None,
    idle_s: float = 0.0,
) -> WarmContainers:
    """Return this process's pool for the engine ``url`` and ``image`` (closed at exit; a new one once closed)."""
    key = (url, image, size)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool.closed:
            pool = _shared[key] = WarmContainers(client=client, specs=specs, size=size, budget=budget, idle_s=idle_s)
            atexit.register(pool.close)
        return pool


class WarmDockerSandbox(DockerSandbox):
    """``DockerSandbox`` whose jobs take a pair of containers started before them when one is ready."""

    warm = True

    def __init__(
        self, *, runtimes: Iterable[str], pool_size: int = 1, budget: MemoryBudget | None = None,
        idle_s: float = 0.0, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.runtimes = tuple(runtimes)
        self.pool = shared_containers(
            self.url, self.image, pool_size, client=self._new_client, specs=self.container_specs, budget=budget,
            idle_s=idle_s,
        )  # fmt: skip

    def _new_client(self) -> APIClient:
        return APIClient(base_url=self.url, version=API_VERSION, timeout=self.api_timeout_s)

    def _run(
        self, api: APIClient, job_dir: Path, limits: Limits, *, image_id: str, gpu_ids: tuple[str, ...]
    ) -> SandboxRun:
        shape = Shape.of_job(self.image, job_dir, limits)
        if not gpu_ids and self.serves(shape):
            taken = self.pool.take(shape, image_id)
            if taken is not None:
                pair, fds = taken
                return self.pool.run(api, pair, fds, job_dir, limits, timeout_s=self.wall_limit_s(limits))
        return super()._run(api, job_dir, limits, image_id=image_id, gpu_ids=gpu_ids)

    def serves(self, shape: Shape) -> bool:
        """Say whether jobs of ``shape`` use warm pairs: their framework is one of ``runtimes``, and no GPUs."""
        return self.gpu_slots is None and shape.key.framework_runtime in self.runtimes

    def prewarm(self, specs: Iterable[ExerciseSpec]) -> int:
        """Have pairs made for the code exercises among ``specs`` this sandbox serves; return how many shapes."""
        shapes = [Shape.of_spec(self.image, s) for s in specs if s.kind == "code"]
        served = [shape for shape in dict.fromkeys(shapes) if self.serves(shape)]
        self.pool.prewarm(served)
        return len(served)


def shared_status() -> list[dict[str, Any]]:
    """Return the ``status()`` of every pool of this process, shapes of all pools together."""
    with _shared_lock:
        pools = list(_shared.values())
    return [kind for pool in pools for kind in pool.status()]


def close_shared() -> None:
    """Close every pool of this process (a graceful stop: ``close_warm_pools``; at exit ``atexit`` does it)."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()
