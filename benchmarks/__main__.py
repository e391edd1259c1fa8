"""gpulab benchmarks: ``.venv/bin/python -m benchmarks [--quick] [--out docs/benchmarks.json]`` (root, Linux).

One run, one machine: starts a real ``gpulab serve`` on SQLite (in-process dispatcher, local sandbox) once
cold (``GPULAB_WARM_POOLS=off``) and once warm (``all``) (and, with ``--only docker``, once on the docker
backend with fresh containers; with ``--only deploy,deploy-cold``, the deployment path of
``benchmarks/deployment.py``: PostgreSQL, Redis, a Celery worker on the docker backend with warm pairs or
fresh containers, and ``gpulab serve --workers 2``), and measures through the HTTP API

- submit->verdict latency p50/p95 per exercise (plain Python, torch, TensorFlow), one submission at a time,
  from the POST to the verdict event on the submission's event stream (what the browser waits for);
- sustained gradings per second (and per core) with a queue kept full;
- peak memory per job (cgroup v1 ``memory.max_usage_in_bytes`` of each subject group, sampled);
- API latency p99 with 100 concurrent simulated learners browsing and submitting (loopback, closed loop),
  with a stress think time (0.05-0.3 s) and a paced one (1-5 s);
- a burst of submissions: all accepted, none lost, started in submission order (``started_at``, read from
  the database; the property is defined in ``tests/worker/test_burst.py``);
- on the deployment path, a deadline burst: 300 torch submissions spread over a minute, each one's
  submit->verdict read from the database, none lost;

then grades the same plain-Python exercise with Otter-Grader (``otter run``, in ``benchmarks/.venv-otter``,
installed from PyPI on first use, with ipykernel and matplotlib) as a peer. Results go to JSON;
``benchmarks/report.py`` (run in that venv) writes the plot next to it.

The bank: each server grades a private copy of the bank as shipped (``--bank whole``, the default: every exercise
is published, so warm grading holds or fails as it would at a course's deadline), or of the three measured
exercises only (``--bank three``, the earlier runs' set-up). With the whole bank, ``--throughput mixed`` fills the
queue with every code exercise's solution in turn (the bank's proportions of frameworks and job shapes), the
deadline phase sends a mixed burst besides the torch-only one, and each burst reports the share of template (or
pair) requests that found a warm one (``warm_hit_share``, from the workers' beats). Every run also times a cold
``import torch`` and ``import tensorflow`` on this machine (``cold_import``), so latencies can be read as a
fraction of the import they save; the latency phase also times one cold ``import torch`` before each torch sample
and reports that p50 and the share beside the torch latencies (``share_of_cold_import``). ``docker-warm`` is
``gpulab serve`` on the docker backend with warm pairs.
Other load on the machine distorts every number: run it when the machine is quiet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import EMAIL, GPULAB, PASSWORD, REPO, Served, copy_bank, pct

CGROUP = "gpulab-bench"


PHASES = ("latency", "throughput", "api", "api_paced", "burst", "deadline")


def exercises() -> dict[str, str]:
    return {"python": "python-split-batch", "torch": "torch-unwrap-state-dict", "tensorflow": "tf-mirrored-scope"}


# Also timed one at a time: a two-rank torch exercise with virtual CUDA devices, the kind issue 33 measured.
LATENCY_EXTRA = {"torch-dp": "torch-dataparallel"}
THROUGHPUT_KINDS = (*exercises(), "mixed")


def import_once(module: str) -> float:
    """Return the seconds a fresh interpreter here takes to ``import module`` (a cold import)."""
    python = REPO / ".venv" / "bin" / "python"
    started = time.monotonic()
    subprocess.run([str(python), "-c", f"import {module}"], check=True, capture_output=True)
    return time.monotonic() - started


def cold_import(runs: int) -> dict[str, float]:
    """Return the p50 seconds of a cold ``import torch`` and ``import tensorflow`` in a fresh interpreter here."""
    return {f"{m}_p50_s": pct([import_once(m) for _ in range(runs)], 50) for m in ("torch", "tensorflow")}


# The torch latencies are read as a share of a cold ``import torch``: one is timed before each of their samples,
# so a machine whose speed drifts during the run (a shared VM's does) moves both sides of the ratio alike.
INTERLEAVED_IMPORT = {"torch": "torch", "torch-dp": "torch"}
# Before each of those imports: the previous grading's tail (processes exiting, cgroups removed, the worker's beat)
# would otherwise slow the import and flatter the ratio.
SETTLE_S = 1.0


def machine() -> dict[str, Any]:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    mem_kb = int(
        next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
    )
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg()}  # fmt: skip


class PeakSampler:
    """Sample ``memory.max_usage_in_bytes`` of every subject group while they exist; keep each group's peak."""

    def __init__(self) -> None:
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        root = Path("/sys/fs/cgroup/memory") / CGROUP
        while not self._stop.is_set():
            for group in root.glob("*-subject"):
                try:
                    value = int((group / "memory.max_usage_in_bytes").read_text())
                except (OSError, ValueError):
                    continue
                self.peaks[group.name] = max(value, self.peaks.get(group.name, 0))
            time.sleep(0.01)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class LoadSampler:
    """Sample the 1-minute load average every few seconds while the benchmark runs (other users' load too)."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self._every)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        values = self.samples or [os.getloadavg()[0]]
        return {"min": min(values), "mean": sum(values) / len(values), "max": max(values), "samples": len(values)}


class Server(Served):
    """A real ``gpulab serve`` on SQLite in a temporary data dir, with its own copy of the exercises it grades.

    ``benchmarks.deployment.Deployment`` is the same for the deployment path (PostgreSQL, Redis, Celery).

    The copy keeps the benchmark independent of the rest of the bank: ``exercises sync`` refuses the whole
    bank when one exercise is half-written, which would leave nothing to submit to.
    """

    def __init__(self, warm: bool, workers: int, sandbox: str = "local", *, whole_bank: bool = True) -> None:
        self.data = Path(tempfile.mkdtemp(prefix="gpulab-bench-"))
        self.workers = workers
        self.warm = warm
        self.sandbox = sandbox
        slugs = None if whole_bank else [*exercises().values(), *LATENCY_EXTRA.values()]
        bank = copy_bank(self.data / "exercises", slugs)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.env = {**os.environ, "GPULAB_MODE": "dev", "GPULAB_DATA_DIR": str(self.data),
                    "GPULAB_CGROUP_NAME": CGROUP, "GPULAB_GRADING_WORKERS": str(workers),
                    "GPULAB_WARM_POOLS": "all" if warm else "off", "GPULAB_BROKER_URL": "",
                    "GPULAB_EXERCISES_DIR": str(bank), "GPULAB_SANDBOX": sandbox}  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    tiebreak = "rowid"  # the submissions' second sort key

    def gpulab(self, *args: str, stdin: str | None = None) -> None:
        subprocess.run([str(GPULAB), *args], env=self.env, input=stdin, text=True, check=True, capture_output=True)

    def __enter__(self) -> Server:
        self.gpulab("db", "upgrade")
        self.gpulab("exercises", "sync")
        self.gpulab("user", "add", EMAIL, "--role", "learner", "--password-stdin", stdin=PASSWORD + "\n")
        log = open(self.data / "serve.log", "wb")
        self.proc = subprocess.Popen([str(GPULAB), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                                     env=self.env, stdout=log, stderr=log)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/api/exercises", timeout=1).status_code in (200, 401):
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError("gpulab serve did not start: " + (self.data / "serve.log").read_text()[-2000:])
        if self.warm:
            # The server starts its warm templates in the background (app/jobs/prewarm.py): measuring while
            # frameworks import on the same cores would charge that one-off start-up to the first samples.
            deadline = time.monotonic() + 600
            while "prewarmed" not in (self.data / "serve.log").read_text(errors="replace"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the warm templates did not come up within 600 s")
                time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.data / "gpulab.db", timeout=30)


def solution(slug: str) -> str:
    return (REPO / "exercises" / slug / "solution.py").read_text()


def submit(client: httpx.Client, slug: str, code: str) -> str:
    response = client.post(f"/api/exercises/{slug}/submissions", json={"code": code})
    response.raise_for_status()
    return str(response.json()["id"])


def wait_graded(
    client: httpx.Client, ids: list[str], timeout_s: float = 900, poll_s: float = 0.02
) -> dict[str, dict[str, Any]]:
    """Poll the oldest unsettled submission (they settle roughly in order) until all settled; one GET per tick.

    Polling every id every few ms would itself load the server that is being measured.
    """
    done: dict[str, dict[str, Any]] = {}
    pending = list(ids)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        while pending:
            body = client.get(f"/api/submissions/{pending[0]}").json()
            if body["status"] in ("queued", "running"):
                break
            body["seen_at"] = time.monotonic()
            done[pending.pop(0)] = body
        if pending:
            time.sleep(poll_s)
    return done


def wait_streamed(client: httpx.Client, sid: str) -> dict[str, Any]:
    """Follow the submission's event stream, as the browser does, until the verdict arrives."""
    with client.stream("GET", f"/api/submissions/{sid}/events") as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: "):
                body: dict[str, Any] = json.loads(line[len("data: ") :])
                if body["status"] not in ("queued", "running"):
                    body["seen_at"] = time.monotonic()
                    return body
    raise RuntimeError(f"the event stream of {sid} ended before its verdict")


