"""The ``local`` backend with warm subjects and judges: template processes fork the subject and judge of each job.

Contract:
- ``WarmLocalSandbox`` is ``LocalSandbox`` (same name, same judge, same cgroups, same result) except for how
  the subject starts: when its runtime (``python``, ``torch``, ``tensorflow``: from the job's
  ``subject.json``) is in the pool's runtimes, a template that already imported the framework forks a child
  that enters the **same** sandbox (``entry.py``: the job's cgroups, new user/mount/pid/net/ipc/uts
  namespaces, the tree of ``local.mount_plan``, the sandbox uid with no groups and no capabilities,
  rlimits, ``no_new_privs``, the seccomp filter of ``seccomp.py``, exactly ``policy.sandbox_env()``, no inherited
  fd but stdio) before any job or learner code is read. Other runtimes start cold.
- Whenever the pool serves any runtime, the **judge** is warm too: a judge template has imported pytest and
  the runner's judge modules and, when the pool serves the job's framework, that framework (``RuntimeKey.judge``;
  else the plain ``JUDGE_KEY``; ``runner.warm.warm_judge``: nothing job-specific, no hidden test, no learner
  code). It forks a child per job that enters the judge's sandbox exactly as the cold judge (the ``judge``
  mount plan of ``ROLE_MOUNTS``, the judge uid, the judge's limits and cgroup, seccomp, its environment, no
  inherited fd but stdio) and runs ``runner.judge.main``. The hidden tests run only there.
- Both start paths apply the same ``local.RolePlan`` (stage, cgroups, ids, limits, rlimits); templates
  ``gc.freeze()`` before forking, so children never copy the template's heap by collecting it.
- ``WarmPool`` keeps up to ``size`` templates per runtime key (preloads, virtual devices, thread count),
  started on first use (or by ``prewarm``, one slot of every kind before a second of any, in the order given: the
  caller's demand order), used round-robin; a slot that is not up yet is started in the background while its turn
  goes to a live template of the same key (templates are spawned from long-lived threads: their parent-death
  signal follows the starting thread). A template that died or stops answering is replaced; a job whose template
  dies fails as a platform error (retried), never as the learner's fault.
- Memory: a template reserves its framework's estimate (``budget.cost_mb``) before it starts and is charged what
  it measures once up (``budget.measured_mb``). When a job's kind finds the budget full, the least recently used
  templates of other kinds that are idle (no job for ``EVICT_IDLE_S``, none running) are closed until it fits:
  an idle kind gives its memory back to a busier one. Prewarming never closes anything.
- ``status()`` says per kind (``RuntimeKey.label``) how many slots are warm, the jobs that found one (hits) and
  those that did not, by reason (``first use``, ``budget``, ``failed start``, ``idle``: closed after
  ``idle_s`` unused, ``evicted``: closed for a busier kind), and why a kind with no live template is cold now.
  Templates run as root outside any sandbox, never see a job directory, run no learner code, and hold no
  host environment; they die with the worker (parent-death signal) and on ``close()``.
- One pool per worker process (``shared_pool``): the in-process dispatcher's threads and a Celery worker
  process's tasks share it; the sandbox object itself is cheap and made per grading.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from worker.bank.spec import ExerciseSpec, Limits
from worker.core.errors import PlatformError
from worker.grading.boot.linux import EXIT_LAUNCH_FAILED
from worker.grading.sandbox.budget import MemoryBudget, Reaper, cost_mb, measured_mb
from worker.grading.sandbox.local import LocalSandbox, RolePlan
from worker.grading.sandbox.policy import JOB_MOUNT, RUNNER_DIR, SANDBOX_RUNNER_ROOT, hard_output_cap, sandbox_env
from worker.grading.sandbox.process import ProcessResult, supervise

log = logging.getLogger(__name__)
TEMPLATE_SCRIPT = Path(__file__).resolve().parents[1] / "boot" / "template.py"
RUNTIMES = ("python", "torch", "tensorflow")
READY_TIMEOUT_S = 180.0
SPAWN_TIMEOUT_S = 10.0
EVICT_IDLE_S = 30.0  # a template unused for this long may be closed for a kind that has a job waiting
COLD_REASONS = ("first use", "budget", "failed start", "idle", "evicted")


@dataclass(frozen=True)
class RuntimeKey:
    """What a template has prepared: a job can use it only when its ``subject.json`` asks for exactly this."""

    preload: tuple[str, ...]
    framework: str
    replicas: int
    threads: int
    role: str = "subject"
    gpus: int = 0  # real GPUs the job was given: its template's vdev.setup must have seen the same count

    @property
    def framework_runtime(self) -> str:
        """Return the runtime whose framework this key imports: ``python``, ``torch`` or ``tensorflow``."""
        for name in ("torch", "tensorflow"):
            if name in self.preload or self.framework == name:
                return name
        return "python"

    @property
    def runtime(self) -> str:
        if self.role == "judge":
            runtime = self.framework_runtime
            return "judge" if runtime == "python" else f"judge-{runtime}"
        return self.framework_runtime

    @property
    def label(self) -> str:
        """Name the kind for people (dashboard, metrics): ``torch, 2 virtual CUDA devices``, ``judge-torch``."""
        parts = [self.runtime]
        if self.role == "subject" and self.framework != "none":
            parts.append(f"{self.replicas} virtual {'CUDA devices' if self.framework == 'torch' else 'replicas'}")
        if self.threads > 1:
            parts.append(f"{self.threads} threads")
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}")
        extra = [p for p in self.preload if p != self.framework_runtime]
        if extra:
            parts.append("+" + "+".join(extra))
        return ", ".join(parts)

    def judge(self) -> RuntimeKey:
        """Return the judge's key for jobs of this subject key: the same framework import, no devices."""
        return RuntimeKey(preload=self.preload, framework="none", replicas=1, threads=self.threads, role="judge")

    @staticmethod
    def template_threads(preload: Iterable[str], cpus: float) -> int:
        """Return the thread count a template is made for: the job's CPU share for TensorFlow, else 1.

        A torch template serves every CPU share (its child sets the job's count: ``boot/template.py``), and so
        does a plain one; TensorFlow fixes its thread pools when its runtime starts, so its kinds keep the count.
        """
        return max(1, int(cpus)) if "tensorflow" in preload else 1

    @classmethod
    def of_spec(cls, spec: ExerciseSpec, gpus: int = 0) -> RuntimeKey:
        """Return the key the jobs of ``spec`` will ask for (what ``of_job`` reads from their ``subject.json``).

        ``gpus``: the GPUs each job gets on this worker (``GPULAB_GPUS_PER_JOB`` on a GPU node, else 0).
        """
        return cls(
            preload=tuple(spec.preload),
            framework=spec.vdev_framework,
            # Without virtual devices the replica count changes nothing in a template: one key for all.
            replicas=spec.replicas if spec.vdev_framework != "none" else 1,
            threads=cls.template_threads(spec.preload, spec.limits.cpus),
            gpus=gpus,
        )

    @classmethod
    def of_job(cls, job_dir: Path, limits: Limits) -> RuntimeKey:
        config = json.loads((job_dir / "subject.json").read_text(encoding="utf-8"))
        devices = config.get("devices") or {}
        framework = str(devices.get("framework", "none"))
        preload = tuple(str(p) for p in config.get("preload", []))
        return cls(
            preload=preload,
            framework=framework,
            replicas=int(devices.get("replicas", 1)) if framework != "none" else 1,
            threads=cls.template_threads(preload, limits.cpus),
            gpus=int(devices.get("gpus", 0)),
        )


