"""Grade every torch exercise with this machine's real GPU through the grading pipeline (``scripts/gpu-check``).

Contract:
- For a bare GPU machine: a Python (3.11 or newer) with torch and pytest and nothing else of ours, no Docker,
  no bubblewrap. This module and everything it imports use only the standard library, so nothing needs
  carrying (``tests/worker/test_gpucheck.py`` runs it with every other import refused). torch is used only
  by the child processes: ``find_gpus`` asks one (the Python that will grade) what ``torch.cuda`` sees, so this
  process never starts CUDA, and grading runs the runner as a child of its own.
- It grades each torch code exercise's ``solution.py``, ``right/*.py`` and ``wrong/*.py`` with
  ``bankcheck.check_variant`` (the pipeline of every worker, ``pipeline.grade``) in the ``unsafe`` backend,
  the only one that runs here (no isolation: it says so, and every label ends in "(unsandboxed)"), giving the
  job the machine's GPUs. The runner decides what a job does with them (``runner.vdev.setup``): with fewer
  GPUs than an exercise's replicas it grades as on a CPU worker, and the output names those exercises' tests
  as not checked on the real GPU, with why.
- First it grades a probe of its own the same way: its test asserts that the job sees exactly the GPUs it was
  given and that a matmul on them is right (none, on a dry run), so "real CUDA" is shown, not assumed. The
  job's environment is the backend's (empty but ``PATH``) plus the host's variables the driver may be found by
  (``GPU_ENV``).
- It prints, per exercise, each variant's verdict (as expected or not), the device label the result carries
  and the time, then a summary line for ``docs/gpu.md``.
- ``main(argv)`` returns 2 with the reason where no GPU is found (or torch or pytest is missing), 1 when a
  verdict is not as expected, 0 otherwise. ``--cpu-dry-run`` grades without a GPU (as a CPU worker would).
- ``load_exercise`` reads a folder with ``tomllib`` alone, without the format's checks (they need pydantic,
  which such a machine lacks): the bank is checked where it is authored (``load_bank``), and the tests assert
  that both read every torch exercise the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.bank.specdata import (
    ExerciseData,
    ExpectedTest,
    Limits,
    Visibility,
    WrongFile,
    discover_test_ids,
    params_of,
    read_exercise_files,
)
from worker.grading.bankcheck import Variant, VariantCheck, check_variant, summary, variants
from worker.grading.devices import uses_real_gpus
from worker.grading.sandbox.unsafe import UnsafeSandbox

EXERCISES = Path(__file__).resolve().parents[2] / "exercises"
PROBE_TIMEOUT_S = 180.0
EXPLAIN_CHARS = 600  # of each failing test's message and of stderr, for a verdict not as expected
# Run in the Python that will grade: what it can import, and what torch.cuda sees. A small matmul proves CUDA
# works rather than only being reported.
PROBE = """
import json, sys
info = {"python": sys.version.split()[0]}
try:
    import pytest
    info["pytest"] = pytest.__version__
    import torch
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(info))
    raise SystemExit(0)
info.update(torch=torch.__version__, cuda=torch.version.cuda, gpus=[])
try:
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        x = torch.ones(256, 256, device="cuda")
        info["matmul_ok"] = bool(((x @ x) == 256).all().item())
except Exception as exc:
    info["cuda_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""
# Host variables a job needs to find the GPU driver and the devices as the host does (unsafe backend's pass_env).
GPU_ENV = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
           "NVIDIA_DRIVER_CAPABILITIES")  # fmt: skip
PROBE_CODE = """
import torch


def info():
    seen = {"count": torch.cuda.device_count() if torch.cuda.is_available() else 0, "matmul_ok": None}
    if seen["count"]:
        seen["names"] = [torch.cuda.get_device_name(i) for i in range(seen["count"])]
        x = torch.ones(64, 64, device="cuda")
        seen["matmul_ok"] = bool(((x @ x) == 64).all().item())
    print("the job sees:", seen)
    return seen
"""
PROBE_TEST = """
EXPECTED = {count}


def test_the_job_uses_the_gpus_it_was_given(submission):
    seen = submission.info()
    assert seen["count"] == EXPECTED, f"the job sees {{seen['count']}} GPUs, not {{EXPECTED}}: {{seen}}"
    assert seen["matmul_ok"] is (True if EXPECTED else None), f"a matmul on the GPU went wrong: {{seen}}"
"""
WHY_NOT_FAITHFUL = {
    "auto": "one GPU cannot show a batch split across two devices, so the runner grades it on virtual CUDA "
    "devices on the CPU, as a CPU worker does",
    "processes": "NCCL refuses two ranks on one GPU (and the learner's code picks NCCL and cuda:<rank> whenever "
    "CUDA is there), so the runner hides CUDA from the job and its ranks run DDP over gloo on the CPU",
}


