"""The adversarial suite's fixtures: a backend per sandbox kind, a small real exercise, and leak/leftover checks.

Contract:
- ``backend`` is parametrized over ``local``, ``local-warm`` (the same backend, subjects forked from a warm
  template of a session-wide pool), ``docker``, ``docker-warm`` (the docker backend whose every attack runs
  in a container pair started before it: ``attack`` warms the job's shape first and checks the pair was used)
  and ``grading-host`` (``local-warm`` inside one container of docker-compose.yml's grading host, with its
  privileges: ``grading_host.py``; skipped or failed like ``docker``) and ``gpu-host`` (the same with compose's
  ``worker-gpu`` privileges and two stand-in GPUs: every job leases one and gets its nodes).
  ``docker``/``docker-warm`` are skipped (with the reason) when ``worker.grading.sandbox.docker`` is missing
  or no engine answers, unless ``GPULAB_REQUIRE_DOCKER=1``: then it fails.
  ``local``/``local-warm`` are skipped off CI when the host cannot run it, and fails under ``CI=true``.
- ``attack(code, **limits)`` grades ``code`` as the learner's ``submission.py`` for ``TINY`` through
  ``worker.grading.pipeline.grade`` with the worker's environment holding ``SECRETS``, and returns an ``Attack``
  (outcome, wall time, every text the learner gets back). After each test, nothing may be left: no
  process of the sandbox users, no job cgroup, no file in the work root, no new staging folder in /tmp.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.security.grading_host import GradingHostSandbox, grading_host
from tests.worker.conftest import leftover_state
from worker.bank.spec import ExerciseSpec
from worker.core.errors import SandboxUnavailable
from worker.core.outcome import GradeOutcome
from worker.grading.pipeline import grade
from worker.grading.sandbox.base import Sandbox
from worker.grading.sandbox.local import LocalSandbox
from worker.grading.sandbox.warm import WarmLocalSandbox

CGROUP_NAME = "gpulab-security"
SANDBOX_USERS = ("gpulab-sandbox", "gpulab-judge")
MARKER = f"HIDDEN-MARKER-{uuid.uuid4().hex}"
SOLUTION_MARKER = f"SOLUTION-MARKER-{uuid.uuid4().hex}"
SECRETS = {
    "GPULAB_SECRET_KEY": f"sekret-{uuid.uuid4().hex}-key-that-must-never-leak",
    "GPULAB_DATABASE_URL": "postgresql://gpulab:S3cretPassw0rd@db/gpulab",
}
LEAK_STRINGS = (*SECRETS.values(), "S3cretPassw0rd", MARKER, SOLUTION_MARKER)
LIMITS = {"timeout_s": 3, "memory_mb": 256, "pids": 32, "output_bytes": 8192, "tmpfs_mb": 16, "file_size_mb": 8}
MARGIN_S = 1.0
SLACK_S = 3.0


def tiny_files(**limits: float) -> dict[str, str]:
    """A two-test ``add`` exercise whose hidden test and solution carry unique markers."""
    limit_lines = "".join(f"{k} = {v}\n" for k, v in {**LIMITS, **limits}.items())
    return {
        "exercise.toml": 'title = "Add"\n\n[points]\n"test_add.py::test_small" = 1\n"test_add.py::test_negative" = 2\n'
        f"\n[limits]\n{limit_lines}",
        "prompt.md": "Write `add(a, b)`.\n",
        "starter.py": "def add(a, b):\n    raise NotImplementedError\n",
        "solution.py": f"# {SOLUTION_MARKER}\ndef add(a, b):\n    return a + b\n",
        "tests/test_add.py": textwrap.dedent(
            f"""
            # {MARKER}
            def test_small(submission):
                assert submission.add(1, 2) == 3, "add(1, 2) should be 3"

            def test_negative(submission):
                assert submission.add(-1, -1) == -2, "add(-1, -1) should be -2"
            """
        ),
    }


@dataclass
class Attack:
    outcome: GradeOutcome
    wall_s: float
    limit_s: float

    @property
    def texts(self) -> list[str]:
        """Everything the learner is shown."""
        o = self.outcome
        return [o.stdout, o.stderr, o.message, *(t.message for t in o.tests)]

    def assert_contained(self, verdicts: set[str]) -> None:
        """The shared assertions: no pass, no score, an expected verdict, in time, nothing leaked."""
        o = self.outcome
        assert o.verdict.value != "passed", o
        assert o.score <= 0.0, f"an attack must not score more than an honest wrong answer (0): {o}"
        assert o.verdict.value in verdicts, f"verdict {o.verdict.value}, expected one of {verdicts}: {o}"
        assert self.wall_s <= self.limit_s + MARGIN_S + SLACK_S, f"took {self.wall_s:.1f} s"
        for test in o.tests:
            # An attack that does not even import proves nothing: its own bug, not the sandbox, stopped it.
            assert "syntax error" not in test.message and "IndentationError" not in test.message, test.message
        for text in self.texts:
            for secret in LEAK_STRINGS:
                assert secret not in text, f"{secret[:24]}... leaked to the learner: {text[:300]!r}"


def _docker_backend(tmp_path: Path, *, warm: bool = False) -> Sandbox:
    required = os.environ.get("GPULAB_REQUIRE_DOCKER") == "1"

    def unavailable(reason: str) -> None:
        if required:
            pytest.fail(f"GPULAB_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)

    if importlib.util.find_spec("worker.grading.sandbox.docker") is None:
        unavailable("worker.grading.sandbox.docker does not exist yet")
    from worker.core.config import Settings
    from worker.grading.sandbox import get_sandbox

    try:
        settings = Settings(sandbox="docker", mode="dev", data_dir=tmp_path, warm_pools="all" if warm else "")
        sandbox = get_sandbox(settings)
        sandbox.check()
    except (SandboxUnavailable, ImportError, OSError) as exc:
        unavailable(f"no Docker engine answers: {exc}")
    return sandbox


@pytest.fixture(scope="session")
def grading_host_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GradingHostSandbox]:
    """One grading-host container for the whole suite, as one deployed worker (see grading_host.py)."""
    with grading_host(tmp_path_factory.getbasetemp()) as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def gpu_host_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GradingHostSandbox]:
    """One GPU grading-host container with two stand-in GPUs, as one deployed GPU worker (grading_host.py)."""
    with grading_host(tmp_path_factory.getbasetemp(), gpu=True) as sandbox:
        yield sandbox


@pytest.fixture(params=["local", "local-warm", "docker", "docker-warm", "grading-host", "gpu-host"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    """The sandbox backend under attack."""
    if request.param in ("grading-host", "gpu-host"):
        sandbox: Sandbox = request.getfixturevalue(f"{request.param.replace('-', '_')}_backend")
        return sandbox
    if request.param in ("docker", "docker-warm"):
        return _docker_backend(tmp_path_factory.mktemp("docker-data"), warm=request.param == "docker-warm")
    for user in SANDBOX_USERS:
        try:
            pwd.getpwnam(user)
        except KeyError:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true but user {user} is missing (scripts/setup creates it)")
            pytest.skip(f"user {user} is missing (scripts/setup creates it)")
    # Our own staging root (the sandbox users must reach it, so not below pytest's 0700 folders).
    stage_root = Path(tempfile.mkdtemp(prefix="gpulab-security-stage-"))
    stage_root.chmod(0o711)
    request.addfinalizer(lambda: shutil.rmtree(stage_root, ignore_errors=True))
    local: LocalSandbox
    if request.param == "local-warm":
        pool = request.getfixturevalue("warm_pool")
        local = WarmLocalSandbox(pool=pool, cgroup_name=CGROUP_NAME, timeout_margin_s=MARGIN_S, stage_root=stage_root)
    else:
        local = LocalSandbox(cgroup_name=CGROUP_NAME, timeout_margin_s=MARGIN_S, stage_root=stage_root)
    try:
        local.check()
    except SandboxUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the local sandbox cannot run: {exc}")
        pytest.skip(f"local sandbox unavailable here: {exc}")
    return local


def _warm_up(backend: Sandbox, spec: ExerciseSpec) -> None:
    """Have the warm docker backend make a pair for ``spec``'s jobs and wait until it is ready."""
    from worker.grading.sandbox.docker_warm import Shape, WarmDockerSandbox

    assert isinstance(backend, WarmDockerSandbox)
    backend.pool.wait_ready(Shape.of_spec(backend.image, spec))