# The plain judge template: pytest and the runner's judge modules (framework judges add the framework's import).
JUDGE_KEY = RuntimeKey(preload=(), framework="none", replicas=1, threads=1, role="judge")


def parse_runtimes(value: str) -> tuple[str, ...]:
    """``GPULAB_WARM_POOLS``: empty/``off`` for none, ``auto``/``all`` for every runtime, or a comma list."""
    value = value.strip().lower()
    if value in ("", "off", "none", "0"):
        return ()
    if value in ("all", "auto"):
        return RUNTIMES
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown:
        raise ValueError(f"unknown warm pool runtime(s) {unknown}; use {', '.join(RUNTIMES)} or all")
    return names


@dataclass
class _Remote:
    """The forked subject as ``process.supervise`` sees it: pipes to read, an exit status the template reports."""

    stdout: IO[bytes] | None
    stderr: IO[bytes] | None
    done: threading.Event = field(default_factory=threading.Event)
    code: int | None = None
    pid: int | None = None

    def finish(self, code: int | None) -> None:
        if not self.done.is_set():
            self.code = code
            self.done.set()

    def poll(self) -> int | None:
        return self.code if self.done.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self.done.wait(timeout):
            raise subprocess.TimeoutExpired("warm subject", timeout or 0.0)
        return self.code if self.code is not None else -9


