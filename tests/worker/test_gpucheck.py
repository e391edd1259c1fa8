"""scripts/gpu-check on the CPU: its refusal without a GPU, its standard-library-only host side, its loader, and
its forced CPU dry run grading a torch exercise through the real pipeline with the verdicts expected.

On a machine with a GPU, the whole check is one command (docs/gpu.md); here the dry run covers one exercise to
keep the suite bounded on two cores. ``scripts/gpu-check --cpu-dry-run`` grades them all (62 gradings, about
four minutes on two cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worker.bank.spec import load_bank
from worker.bank.specdata import ExerciseData
from worker.core.outcome import Verdict
from worker.grading import gpucheck
from worker.grading.bankcheck import check_variant, variants
from worker.grading.gpucheck import (
    GPU_ENV,
    CannotRun,
    find_gpus,
    load_exercise,
    not_faithful,
    probe_exercise,
    torch_exercises,
)
from worker.grading.sandbox.unsafe import UnsafeSandbox

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check"
BANK = REPO / "exercises"


def gpu_check(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run the script as a person would, with this Python (the one that has torch and pytest)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout_s, check=False,
        env={**os.environ, **(env or {})}, cwd=REPO,
    )  # fmt: skip


def test_without_a_gpu_it_exits_2_and_says_why() -> None:
    # An empty CUDA_VISIBLE_DEVICES hides every GPU, so this holds on a GPU machine too.
    done = gpu_check(env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gpu-check: cannot run here: no GPU: torch.cuda.is_available() is False (torch " in done.stderr
    assert done.stdout == "", "nothing is graded without a GPU"


def test_a_python_without_torch_exits_2_and_says_why(tmp_path: Path) -> None:
    # A Python that cannot import torch: the same interpreter, isolated from the site-packages that hold it.
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    wrapper.chmod(0o755)
    with pytest.raises(CannotRun, match="cannot grade torch exercises: ModuleNotFoundError: No module named "):
        find_gpus(str(wrapper))


def test_the_host_side_imports_only_the_standard_library() -> None:
    """The GPU machine has torch and pytest and nothing else: the script itself must need neither (nor pydantic)."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        before = set(sys.modules)

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "worker":
                    raise ImportError(f"gpu-check imported {{name}}, which a bare GPU machine does not have")
                return None

        sys.meta_path.insert(0, Refuse())
        from worker.grading import gpucheck
        specs = gpucheck.torch_exercises(gpucheck.EXERCISES)
        assert specs and all(s.framework == "torch" for s in specs)
        extra = {{m.split(".")[0] for m in set(sys.modules) - before}} - set(sys.stdlib_module_names) - {{"worker"}}
        assert not extra, extra
        print("ok", len(specs))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.startswith("ok "), done.stderr


GRADED = ("files", "tests", "limits", "replicas", "devices", "learner_process", "framework", "kind", "queue", "params")


def test_its_loader_reads_every_torch_exercise_as_the_format_does() -> None:
    checked = {s.slug: s for s in load_bank(BANK) if s.framework == "torch" and s.kind == "code"}
    loaded = {s.slug: s for s in torch_exercises(BANK)}
    assert set(loaded) == set(checked) and len(loaded) >= 7
    for slug, spec in checked.items():
        mine = loaded[slug]
        for name in GRADED:
            assert getattr(mine, name) == getattr(spec, name), (slug, name)
        assert [(w.path, w.must_fail) for w in mine.wrong] == [(w.path, w.must_fail) for w in spec.wrong], slug
        assert (mine.vdev_framework, mine.preload, mine.max_score) == (
            spec.vdev_framework,
            spec.preload,
            spec.max_score,
        )
        assert isinstance(mine.limits.timeout_s, float) and mine.test_visibility == spec.test_visibility