class CannotRun(Exception):
    """This machine cannot run the check; the message says why (exit 2)."""


@dataclass(frozen=True)
class Machine:
    """What the grading Python found: versions and the real GPUs (empty on a CPU dry run)."""

    python: str
    torch: str
    cuda: str | None
    gpus: tuple[str, ...]

    def describe(self) -> str:
        """Return one line: the GPUs, torch and its CUDA, and the Python."""
        counted = f"{len(self.gpus)} \u00d7 {self.gpus[0]}" if self.gpus else "no GPU"
        return f"{counted} (torch {self.torch}, CUDA {self.cuda or 'none'}), Python {self.python}"


def find_gpus(python: str = sys.executable) -> tuple[Machine, str | None]:
    """Ask ``python`` what it can import and which GPUs torch sees; return them and, if it cannot grade, why."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise CannotRun(f"{python} did not answer within {PROBE_TIMEOUT_S:g} s when asked about torch.cuda") from None
    try:
        info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise CannotRun(f"{python} could not be asked about torch.cuda: {done.stderr.strip()[-800:]}") from None
    if "error" in info:
        raise CannotRun(f"{python} (Python {info['python']}) cannot grade torch exercises: {info['error']}")
    machine = Machine(info["python"], info["torch"], info["cuda"], tuple(info["gpus"]))
    if info.get("cuda_error"):
        return machine, f"torch sees a GPU but CUDA does not work: {info['cuda_error']}"
    if not machine.gpus:
        built = f"CUDA {machine.cuda}" if machine.cuda else "without CUDA"
        return machine, f"no GPU: torch.cuda.is_available() is False (torch {machine.torch} is built {built})"
    if not info.get("matmul_ok"):
        return machine, "a 256 x 256 matmul on the GPU gave a wrong result"
    return machine, None


def _as_field(field: dataclasses.Field[Any], value: Any) -> Any:
    """Give a TOML value its field's type where the format would (an integer for a float limit)."""
    return float(value) if field.type == "float" and isinstance(value, int) else value


def load_exercise(folder: Path) -> ExerciseData:
    """Read an exercise folder with the standard library alone, without the format's checks (see the contract)."""
    files = read_exercise_files(folder)
    meta = tomllib.loads(files["exercise.toml"])
    limit_fields = {f.name: f for f in dataclasses.fields(Limits)}
    limits = Limits(**{k: _as_field(limit_fields[k], v) for k, v in meta.get("limits", {}).items()})
    points = meta.get("points", {})
    kind = meta.get("kind", "code")
    tests_dir = {p[len("tests/") :]: c for p, c in files.items() if p.startswith("tests/")}
    ids = discover_test_ids(folder.name, tests_dir) if kind == "code" else []
    return ExerciseData(
        slug=folder.name,
        title=meta["title"],
        kind=kind,
        topic=meta.get("topic", "General"),
        difficulty=meta.get("difficulty", "beginner"),
        framework=meta.get("framework", "python"),
        queue=meta.get("queue", "cpu"),
        limits=limits,
        files=files,
        tests=[ExpectedTest(i, float(points.get(i, 1.0))) for i in ids],
        wrong=[
            WrongFile(w["file"], tuple(w["must_fail"]), w.get("why", "").strip(), w.get("feedback", "").strip())
            for w in meta.get("wrong", [])
        ],
        replicas=meta.get("replicas", 1),
        devices=meta.get("devices", "auto"),
        learner_process=meta.get("learner_process", "per-test"),
        test_visibility=Visibility(meta.get("default_visibility", "now"), dict(meta.get("visibility", {}))),
        params=params_of(meta.get("params", {})),
    )