class Template:
    """One warm template process and the thread that reads its events."""

    def __init__(self, key: RuntimeKey) -> None:
        self.key = key
        self.cost_mb = cost_mb(key.framework_runtime)
        self.last_used = time.monotonic()
        self.released = False  # its memory went back to the pool's budget
        self._lock = threading.Lock()
        self._jobs: dict[str, _Remote] = {}
        self.dead = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        config = {
            "fd": theirs.fileno(),
            "runner_parent": str(RUNNER_DIR.parent),
            "runner_root": SANDBOX_RUNNER_ROOT,
            "role": key.role,
            "preload": list(key.preload),
            "devices": {"framework": key.framework, "replicas": key.replicas, "gpus": key.gpus},
        }
        env = sandbox_env(Limits(cpus=float(key.threads)), SANDBOX_RUNNER_ROOT)

        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(TEMPLATE_SCRIPT), json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                cwd="/",
                pass_fds=(theirs.fileno(),),
                close_fds=True,
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.settimeout(READY_TIMEOUT_S)
        try:
            ready = json.loads(ours.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as exc:
            self.close()
            raise PlatformError(f"warm template {key.runtime} did not start: {exc}") from exc
        if ready.get("event") != "ready":
            self.close()
            raise PlatformError(f"warm template {key.runtime} did not start (exit {self.proc.poll()})")
        ours.settimeout(None)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, name=f"gpulab-template-{key.runtime}", daemon=True)
        self._reader.start()

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def busy(self) -> bool:
        """Say whether a job forked from this template is still running."""
        with self._lock:
            return bool(self._jobs)

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            try:
                event = json.loads(data)
            except ValueError:
                continue
            with self._lock:
                remote = self._jobs.get(str(event.get("id")))
                if remote is None:
                    continue
                if event.get("event") == "started":
                    remote.pid = int(event["pid"])
                elif event.get("event") in ("exited", "error"):
                    self._jobs.pop(str(event.get("id")), None)
                    remote.finish(int(event.get("code", EXIT_LAUNCH_FAILED)))
        # The template is gone: its children die with it (parent-death signals); nothing will report them.
        with self._lock:
            self.dead = True
            for remote in self._jobs.values():
                remote.finish(None)
            self._jobs.clear()

    def spawn(self, spec: dict[str, Any], stdout_w: int, stderr_w: int, remote: _Remote) -> None:
        job = uuid.uuid4().hex
        with self._lock:
            if self.dead:
                raise PlatformError("the warm template died")
            self._jobs[job] = remote
        message = json.dumps({"op": "spawn", "id": job, "spec": spec}).encode()
        try:
            socket.send_fds(self._sock, [message], [stdout_w, stderr_w])
        except OSError as exc:
            with self._lock:
                self._jobs.pop(job, None)
            self.dead = True
            raise PlatformError(f"the warm template did not take the job: {exc}") from exc

    def close(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError):
            self._sock.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class OverBudget(Exception):
    """Starting a template would pass the memory budget: the job runs cold."""


@dataclass
class KindStats:
    """What jobs of one template kind found: a warm template (hits) or none (misses, by reason)."""

    hits: int = 0
    misses: dict[str, int] = field(default_factory=dict)
    cold: str = "first use"  # why the kind has no live template now ("" once one is up)
    last_demand: float = 0.0  # when a job last asked for the kind (monotonic)

    def missed(self, reason: str) -> None:
        self.misses[reason] = self.misses.get(reason, 0) + 1