def test_its_loader_takes_the_defaults_of_the_format(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-torch"
    (folder / "tests").mkdir(parents=True)
    (folder / "exercise.toml").write_text('title = "t"\nframework = "torch"\n[limits]\ntimeout_s = 20\n')
    for name, text in {"prompt.md": "p", "starter.py": "", "solution.py": "x = 1\n"}.items():
        (folder / name).write_text(text)
    (folder / "tests" / "test_a.py").write_text("def test_a(submission):\n    pass\n")
    spec = load_exercise(folder)
    from worker.bank.spec import load_exercise as checked_load

    assert isinstance(spec, ExerciseData)
    assert spec.limits == checked_load(folder).limits
    assert [t.id for t in spec.tests] == ["test_a.py::test_a"] and spec.replicas == 1 and spec.devices == "auto"


def test_it_names_why_two_replica_exercises_are_not_checked_on_one_gpu() -> None:
    specs = {s.slug: s for s in torch_exercises(BANK, ["torch-dataparallel", "torch-ddp-train", "torch-lr-scaling"])}
    one = ("NVIDIA H200",)
    dp = not_faithful(specs["torch-dataparallel"], one)
    ddp = not_faithful(specs["torch-ddp-train"], one)
    assert dp is not None and "2 replicas and this machine has 1 GPU" in dp and "virtual CUDA devices" in dp
    assert ddp is not None and "NCCL refuses two ranks on one GPU" in ddp and "gloo" in ddp
    assert not_faithful(specs["torch-lr-scaling"], one) is None, "one replica runs on the one GPU"
    assert not_faithful(specs["torch-ddp-train"], one * 2) is None, "two GPUs hold both ranks"
    assert not_faithful(specs["torch-ddp-train"], ()) is None, "a dry run claims no GPU at all"


def test_an_unknown_exercise_exits_2() -> None:
    done = gpu_check("--cpu-dry-run", "--only", "no-such-exercise")
    assert done.returncode == 2
    assert "no torch code exercise called no-such-exercise" in done.stderr


@pytest.mark.slow
def test_cpu_dry_run_grades_an_exercise_with_the_verdicts_expected() -> None:
    spec = next(iter(torch_exercises(BANK, ["torch-lr-scaling"])))
    expected = 1 + len(spec.right_solutions) + len(spec.wrong)
    done = gpu_check("--cpu-dry-run", "--only", spec.slug, "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "CPU dry run (forced with --cpu-dry-run)" in out and "sandbox: unsafe (no isolation" in out
    lines = [line.split() for line in out.splitlines() if line.startswith(("  ok ", "  BAD "))]
    assert len(lines) == expected and all(words[0] == "ok" for words in lines), out
    assert sum("must pass: passed" in line for line in out.splitlines()) == 1 + len(spec.right_solutions)
    assert f'{spec.slug}: 1 replica(s), devices "auto"' in out
    assert "=> as expected; device label: CPU (unsandboxed);" in out
    assert f"summary: GPU probe ok; 1 torch exercises, {expected}/{expected} verdicts as expected;" in out
    assert "probe ok: passed 1/1 [CPU (unsandboxed)" in out and "the job sees: {'count': 0, 'matmul_ok': None}" in out


@pytest.mark.slow
def test_the_probe_fails_when_the_job_does_not_see_the_gpu_it_was_given() -> None:
    """On this CPU machine a job given one GPU sees none: the probe must say so rather than pass."""
    probe = probe_exercise(("NVIDIA H200",))
    check = check_variant(probe, variants(probe)[0], sandbox=UnsafeSandbox(pass_env=GPU_ENV), gpus=("NVIDIA H200",))
    assert not check.ok and check.outcome.verdict is Verdict.failed
    assert "the job sees 0 GPUs, not 1" in check.outcome.tests[0].message
    assert check.outcome.device == "1 \u00d7 NVIDIA H200 (unsandboxed)"


@pytest.mark.slow
def test_with_one_gpu_a_two_replica_exercise_is_named_not_faithful_and_graded_as_on_a_cpu_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pretend discovery found one GPU; everything after it is real. The jobs hide CUDA and grade as on a CPU
    worker, the output says which tests one GPU cannot check, and the probe catches that no job sees a GPU."""
    one = gpucheck.Machine("3.12.3", "2.11.0+cu130", "13.0", ("NVIDIA H200",))
    monkeypatch.setattr(gpucheck, "find_gpus", lambda: (one, None))
    lines: list[str] = []
    code = gpucheck.main(["--only", "torch-dataparallel", "--jobs", "2"], echo=lines.append)
    out = "\n".join(lines)
    assert code == 1, "a CPU machine claiming a GPU must not pass: the probe sees none"
    assert "probe BAD: failed 0/1" in out and "the job sees: {'count': 0, 'matmul_ok': None}" in out
    assert "      test_probe.py::test_the_job_uses_the_gpus_it_was_given: the job sees 0 GPUs, not 1" in out
    assert "not on the real GPU: it declares 2 replicas and this machine has 1 GPU" in out
    assert "Not checked on real CUDA: test_returns_a_dataparallel, test_uses_every_gpu_and_gathers_on_cuda0" in out
    variant_lines = [line for line in lines if line.startswith(("  ok ", "  BAD "))]
    assert variant_lines and all(line.startswith("  ok ") for line in variant_lines), out
    assert all("[2 virtual CUDA devices (CPU) (unsandboxed)," in line for line in variant_lines)
    spec = next(iter(torch_exercises(BANK, ["torch-dataparallel"])))
    expected = 1 + len(spec.right_solutions) + len(spec.wrong)  # the bank grows (blind cases): counted, not fixed
    assert f"summary: GPU probe NOT as expected; 1 torch exercises, {expected}/{expected} verdicts as expected;" in out


@pytest.mark.slow
def test_a_wrong_verdict_exits_1(tmp_path: Path) -> None:
    """A bank whose reference solution is wrong: the check must say so and exit 1, not pass it."""
    folder = tmp_path / "torch-broken"
    (folder / "tests").mkdir(parents=True)
    (folder / "exercise.toml").write_text('title = "broken"\nframework = "torch"\n')
    for name, text in {"prompt.md": "p", "starter.py": "", "solution.py": "def one():\n    return 2\n"}.items():
        (folder / name).write_text(text)
    (folder / "tests" / "test_one.py").write_text("def test_one(submission):\n    assert submission.one() == 1\n")
    done = gpu_check("--cpu-dry-run", "--exercises", str(tmp_path), "--jobs", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  BAD solution.py  must pass: failed 0/1 failing test_one.py::test_one" in done.stdout
    assert "NOT AS EXPECTED: torch-broken/solution.py should pass with full marks" in done.stdout
    assert "      test_one.py::test_one: " in done.stdout, "a verdict not as expected shows the failing test's message"
    assert "summary: GPU probe ok; 1 torch exercises, 0/1 verdicts as expected;" in done.stdout