def latency(server: Any, runs: int, pause_s: float = 0.0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with PeakSampler() as sampler:
        client = server.client()
        for runtime, slug in {**exercises(), **LATENCY_EXTRA}.items():
            code = solution(slug)
            wait_streamed(client, submit(client, slug, code))  # first use: a warm pool starts its templates here
            times, verdicts, imports = [], [], []
            module = INTERLEAVED_IMPORT.get(runtime)
            for _ in range(runs):
                time.sleep(pause_s)  # the deployment path: let the worker's pairs refill between submissions
                if module:
                    time.sleep(SETTLE_S)
                    imports.append(import_once(module))
                started = time.monotonic()
                sid = submit(client, slug, code)
                body = wait_streamed(client, sid)
                times.append(body["seen_at"] - started)
                verdicts.append(body["verdict"])
            out[runtime] = {"slug": slug, "runs": runs, "p50_s": pct(times, 50), "p95_s": pct(times, 95),
                            "pause_s": pause_s, "verdicts": sorted(set(verdicts))}  # fmt: skip
            if imports:
                out[runtime][f"cold_import_{module}_p50_s"] = pct(imports, 50)
                out[runtime]["share_of_cold_import"] = pct(times, 50) / pct(imports, 50)
    peaks = sorted(sampler.peaks.values())
    out["peak_memory_mb_per_job"] = {"median": pct(peaks, 50) / 2**20 if peaks else None,
                                     "max": max(peaks) / 2**20 if peaks else None, "jobs": len(peaks)}  # fmt: skip
    return out


def throughput(server: Any, slug: str, jobs: int) -> dict[str, Any]:
    """Fill the queue with ``jobs`` of ``slug``'s solution (``mixed``: every code exercise's in turn); time them."""
    with PeakSampler() as sampler:
        client = server.client()
        mix = server.bank_mix() if slug == "mixed" else [(slug, solution(slug))]
        started = time.monotonic()
        ids = [submit(client, *mix[i % len(mix)]) for i in range(jobs)]
        done = wait_graded(client, ids)
        elapsed = max(b["seen_at"] for b in done.values()) - started
    cores = os.cpu_count() or 1
    peaks = sorted(sampler.peaks.values())
    return {"slug": slug, "exercises": len(mix), "jobs": jobs, "graded": len(done), "seconds": elapsed,
            "per_s": len(done) / elapsed,
            "per_s_per_core": len(done) / elapsed / cores,
            "peak_memory_mb_median": pct(peaks, 50) / 2**20 if peaks else None}  # fmt: skip


def burst(server: Any, slug: str, count: int) -> dict[str, Any]:
    client = server.client()
    code = solution(slug)
    accepted = []
    started = time.monotonic()
    for _ in range(count):
        response = client.post(f"/api/exercises/{slug}/submissions", json={"code": code})
        if response.status_code == 202:
            accepted.append(response.json()["id"])
    accept_s = time.monotonic() - started
    done = wait_graded(client, accepted, timeout_s=1800)
    graded_s = time.monotonic() - started
    # Submission order per queue (tests/worker/test_burst.py defines it): started_at is stamped when a worker
    # claims the row, so a later submission may start before an earlier one only while both are in flight
    # (W workers): the largest j - i with j started before i must stay below W.
    with server.db() as db:
        order = "rowid" if server.tiebreak == "rowid" else "id"  # one of two names, never input
        every = db.execute(
            f"SELECT id, created_at, started_at, status, attempts FROM submissions ORDER BY created_at, {order}"  # noqa: S608
        )
        wanted = set(accepted)
        rows = [r for r in every.fetchall() if r[0] in wanted]
    starts = [str(r[2]) if r[2] else "" for r in rows]
    displacement = max((j - i for i in range(len(starts)) for j in range(i + 1, len(starts))
                        if starts[j] < starts[i]), default=0)  # fmt: skip
    return {"submitted": count, "accepted": len(accepted), "graded": len(done), "lost": len(accepted) - len(done),
            "accept_seconds": accept_s, "graded_seconds": graded_s, "workers": server.workers,
            "max_start_displacement": displacement, "in_order": displacement < server.workers,
            "attempts": sorted({r[4] for r in rows}), "statuses": sorted({r[3] for r in rows}),
            "verdicts": sorted({b["verdict"] for b in done.values()})}  # fmt: skip


async def _learner(
    client: httpx.AsyncClient,
    slug: str,
    code: str,
    until: float,
    samples: list[float],
    errors: list[str],
    think_s: tuple[float, float],
) -> None:
    rng = random.Random()  # noqa: S311 - think times, not secrets
    # Learners arrive spread over one think time, not all in the same millisecond: a class does not click in
    # lockstep, and a synchronized first request from every learner would measure one artificial burst.
    await asyncio.sleep(rng.uniform(0, think_s[1]))
    while time.monotonic() < until:
        choice = rng.random()
        started = time.monotonic()
        try:
            if choice < 0.05:
                response = await client.post(f"/api/exercises/{slug}/submissions", json={"code": code})
            elif choice < 0.5:
                response = await client.get("/api/exercises")
            elif choice < 0.8:
                response = await client.get(f"/api/exercises/{slug}")
            else:
                response = await client.get("/api/me/progress")
            error = str(response.status_code) if response.status_code >= 400 else ""
        except httpx.HTTPError as exc:
            error = type(exc).__name__  # a timeout counts at its full duration, and as an error
        samples.append(time.monotonic() - started)
        if error:
            errors.append(error)
        await asyncio.sleep(rng.uniform(*think_s))  # think time


async def _api_load(
    url: str, learners: int, seconds: float, think_s: tuple[float, float]
) -> tuple[list[float], list[str]]:
    samples: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=learners)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        (await client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD})).raise_for_status()
        slug = exercises()["python"]
        code = solution(slug)
        until = time.monotonic() + seconds
        await asyncio.gather(*(_learner(client, slug, code, until, samples, errors, think_s) for _ in range(learners)))
    return samples, errors