class WarmPool:
    """Templates per runtime key, started on first use, replaced when they die, closed when idle."""

    def __init__(
        self, runtimes: Iterable[str], size: int = 1, *, budget: MemoryBudget | None = None, idle_s: float = 0.0
    ) -> None:
        self.runtimes = tuple(runtimes)
        self.size = max(1, size)
        self.budget = budget
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._templates: dict[RuntimeKey, list[Template | None]] = {}
        self._next: dict[RuntimeKey, int] = {}
        self._starting: dict[tuple[RuntimeKey, int], threading.Lock] = {}
        # Templates are started from these long-lived threads only: a template's parent-death signal fires when
        # the *thread* that started it ends, so a short-lived thread (a background start) would take it along.
        self._spawner = ThreadPoolExecutor(max_workers=len(RUNTIMES), thread_name_prefix="gpulab-template-spawn")
        self.started = 0  # templates started so far (replacements included)
        self.reaped = 0  # templates closed for being idle
        self.evicted = 0  # templates closed for another kind's job
        self._stats: dict[RuntimeKey, KindStats] = {}
        self._reaper = Reaper(self.reap_idle, idle_s, name="gpulab-template-reaper") if idle_s > 0 else None

    def serves(self, key: RuntimeKey) -> bool:
        if key.role == "judge" and key.framework_runtime == "python":
            return bool(self.runtimes)  # any warm pool warms the plain judge too (it serves every runtime)
        return key.framework_runtime in self.runtimes

    def judge_key_for(self, subject: RuntimeKey) -> RuntimeKey | None:
        """Return the warm judge key for jobs whose subject key is ``subject`` (None: this pool warms nothing)."""
        if not self.runtimes:
            return None
        key = subject.judge()
        return key if self.serves(key) else JUDGE_KEY

    def keys_for(self, specs: Iterable[ExerciseSpec], gpus: int = 0) -> list[RuntimeKey]:
        """Return the distinct template keys (subjects and judges) that grading ``specs`` with ``gpus`` would start."""
        keys: dict[RuntimeKey, None] = {}
        for spec in specs:
            if spec.kind != "code":
                continue
            subject = RuntimeKey.of_spec(spec, gpus)
            if self.serves(subject):
                keys[subject] = None
            judge = self.judge_key_for(subject)
            if judge is not None:
                keys[judge] = None
        return list(keys)

    def acquire(self, key: RuntimeKey) -> Template | None:
        """Return a live template for ``key`` (round-robin), starting or replacing it when needed.

        When this turn's slot is not up but another slot of the key is, the job takes the live one and the
        slot comes up in the background: only the very first job of a key waits for a framework import.
        None: no template of ``key`` is up and the memory budget has no room for one (the job runs cold).
        """
        now = time.monotonic()
        with self._lock:
            slots = self._templates.setdefault(key, [None] * self.size)
            index = self._next.get(key, 0) % self.size
            self._next[key] = index + 1
            live = [t for t in slots if t is not None and t.alive()]
            stats = self._stats.setdefault(key, KindStats())
            stats.last_demand = now
            if live:
                stats.hits += 1
            cold = stats.cold
        template = slots[index]
        if template is not None and template.alive():
            template.last_used = now
            return template
        if live:
            self._fill_in_background(key, index)
            live[0].last_used = now
            return live[0]
        try:
            template = self._fill(key, index, evict=True)
        except OverBudget:
            with self._lock:
                stats.missed("budget")
                stats.cold = "budget"
            return None
        except PlatformError:
            with self._lock:
                stats.missed("failed start")
                stats.cold = "failed start"
            raise
        with self._lock:
            stats.missed(cold or "first use")  # this job waited for its template's framework import
        return template

    def _slot_lock(self, key: RuntimeKey, index: int) -> threading.Lock:
        with self._lock:
            self._templates.setdefault(key, [None] * self.size)
            return self._starting.setdefault((key, index), threading.Lock())

    def _start(self, key: RuntimeKey, index: int, *, evict: bool = False) -> Template:
        """Return slot ``index`` of ``key`` alive, starting or replacing its template (the slot lock is held).

        ``evict``: a job waits for this kind, so idle templates of other kinds may be closed to make room.
        """
        slots = self._templates[key]
        template = slots[index]
        if template is not None and template.alive():
            return template
        if template is not None:
            log.warning("warm template %s (pid %s) died; replacing it", key.runtime, template.pid)
            self._close(template)
            slots[index] = None
        cost = cost_mb(key.framework_runtime)
        fits = self.budget is None or self.budget.reserve(cost, what=f"a {key.runtime} template")
        if not fits and not (evict and self._evict_for(key, cost)):
            raise OverBudget(key.runtime)
        try:
            template = self._spawner.submit(Template, key).result()
        except BaseException:
            if self.budget is not None:
                self.budget.release(cost)
            raise
        measured = measured_mb(template.pid)
        if measured is not None:  # charge what it holds, not the estimate
            if self.budget is not None:
                self.budget.adjust(template.cost_mb, measured)
            template.cost_mb = measured
        with self._lock:
            slots[index] = template
            self.started += 1
            self._stats.setdefault(key, KindStats()).cold = ""
        return template

    def _evict_for(self, key: RuntimeKey, cost: int) -> bool:
        """Close idle templates of other kinds, least recently used first, until ``cost`` fits; say whether it did."""
        assert self.budget is not None
        while True:
            now = time.monotonic()
            with self._lock:
                idle = [
                    (template.last_used, other, index, template)
                    for other, slots in self._templates.items()
                    if other != key
                    for index, template in enumerate(slots)
                    if template is not None and now - template.last_used > EVICT_IDLE_S and not template.busy()
                ]
                if not idle:
                    return False
                _, other, index, victim = min(idle, key=lambda found: found[0])
                self._templates[other][index] = None
                self.evicted += 1
                if not any(t is not None and t.alive() for t in self._templates[other]):
                    self._stats.setdefault(other, KindStats()).cold = "evicted"
            log.info("closing an idle %s template: a %s job needs its memory", other.label, key.label)
            self._close(victim)
            if self.budget.reserve(cost, what=f"a {key.runtime} template"):
                return True

    def _fill(self, key: RuntimeKey, index: int, *, evict: bool = False) -> Template:
        with self._slot_lock(key, index):
            return self._start(key, index, evict=evict)

    def _fill_in_background(self, key: RuntimeKey, index: int) -> None:
        """Bring slot ``index`` up in a thread of its own, unless a start of it is already under way."""
        lock = self._slot_lock(key, index)
        if not lock.acquire(blocking=False):
            return

        def run() -> None:
            try:
                self._start(key, index)
            except PlatformError as exc:  # the next job whose turn it is tries again
                log.warning("warm template %s did not start in the background: %s", key.runtime, exc.message)
            except OverBudget:
                pass  # the budget said so once; the live slot serves the key
            finally:
                lock.release()

        threading.Thread(target=run, name=f"gpulab-template-{key.runtime}-start", daemon=True).start()

    def templates(self) -> list[Template]:
        with self._lock:
            return [t for slots in self._templates.values() for t in slots if t is not None]

    def prewarm(self, keys: Iterable[RuntimeKey]) -> None:
        """Start every slot of each key now, in this thread: first one per key, then the rest.

        A template that does not start is logged and skipped: the first job that needs it tries again.
        """
        keys = list(keys)
        for index in range(self.size):
            for key in keys:
                try:
                    self._fill(key, index)
                except OverBudget:
                    continue  # the budget said so once; these jobs start cold
                except PlatformError as exc:
                    log.warning("could not prewarm a %s template: %s", key.runtime, exc.message)

    def _close(self, template: Template) -> None:
        """Close ``template`` and give its memory back to the budget (once)."""
        if not template.released:
            template.released = True
            if self.budget is not None:
                self.budget.release(template.cost_mb)
        template.close()

    def reap_idle(self, now: float | None = None) -> int:
        """Close the templates no job used for ``idle_s``; return how many (their slots start again on use)."""
        if self.idle_s <= 0:
            return 0
        now = time.monotonic() if now is None else now
        idle: list[Template] = []
        with self._lock:
            for key, slots in self._templates.items():
                closed = 0
                for index, template in enumerate(slots):
                    if template is not None and now - template.last_used > self.idle_s and not template.busy():
                        idle.append(template)
                        slots[index] = None
                        closed += 1
                if closed and not any(t is not None and t.alive() for t in slots):
                    self._stats.setdefault(key, KindStats()).cold = "idle"
            self.reaped += len(idle)
        for template in idle:
            log.info("closing the %s template idle for %.0f s", template.key.runtime, now - template.last_used)
            self._close(template)
        return len(idle)

    def status(self) -> list[dict[str, Any]]:
        """Return each kind's warm slots, hits, misses by reason, memory and why it is cold (the module contract)."""
        with self._lock:
            keys = list(dict.fromkeys([*self._templates, *self._stats]))
            found = []
            for key in keys:
                live = [t for t in self._templates.get(key, []) if t is not None and t.alive()]
                stats = self._stats.get(key, KindStats())
                found.append({
                    "kind": key.label,
                    "warm": len(live),
                    "size": self.size,
                    "hits": stats.hits,
                    "misses": dict(stats.misses),
                    "memory_mb": sum(t.cost_mb for t in live),
                    "cold": "" if live else (stats.cold or "first use"),
                })  # fmt: skip
        return sorted(found, key=lambda kind: kind["kind"])

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.stop()
        with self._lock:
            templates = [t for slots in self._templates.values() for t in slots if t is not None]
            self._templates.clear()
        for template in templates:
            self._close(template)