def only_default(spec: ExerciseData) -> list[Variant]:
    """Return the files to grade of ``spec`` in its default variant only."""
    return variants(spec, in_params=[spec.default_params])


def torch_exercises(root: Path, only: Sequence[str] = ()) -> list[ExerciseData]:
    """Return the torch code exercises below ``root`` (those named in ``only``, when given), sorted by slug."""
    specs = [load_exercise(p.parent) for p in sorted(root.glob("*/exercise.toml"))]
    picked = [s for s in specs if s.kind == "code" and s.framework == "torch" and (not only or s.slug in only)]
    missing = sorted(set(only) - {s.slug for s in picked})
    if missing:
        raise CannotRun(f"no torch code exercise called {', '.join(missing)} in {root}")
    return picked


def probe_exercise(gpus: tuple[str, ...]) -> ExerciseData:
    """Return the probe: one torch test that the job sees ``len(gpus)`` GPUs and computes right on them.

    It declares one replica per GPU, so the runner hands it every GPU as it is (``runner.vdev.setup``).
    """
    files = {"solution.py": PROBE_CODE, "tests/test_probe.py": PROBE_TEST.format(count=len(gpus))}
    ids = discover_test_ids("gpu-probe", {"test_probe.py": files["tests/test_probe.py"]})
    return ExerciseData(
        slug="gpu-probe", title="GPU probe", kind="code", topic="", difficulty="beginner", framework="torch",
        queue="gpu", limits=Limits(timeout_s=120.0, memory_mb=4096), files=files,
        tests=[ExpectedTest(i, 1.0) for i in ids], replicas=max(1, len(gpus)),
    )  # fmt: skip


def not_faithful(spec: ExerciseData, gpus: tuple[str, ...]) -> str | None:
    """Return why ``spec`` is not graded on the real GPUs ``gpus`` (``None`` when it is, or on a dry run)."""
    if not gpus or uses_real_gpus(spec, gpus):
        return None
    have = f"{len(gpus)} GPU" + ("s" if len(gpus) > 1 else "")
    return f"it declares {spec.replicas} replicas and this machine has {have}: {WHY_NOT_FAITHFUL[spec.devices]}"


def _git_revision() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=EXERCISES.parent, capture_output=True, text=True, check=False
        )
    except OSError:
        return "?"
    return done.stdout.strip() or "?"


def _driver() -> str:
    if not shutil.which("nvidia-smi"):
        return "?"
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "?"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check",
        description="Grade every torch exercise's reference, right and wrong variants with this machine's GPU "
        "through the grading pipeline (unsafe backend); exit 2 without a GPU, 1 when a verdict is wrong.",
    )
    parser.add_argument("--cpu-dry-run", action="store_true", help="grade without a GPU, as a CPU worker would")
    parser.add_argument("--only", action="append", default=[], metavar="SLUG", help="grade only this exercise")
    parser.add_argument("--exercises", type=Path, default=EXERCISES, help="the exercise bank (default: ours)")
    parser.add_argument(
        "--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)), help="gradings run at once"
    )
    return parser