# One submission at a time on a docker path (the deployment's, and `serve` on the docker backend) comes every few
# seconds, as one learner's do: a worker's warm pairs of a shape
# (GPULAB_GRADING_WORKERS of them) refill in ~2-4 s after each job, and back-to-back submissions of the same
# exercise faster than that run in fresh containers (measured: torch p95 5.8 s without the pause).
DEPLOY_PAUSE_S = 5.0
STRESS_THINK_S = (0.05, 0.3)  # ~5 requests/s per learner: a stress test, far above what people click
PACED_THINK_S = (1.0, 5.0)  # ~0.33 requests/s per learner: still a busy class


def api_p99(server: Any, learners: int, seconds: float, think_s: tuple[float, float]) -> dict[str, Any]:
    """Closed loop: each learner waits for its answer, thinks ``think_s``, and sends the next request."""
    samples, errors = asyncio.run(_api_load(server.url, learners, seconds, think_s))
    kinds = {kind: errors.count(kind) for kind in sorted(set(errors))}
    return {"learners": learners, "seconds": seconds, "think_s": list(think_s), "requests": len(samples),
            "requests_per_s": len(samples) / seconds, "errors": len(errors), "error_kinds": kinds,
            "p50_ms": pct(samples, 50) * 1000, "p95_ms": pct(samples, 95) * 1000, "p99_ms": pct(samples, 99) * 1000,
            "max_ms": max(samples, default=float("nan")) * 1000}  # fmt: skip


