"""Check the template path's GPU plan on a node: each job sees its own leased GPUs and no other's.

Contract: ``check_template_path(ids, per_job, sandbox_options=..., require_cuda=...)`` grades a probe once per
group of ``per_job`` GPUs through ``WarmLocalSandbox`` (the subject forked from a warm template), with every
other group held by a lease of this process for the whole job, as concurrent jobs would hold them. For each
job it records the ``/dev/nvidia<N>`` GPU nodes the probe saw, ``CUDA_VISIBLE_DEVICES`` and, with
``require_cuda``, torch's device count and a matmul on ``cuda:0``. It returns a ``Report`` whose ``problems``
name every broken promise: a job that saw a node of a GPU it did not lease, missed one it did, was handed
other GPUs than the group left free, or (``require_cuda``) counted other than ``per_job`` devices or could not
compute. ``scripts/gpu-smoke`` runs it on a real GPU node; the tests run it on stand-in nodes without CUDA.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.bank.spec import ExerciseSpec
from worker.grading.pipeline import grade
from worker.grading.sandbox.gpu_devices import Gpu, read_gpus
from worker.grading.sandbox.gpus import GpuLease, GpuSlots
from worker.grading.sandbox.warm import WarmLocalSandbox, WarmPool

PROBE = """
import json, os

def seen():
    nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    report = {"nodes": nodes, "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    if REQUIRE_CUDA:
        import torch
        report["count"] = torch.cuda.device_count()
        x = torch.ones(256, 256, device="cuda:0") if report["count"] else None
        report["matmul"] = bool(x is not None and float((x @ x)[0, 0]) == 256.0)
    return report

print("SEEN", json.dumps(seen()))
"""
TESTS = "def test_probe(submission):\n    assert submission.seen()['nodes'] is not None\n"


@dataclass
class Report:
    """What each job saw, and every problem found."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _probe_spec(require_cuda: bool) -> tuple[ExerciseSpec, str]:
    """Return the probe exercise (a torch one where CUDA is required, so its template imports torch) and its code."""
    probe = PROBE.replace("REQUIRE_CUDA", repr(require_cuda))
    framework = "torch" if require_cuda else "python"
    toml = f'title = "GPU plan"\nframework = "{framework}"\n[limits]\ntimeout_s = 120\nmemory_mb = 8192\n'
    files = {"exercise.toml": toml, "prompt.md": "p", "starter.py": "", "solution.py": probe,
             "tests/test_probe.py": TESTS}  # fmt: skip
    return ExerciseSpec.from_files("gpu-plan", files), probe


def check_template_path(
    ids: tuple[str, ...],
    per_job: int,
    *,
    sandbox_options: dict[str, Any] | None = None,
    require_cuda: bool = True,
    work_root: Path | None = None,
) -> Report:
    """Grade the probe once per GPU group with the others held; see the module contract."""
    options = dict(sandbox_options or {})
    proc_root = Path(options.get("proc_root", "/proc"))
    work = Path(work_root or tempfile.mkdtemp(prefix="gpulab-gpu-plan-"))
    slots = GpuSlots(ids, per_job, work / "locks")
    gpus = read_gpus(proc_root)
    by_id = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    spec, probe = _probe_spec(require_cuda)
    pool = WarmPool((spec.framework,), size=1)
    report = Report()
    try:
        sandbox = WarmLocalSandbox(pool=pool, gpu_slots=slots, **options)
        leases: list[GpuLease] = []
        for _ in range(len(ids) // per_job):
            leases.append(slots.acquire(0))
        for group, lease in enumerate(leases):
            expected = lease.ids
            lease.release()  # only this group is free: the job must be handed exactly it
            try:
                outcome = grade(spec, probe, sandbox=sandbox, work_root=work / f"job-{group}")
            finally:
                leases[group] = slots.acquire(30)
            _judge_job(report, expected, outcome, by_id, per_job, require_cuda)
        for lease in leases:
            lease.release()
    finally:
        pool.close()
    return report


def _judge_job(
    report: Report, expected: tuple[str, ...], outcome: Any, by_id: dict[str, Gpu], per_job: int, require_cuda: bool
) -> None:
    """Record one job's view in ``report`` and add a problem for every way it differs from its lease."""
    line = next((x for x in outcome.stdout.splitlines() if x.startswith("SEEN ")), None)
    if line is None:
        report.problems.append(f"the job for GPUs {','.join(expected)} reported nothing: {outcome.verdict.value}, "
                               f"{(outcome.stderr or outcome.stdout)[-500:]}")  # fmt: skip
        return
    seen = json.loads(line.removeprefix("SEEN "))
    report.jobs.append({"leased": list(expected), **seen})
    # Every leased id is the driver's here: device_plan refuses a job with any other id before it runs.
    uuids = [by_id[i].uuid for i in expected]
    want = sorted(f"nvidia{by_id[i].minor}" for i in expected)
    if seen["nodes"] != want:
        report.problems.append(f"the job leased GPUs {','.join(expected)} (nodes {want}) but saw {seen['nodes']}")
    if seen["visible"].split(",") != uuids:
        report.problems.append(f"the job leased GPUs {','.join(expected)} but CUDA_VISIBLE_DEVICES={seen['visible']}")
    if require_cuda and seen.get("count") != per_job:
        report.problems.append(f"the job leased {per_job} GPU(s) but torch counted {seen.get('count')}")
    if require_cuda and seen.get("count") and not seen.get("matmul"):
        report.problems.append(f"the job for GPUs {','.join(expected)} could not compute a matmul on cuda:0")