def run(args: argparse.Namespace, echo: Callable[[str], None]) -> int:
    """Run the check as ``args`` say; return the exit code."""
    started = time.monotonic()
    machine, no_gpu = find_gpus()
    if no_gpu and not args.cpu_dry_run:
        raise CannotRun(no_gpu)
    gpus = () if args.cpu_dry_run else machine.gpus
    specs = torch_exercises(args.exercises, args.only)
    echo(f"gpu-check: {machine.describe()}, {platform.machine()}")
    if args.cpu_dry_run:
        echo("CPU dry run (forced with --cpu-dry-run): the jobs get no GPU; labels and verdicts are a CPU worker's")
    echo(
        'sandbox: unsafe (no isolation: the learner\'s code runs as this user; every label says "unsandboxed"). '
        "The docker backend, the only one that hands GPUs to a job, needs Docker and the NVIDIA container toolkit "
        f"({'found: use scripts/gpu-smoke' if shutil.which('docker') else 'absent here'}); "
        "the local backend (bubblewrap) has no GPU path."
    )
    sandbox = UnsafeSandbox(pass_env=GPU_ENV)
    probe = probe_exercise(gpus)
    check = check_variant(probe, variants(probe)[0], sandbox=sandbox, gpus=gpus)
    seen = next((line for line in check.outcome.stdout.splitlines() if line.startswith("the job sees:")), "nothing")
    echo(f"probe {'ok' if check.ok else 'BAD'}: {summary(check.outcome)} [{check.outcome.device}, "
         f"{check.outcome.runtime_ms / 1000:.1f} s]; {seen}")  # fmt: skip
    _explain(check, echo)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pending = [
            # One variant each (the default): device time is short, and the variants differ in numbers, not devices.
            (spec, [(v, pool.submit(check_variant, spec, v, sandbox=sandbox, gpus=gpus)) for v in only_default(spec)])
            for spec in specs
        ]
        total = bad = 0
        for spec, futures in pending:
            bad_here = _report(spec, futures, gpus, echo)
            total += len(futures)
            bad += bad_here
    elapsed = time.monotonic() - started
    probe_state = "ok" if check.ok else "NOT as expected"
    as_expected = f"{total - bad}/{total} verdicts as expected"
    echo("")
    echo(f"summary: GPU probe {probe_state}; {len(specs)} torch exercises, {as_expected}; {elapsed:.0f} s")
    where = f"{len(gpus)} \u00d7 {gpus[0]}, driver {_driver()}" if gpus else "CPU dry run"
    echo(
        f"for docs/gpu.md: - {time.strftime('%Y-%m-%d', time.gmtime())}, {_git_revision()}, {where}, torch "
        f"{machine.torch}, Python {machine.python}, unsafe backend: GPU probe {probe_state}, {as_expected}, "
        f"{elapsed:.0f} s"
    )
    return 1 if bad or not check.ok else 0


def _report(
    spec: ExerciseData,
    futures: list[tuple[Any, Future[VariantCheck]]],
    gpus: tuple[str, ...],
    echo: Callable[[str], None],
) -> int:
    """Print one exercise's block as its gradings finish; return how many verdicts were not as expected."""
    echo("")
    echo(f"{spec.slug}: {spec.replicas} replica(s), devices \"{spec.devices}\", {len(spec.tests)} tests, "
         f"{len(futures)} gradings")  # fmt: skip
    why = not_faithful(spec, gpus)
    if why:
        tests = ", ".join(t.id.split("::")[-1] for t in spec.tests)
        echo(f"  not on the real GPU: {why}. Not checked on real CUDA: {tests}")
    labels: dict[str, None] = {}
    bad = 0
    seconds = 0.0
    width = max(len(v.label) for v, _ in futures)
    for variant, future in futures:
        check = future.result()
        labels[check.outcome.device] = None
        seconds += check.outcome.runtime_ms / 1000
        expected = "must pass" if variant.must_fail is None else "must fail"
        mark = "ok " if check.ok else "BAD"
        echo(
            f"  {mark} {variant.label:<{width}}  {expected}: {summary(check.outcome)}  "
            f"[{check.outcome.device}, {check.outcome.runtime_ms / 1000:.1f} s]"
        )
        if check.problem:
            bad += 1
        _explain(check, echo)
    state = "as expected" if not bad else f"{bad} NOT as expected"
    echo(f"  => {state}; device label: {' | '.join(labels)}; {seconds:.1f} s of grading")
    return bad


def _explain(check: VariantCheck, echo: Callable[[str], None]) -> None:
    """Print what a person needs to see why a verdict is not as expected: the tests' messages, the stderr tail."""
    if check.problem is None:
        return
    echo(f"      NOT AS EXPECTED: {check.problem}")
    for test in check.outcome.tests:
        if test.outcome.value != "passed":
            echo(f"      {test.name}: {' '.join(test.message.split())[:EXPLAIN_CHARS]}")
    if check.outcome.stderr.strip():
        echo(f"      stderr (end): {' '.join(check.outcome.stderr.split())[-EXPLAIN_CHARS:]}")


def main(argv: Sequence[str] | None = None, echo: Callable[[str], None] | None = None) -> int:
    """Run ``scripts/gpu-check``; return 0 (all as expected), 1 (a verdict is not) or 2 (cannot run here)."""
    args = _parser().parse_args(argv)
    out = echo or (lambda line: print(line, flush=True))
    try:
        return run(args, out)
    except CannotRun as exc:
        print(f"gpu-check: cannot run here: {exc}", file=sys.stderr, flush=True)
        return 2