TOOLS_VENV = REPO / "benchmarks" / ".venv-otter"


def tools_venv() -> Path:
    """The benchmark's own venv (Otter-Grader and matplotlib from PyPI, first use only); not the app's venv."""
    venv = TOOLS_VENV
    if not all(list(venv.glob(f"lib/python*/site-packages/{m}")) for m in ("otter", "ipykernel", "matplotlib")):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "otter-grader", "ipykernel", "matplotlib"],
                       check=True)  # fmt: skip
    return venv


def plot(results: Path, png: Path) -> None:
    """Draw the latency/throughput figure with ``benchmarks/report.py`` in the tools venv."""
    try:
        venv = tools_venv()
        subprocess.run([str(venv / "bin" / "python"), str(REPO / "benchmarks" / "report.py"), str(results), str(png)],
                       check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"no plot: {exc}", file=sys.stderr)


def otter(runs: int) -> dict[str, Any]:
    venv = tools_venv()
    work = Path(tempfile.mkdtemp(prefix="gpulab-otter-"))
    try:
        shutil.copytree(REPO / "benchmarks" / "otter", work / "assignment")
        (work / "submission").mkdir()
        (work / "submission" / "split_batch.py").write_text(solution("python-split-batch"))
        (work / "out").mkdir()
        zipped = str(work / "autograder.zip")
        made = subprocess.run([str(venv / "bin" / "otter"), "generate", "-t", "tests", "-o", zipped],
                              cwd=work / "assignment", capture_output=True, text=True)  # fmt: skip
        if made.returncode != 0:
            return {"error": "otter generate: " + made.stderr[-1500:]}
        times = []
        for _ in range(runs):
            started = time.monotonic()
            result = subprocess.run([str(venv / "bin" / "otter"), "run", "-a", str(work / "autograder.zip"),
                                     "-o", str(work / "out"), str(work / "submission" / "split_batch.py")],
                                    capture_output=True, text=True)  # fmt: skip
            times.append(time.monotonic() - started)
            if result.returncode != 0:
                return {"error": result.stderr[-1500:]}
        out = work / "out" / "results.json"
        tests = json.loads(out.read_text()).get("tests", []) if out.exists() else []
        score = {
            "total": sum(t.get("score") or 0 for t in tests),
            "possible": sum(t.get("max_score") or 0 for t in tests),
        }
        version = subprocess.run([str(venv / "bin" / "otter"), "--version"], capture_output=True, text=True).stdout
        return {"runs": runs, "p50_s": pct(times, 50), "p95_s": pct(times, 95), "version": version.strip(),
                "score": score}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