_shared: dict[tuple[tuple[str, ...], int], WarmPool] = {}
_shared_lock = threading.Lock()


def shared_pool(
    runtimes: Iterable[str], size: int, *, budget: MemoryBudget | None = None, idle_s: float = 0.0
) -> WarmPool:
    """Return this process's pool for ``runtimes`` and ``size`` (closed at exit; the first caller sets the rest)."""
    key = (tuple(runtimes), size)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None:
            pool = _shared[key] = WarmPool(key[0], size, budget=budget, idle_s=idle_s)
            atexit.register(pool.close)
        return pool


def shared_status() -> list[dict[str, Any]]:
    """Return the ``status()`` of every pool of this process, kinds of all pools together."""
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


class WarmLocalSandbox(LocalSandbox):
    """``LocalSandbox`` whose subject is forked from a warm template (see the module contract)."""

    warm = True

    def __init__(self, *, pool: WarmPool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool = pool

    def _starter(self, plan: RolePlan) -> Callable[[float], ProcessResult]:
        key = self._template_key(plan)
        template = self.pool.acquire(key) if key is not None else None
        if template is None:  # not warmed here, or no room in the memory budget
            return super()._starter(plan)
        return self._warm_starter(template, plan)

    def _template_key(self, plan: RolePlan) -> RuntimeKey | None:
        """Return the template kind that forks ``plan.role`` for this job, or None to start it cold."""
        subject = RuntimeKey.of_job(plan.job_dir, plan.limits)
        if plan.role == "judge":
            return self.pool.judge_key_for(subject)
        return subject if self.pool.serves(subject) else None

    def _warm_starter(self, template: Template, plan: RolePlan) -> Callable[[float], ProcessResult]:
        """Describe ``plan`` (the cold path's cgroups, mount plan, ids, rlimits) for a template fork."""
        root = plan.stage / "root"
        root.mkdir(mode=0o700)
        spec = {
            "role": plan.role,
            "cgroup_procs": [str(p) for p in plan.procs],
            "plan": [list(op) for op in plan.mount_plan()],
            "root": str(root),
            "uid": plan.uid,
            "gid": plan.gid,
            "rlimits": plan.rlimits(),
            "env": plan.env(),
            "seccomp": str(plan.seccomp),
            "hostname": "gpulab",
            "chdir": JOB_MOUNT,
            "runner_root": SANDBOX_RUNNER_ROOT,
            "error_file": str(plan.error_file),
        }

        def start(timeout_s: float) -> ProcessResult:
            started = time.monotonic()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            remote = _Remote(os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0))
            try:
                template.spawn(spec, out_w, err_w, remote)
            except PlatformError:
                assert remote.stdout is not None and remote.stderr is not None
                remote.stdout.close()
                remote.stderr.close()
                raise
            finally:
                os.close(out_w)
                os.close(err_w)
            result = supervise(
                remote,
                started=started,
                timeout_s=timeout_s,
                output_bytes=plan.limits.output_bytes,
                hard_cap_bytes=hard_output_cap(plan.limits),
                kill=lambda _remote: plan.cgroups.kill(),
            )
            if plan.role == "judge" and remote.done.is_set() and remote.code is None:
                # The template died under the judge: no verdict of ours, so a platform error (retried).
                raise PlatformError("the warm judge template died during the job")
            return result

        return start