def _live_processes() -> list[str]:
    """Live processes of the sandbox users that belong to this suite's cgroups (other suites may run too)."""
    live: list[str] = []
    for user in SANDBOX_USERS:
        with contextlib.suppress(KeyError):
            for entry in leftover_state(pwd.getpwnam(user).pw_uid)[1]:
                with contextlib.suppress(OSError):
                    if CGROUP_NAME in Path(f"/proc/{entry.split()[0]}/cgroup").read_text():
                        live.append(entry)
    return live


def _job_cgroups() -> list[str]:
    root = Path("/sys/fs/cgroup")
    return [str(p) for pattern in (f"*/{CGROUP_NAME}/*", f"{CGROUP_NAME}/*") for p in root.glob(pattern) if p.is_dir()]


@pytest.fixture
def work_root(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root


@pytest.fixture
def attack(backend: Sandbox, work_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Attack]]:
    """Return ``attack(code, **limits)``; check afterwards that the run left nothing behind."""
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)

    def run(code: str, **limits: float) -> Attack:
        spec = ExerciseSpec.from_files("tiny-add", tiny_files(**limits))
        pool = getattr(backend, "pool", None) if backend.name == "docker" else None
        served = pool.served if pool is not None else 0
        if pool is not None:  # docker-warm: a pair of this job's shape must be ready, and take the job
            _warm_up(backend, spec)
        started = time.monotonic()
        outcome = grade(spec, textwrap.dedent(code), sandbox=backend, work_root=work_root)
        if pool is not None:
            assert pool.served == served + 1, "the attack did not run in a warm pair"
        return Attack(outcome, time.monotonic() - started, spec.limits.timeout_s)

    yield run
    if backend.name == "local":
        deadline = time.monotonic() + 2
        while (_live_processes() or _job_cgroups()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _live_processes() == [], "processes of the sandbox users outlived the run"
        assert _job_cgroups() == [], "job cgroups were left behind"
    if isinstance(backend, GradingHostSandbox):  # the same checks, inside its container
        deadline = time.monotonic() + 2
        left = backend.leftovers()
        while any(left.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
            left = backend.leftovers()
        assert left == {"processes": [], "cgroups": [], "stages": []}, f"left in the grading host: {left}"
    assert list(work_root.iterdir()) == [], "the job directory must be deleted"
    stage_root = getattr(backend, "stage_root", None)
    if stage_root is not None:
        assert list(stage_root.iterdir()) == [], "a staging folder was left behind"


@pytest.fixture(scope="package", autouse=True)
def close_warm_containers() -> Iterator[None]:
    """Remove the docker-warm backend's waiting pairs once the suite is done: other suites count containers."""
    yield
    if importlib.util.find_spec("docker") is not None:
        from worker.grading.sandbox.docker_warm import close_shared

        close_shared()


@pytest.fixture(scope="session", autouse=True)
def remove_parent_cgroups() -> Iterator[None]:
    yield
    root = Path("/sys/fs/cgroup")
    for parent in [*root.glob(f"*/{CGROUP_NAME}"), root / CGROUP_NAME]:
        with contextlib.suppress(OSError):
            parent.rmdir()