SERVED_MODES = (
    "cold",
    "warm",
    "docker",
    "docker-warm",
    "deploy",
    "deploy-cold",
    "deploy-local",
    "compose",
    "compose-gpu",
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test of the harness)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.json")
    parser.add_argument("--only", default="cold,warm,otter",
                        help="comma list of cold, warm, docker (the docker backend: needs dockerd and the grading "
                             "image, docker/build-image), deploy, deploy-cold (PostgreSQL + Redis + a Celery "
                             "worker on docker, warm pairs or fresh containers; serve --workers 2), deploy-local "
                             "(the same with the worker on the local sandbox's warm templates), compose (the shipped "
                             "docker-compose.yml: its grading host; docker/build-images first), compose-gpu (the "
                             "same with the grading host as the GPU host over stand-in GPUs), otter; served "
                             "modes run in the order given")  # fmt: skip
    parser.add_argument(
        "--pin-api",
        action="store_true",
        help="deployment modes: the API processes get CPU 0 to themselves, everything else the rest",
    )
    parser.add_argument("--jobs", type=int, help="throughput jobs (default 30, --quick 6)")
    parser.add_argument("--throughput", default="torch",
                        help="comma list of the exercises the throughput phase fills the queue with, one after the "
                             "other: python, torch, tensorflow, mixed (every code exercise of the bank in turn; "
                             "results throughput_<kind>)")  # fmt: skip
    parser.add_argument(
        "--bank",
        choices=("whole", "three"),
        default="whole",
        help="what each server grades: the bank as shipped, or only the three measured exercises",
    )
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument("--no-plot", action="store_true", help="do not write docs/benchmarks.png")
    parser.add_argument("--runs", type=int, help="latency samples per exercise (default 15, --quick 3)")
    args = parser.parse_args(argv)
    quick = args.quick
    runs, jobs, burst_n, learners, seconds = (3, 6, 30, 100, 10.0) if quick else (15, 30, 300, 100, 30.0)
    deadline_s = 6.0 if quick else 60.0  # the deadline burst: burst_n submissions over this long
    runs = args.runs or runs
    jobs = args.jobs or jobs
    order = args.only.split(",")
    only = set(order)
    phases = set(args.phases.split(","))
    kinds = args.throughput.split(",")
    for flag, named, known in (("--only", only, {*SERVED_MODES, "otter"}), ("--phases", phases, set(PHASES)),
                               ("--throughput", set(kinds), set(THROUGHPUT_KINDS))):  # fmt: skip
        if named - known:
            parser.error(f"{flag}: unknown {', '.join(sorted(named - known))}; choose from {', '.join(sorted(known))}")
    whole = args.bank == "whole"
    if "mixed" in kinds and not whole:
        parser.error("--throughput mixed needs --bank whole")
    results: dict[str, Any] = {"machine": machine(), "quick": quick, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "bank": args.bank, "cold_import": cold_import(3 if quick else 5)}  # fmt: skip
    with LoadSampler() as load:
        # In the order --only names them: a side-by-side comparison can be rerun with the order swapped.
        for mode in [m for m in order if m in SERVED_MODES]:
            sandbox = "docker" if mode in ("docker", "docker-warm") else "local"
            cores = os.cpu_count() or 2
            if mode in ("compose", "compose-gpu"):
                from benchmarks.compose_stack import ComposeStack

                serving: Any = ComposeStack(workers=cores, gpu_host=mode == "compose-gpu")
            elif mode.startswith("deploy"):
                from benchmarks.deployment import Deployment

                slugs = None if whole else [*exercises().values(), *LATENCY_EXTRA.values()]
                serving = Deployment(warm=mode != "deploy-cold", workers=cores, slugs=slugs,
                                          sandbox="local" if mode == "deploy-local" else "docker",
                                          pin_api=args.pin_api)  # fmt: skip
            else:
                serving = Server(warm=mode in ("warm", "docker-warm"), workers=cores, sandbox=sandbox,
                                 whole_bank=whole)  # fmt: skip
            with serving as server:
                results[mode] = {}
                if "latency" in phases:
                    print(f"[{mode}] latency", flush=True)
                    pause_s = DEPLOY_PAUSE_S if mode in ("deploy", "deploy-cold", "docker-warm") else 0.0
                    results[mode]["latency"] = latency(server, runs, pause_s)
                for kind in kinds if "throughput" in phases else ():
                    print(f"[{mode}] throughput {kind}", flush=True)
                    server.drain()
                    results[mode][f"throughput_{kind}"] = throughput(server, exercises().get(kind, kind), jobs)
                for phase, think in (("api", STRESS_THINK_S), ("api_paced", PACED_THINK_S)):
                    if phase not in phases:
                        continue
                    print(f"[{mode}] {phase} p99", flush=True)
                    server.drain()
                    results[mode][phase] = api_p99(server, learners, seconds, think)
                    started = time.monotonic()
                    results[mode][phase]["left_queued"] = server.drain(timeout_s=0)
                    server.drain()
                    results[mode][phase]["drain_seconds"] = time.monotonic() - started
                if "burst" in phases:
                    print(f"[{mode}] burst", flush=True)
                    server.drain()
                    results[mode]["burst"] = burst(server, exercises()["python"], burst_n)
                if "deadline" in phases and (mode.startswith("deploy") or mode.startswith("compose")):
                    from benchmarks.deployment import deadline_burst

                    print(f"[{mode}] deadline burst: {burst_n} submissions over {deadline_s:.0f} s", flush=True)
                    server.drain()
                    slug = exercises()["torch"]
                    results[mode]["deadline_burst_torch"] = deadline_burst(
                        server, [(slug, solution(slug))], burst_n, deadline_s
                    )
                    if whole:
                        print(f"[{mode}] deadline burst, mixed over the bank", flush=True)
                        server.drain()
                        results[mode]["deadline_burst_mixed"] = deadline_burst(
                            server, server.bank_mix(), burst_n, deadline_s
                        )
            print(json.dumps(results[mode], indent=1), flush=True)
        if "otter" in only:
            print("[otter]", flush=True)
            try:
                results["otter"] = otter(3 if quick else 10)
            except (OSError, subprocess.SubprocessError) as exc:  # keep everything measured so far
                results["otter"] = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(results["otter"], indent=1), flush=True)
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["machine"]["loadavg_1min_during"] = load.summary()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    if not args.no_plot:
        plot(args.out, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
