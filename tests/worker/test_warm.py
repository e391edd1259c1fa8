"""Warm subjects and judges (``worker/grading/sandbox/warm.py``): graded like cold, same sandboxes, templates replaced.

No timing assertions: speed is measured by ``benchmarks/``, not here.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.worker.conftest import CGROUP_NAME, tiny_add_files
from worker.bank.spec import ExerciseSpec, Limits, load_exercise
from worker.core.config import Settings
from worker.grading.pipeline import grade
from worker.grading.sandbox import get_sandbox
from worker.grading.sandbox.budget import MemoryBudget, cost_mb, measured_mb
from worker.grading.sandbox.local import LocalSandbox
from worker.grading.sandbox.policy import sandbox_env
from worker.grading.sandbox.warm import (
    EVICT_IDLE_S,
    JUDGE_KEY,
    RuntimeKey,
    WarmLocalSandbox,
    WarmPool,
    parse_runtimes,
)

REPO = Path(__file__).resolve().parents[2]

INSPECT = """
import os
STATUS = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
CGROUP = open("/proc/self/cgroup").read()
print("UID", STATUS["Uid"].split()[0], "CAPEFF", STATUS["CapEff"].strip(), "CAPBND", STATUS["CapBnd"].strip(),
      "NNP", STATUS["NoNewPrivs"].strip(), "SECCOMP", STATUS["Seccomp"].strip())
print("ENV", sorted(os.environ.items()))
print("CGROUP", CGROUP.replace("\\n", " "))
print("PID", os.getpid(), "FDS", sorted(int(fd) for fd in os.listdir("/proc/self/fd")))

def add(a, b):
    return a + b
"""

# A hidden test that reports how its own process (the judge) is sandboxed, as its failure message.
JUDGE_INSPECT = """
import json, os

def test_inspect(submission):
    status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)
    fds = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        fds[fd] = target.split(":")[0] if ":" in target else target
    info = {
        "uid": status["Uid"].split(), "gid": status["Gid"].split()[0], "groups": status["Groups"].strip(),
        "caps": [status[k].strip() for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")],
        "nnp": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(), "pid": os.getpid(),
        "cgroup": open("/proc/self/cgroup").read(), "env": dict(os.environ), "fds": fds,
        "cwd": os.getcwd(), "hostname": os.uname().nodename, "job": sorted(os.listdir("/job")),
    }
    assert submission.add(1, 2) == 3
    assert False, "INFO<" + json.dumps(info) + ">INFO"
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[WarmPool]:
    pool = WarmPool(("python", "torch"), size=1)
    yield pool
    pool.close()


@pytest.fixture
def warm(local_sandbox: LocalSandbox, pool: WarmPool) -> WarmLocalSandbox:
    return WarmLocalSandbox(
        pool=pool, user=local_sandbox.user, cgroup_root=local_sandbox.cgroup_root,
        cgroup_name=local_sandbox.cgroup_name, timeout_margin_s=local_sandbox.timeout_margin_s,
    )  # fmt: skip


def _fields(stdout: str, tag: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith(tag + " "))
    return line.split()


def _ours_left(
    leftovers: Callable[[int], tuple[list[str], list[str]]], user: pwd.struct_passwd
) -> tuple[list[str], list[str]]:
    """Job cgroups and live sandbox-user processes of this test session's cgroups (other suites may run)."""
    groups, live = leftovers(user.pw_uid)
    mine = []
    for entry in live:
        with contextlib.suppress(OSError):
            if f"/{CGROUP_NAME}/" in Path(f"/proc/{entry.split()[0]}/cgroup").read_text():
                mine.append(entry)
    return groups, mine


def test_parse_runtimes() -> None:
    assert parse_runtimes("") == () and parse_runtimes("off") == ()
    assert parse_runtimes("all") == parse_runtimes("auto") == ("python", "torch", "tensorflow")
    assert parse_runtimes("torch, python") == ("torch", "python")
    with pytest.raises(ValueError, match="unknown"):
        parse_runtimes("jax")


def test_settings_pick_the_warm_backend(tmp_path: Path) -> None:
    sandbox = get_sandbox(Settings(mode="dev", data_dir=tmp_path, warm_pools="python"))
    assert isinstance(sandbox, WarmLocalSandbox) and sandbox.name == "local"
    assert sandbox.pool.size == Settings(mode="dev", data_dir=tmp_path).grading_workers  # type: ignore[arg-type]
    assert type(get_sandbox(Settings(mode="dev", data_dir=tmp_path))) is LocalSandbox  # type: ignore[arg-type]


@pytest.mark.parametrize("slug", ["python-split-batch", "torch-unwrap-state-dict"])
def test_warm_grades_like_cold(slug: str, local_sandbox: LocalSandbox, warm: WarmLocalSandbox, tmp_path: Path) -> None:
    spec = load_exercise(REPO / "exercises" / slug)
    solution = (REPO / "exercises" / slug / "solution.py").read_text()
    wrong = (REPO / "exercises" / slug / spec.wrong[0].path).read_text()
    for code in (solution, wrong):
        cold_outcome = grade(spec, code, sandbox=local_sandbox, work_root=tmp_path / "cold")
        warm_outcome = grade(spec, code, sandbox=warm, work_root=tmp_path / "warm")
        assert (warm_outcome.verdict, warm_outcome.score) == (cold_outcome.verdict, cold_outcome.score), warm_outcome
        assert [(t.name, t.outcome) for t in warm_outcome.tests] == [(t.name, t.outcome) for t in cold_outcome.tests]
        assert warm_outcome.sandbox == "local"
    assert cold_outcome.verdict.value == "failed"
    judge = "judge-torch" if spec.framework == "torch" else "judge"
    assert any(t.key.runtime == judge and t.alive() for t in warm.pool.templates()), "the judge must be warm too"


def _threads_spec(cpus: float) -> ExerciseSpec:
    files = {
        "exercise.toml": 'title = "Threads"\nframework = "torch"\n\n[limits]\ntimeout_s = 60\nmemory_mb = 1536\n'
        f"cpus = {cpus}\n",
        "prompt.md": "x\n",
        "starter.py": "import torch\n\ndef threads():\n    return torch.get_num_threads()\n",
        "solution.py": "import torch\n\ndef threads():\n    return torch.get_num_threads()\n",
        "tests/test_threads.py": f"def test_threads(submission):\n    got = submission.threads()\n"
        f"    assert got == {int(cpus)}, f'torch used {{got}} threads; the job has {int(cpus)} CPUs'\n",
    }
    return ExerciseSpec.from_files("threads", files)


def test_one_torch_template_serves_every_cpu_share_with_the_jobs_own_thread_count(
    warm: WarmLocalSandbox, tmp_path: Path
) -> None:
    one, two = _threads_spec(1), _threads_spec(2)
    assert RuntimeKey.of_spec(one) == RuntimeKey.of_spec(two)  # one kind, so one template's memory, for both
    tf = {"preload": ("tensorflow",), "framework": "none", "replicas": 1, "role": "subject"}
    assert RuntimeKey(**tf, threads=RuntimeKey.template_threads(("tensorflow",), 2)).threads == 2  # TF keeps it
    for spec in (one, two, one):
        outcome = grade(spec, spec.solution, sandbox=warm, work_root=tmp_path)
        assert outcome.verdict.value == "passed", outcome.tests
    torch_subjects = [t for t in warm.pool.templates() if t.key.runtime == "torch" and t.key.role == "subject"]
    assert len(torch_subjects) == 1 and torch_subjects[0].key.threads == 1


FRAMEWORK_JUDGE_TEST = """
import gc, sys

SEEN = {"torch": "torch" in sys.modules, "frozen": gc.get_freeze_count()}  # before this file imports anything


def test_preloaded(submission):
    assert submission.add(1, 2) == 3
    assert False, "SEEN<" + repr(SEEN) + ">SEEN"
"""


def test_framework_judge_is_preloaded_and_frozen(
    local_sandbox: LocalSandbox, warm: WarmLocalSandbox, tmp_path: Path
) -> None:
    """A torch job's warm judge forks from a template that imported torch and froze its objects; cold imports none."""
    files = tiny_add_files() | {"tests/test_add.py": FRAMEWORK_JUDGE_TEST}
    files["exercise.toml"] = 'title = "Tiny add"\nframework = "torch"\n\n[points]\n"test_add.py::test_preloaded" = 1\n'
    spec = ExerciseSpec.from_files("judge-preload", files)
    seen = {}
    for name, sandbox in (("cold", local_sandbox), ("warm", warm)):
        outcome = grade(spec, "def add(a, b):\n    return a + b\n", sandbox=sandbox, work_root=tmp_path / name)
        found = re.search(r"SEEN<(.*)>SEEN", outcome.tests[0].message)
        assert found, outcome
        seen[name] = found.group(1)
    assert seen["cold"] == "{'torch': False, 'frozen': 0}"
    torch_seen, frozen = re.fullmatch(r"\{'torch': (\w+), 'frozen': (\d+)\}", seen["warm"]).groups()  # type: ignore[union-attr]
    assert torch_seen == "True" and int(frozen) > 10_000, seen["warm"]
    keys = {t.key for t in warm.pool.templates() if t.alive()}
    assert RuntimeKey(("torch",), "none", 1, 1, role="judge") in keys


def _judge_info(outcome: object) -> dict[str, object]:
    message = outcome.tests[0].message  # type: ignore[attr-defined]
    found = re.search(r"INFO<(.*)>INFO", message, re.S)
    assert found, message
    info: dict[str, object] = json.loads(found.group(1))
    return info


def test_warm_judge_is_sandboxed_like_cold(
    local_sandbox: LocalSandbox,
    warm: WarmLocalSandbox,
    sandbox_user: pwd.struct_passwd,
    leftovers: Callable[[int], tuple[list[str], list[str]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPULAB_SECRET_KEY", "host-secret-that-must-not-leak-0123456789")
    files = tiny_add_files()
    files = {k: v for k, v in files.items() if not k.startswith("tests/")} | {"tests/test_add.py": JUDGE_INSPECT}
    files["exercise.toml"] = re.sub(
        r"\[points\][^\[]*", '[points]\n"test_add.py::test_inspect" = 1\n\n', files["exercise.toml"]
    )
    spec = ExerciseSpec.from_files("judge-inspect", files)
    solution = "def add(a, b):\n    return a + b\n"
    judge_user = pwd.getpwnam(local_sandbox.judge_user)
    infos = {}
    for name, sandbox in (("cold", local_sandbox), ("warm", warm)):
        outcome = grade(spec, solution, sandbox=sandbox, work_root=tmp_path / name)
        assert [t.outcome for t in outcome.tests] == ["failed"], outcome
        infos[name] = _judge_info(outcome)
    cold, warm_info = infos["cold"], infos["warm"]
    uid, gid = str(judge_user.pw_uid), str(judge_user.pw_gid)
    assert warm_info["uid"] == [uid] * 4 and warm_info["gid"] == gid and warm_info["groups"] == "", warm_info
    assert warm_info["caps"] == ["0000000000000000"] * 5, warm_info
    assert (warm_info["nnp"], warm_info["seccomp"]) == ("1", "2")
    assert isinstance(warm_info["pid"], int) and warm_info["pid"] < 10, "the judge must sit in its own pid namespace"
    # The job's judge cgroup (v1 controller paths or the v2 one), not the template's nor the subject's.
    cgroup = str(warm_info["cgroup"])
    assert f"/{CGROUP_NAME}/" in cgroup and "-judge" in cgroup and "-subject" not in cgroup, cgroup
    assert "host-secret" not in json.dumps(warm_info)
    # Everything the judge can observe about its sandbox is what the cold judge observes (bwrap's --chdir
    # also exports PWD, the warm path does not: the environment is exactly sandbox_env(), as for warm subjects).
    cold["env"].pop("PWD", None)  # type: ignore[union-attr]
    for field in ("uid", "gid", "groups", "caps", "nnp", "seccomp", "env", "fds", "cwd", "hostname", "job"):
        assert warm_info[field] == cold[field], (field, warm_info[field], cold[field])
    env = dict(warm_info["env"])  # type: ignore[call-overload]
    assert {k: v for k, v in env.items() if not k.startswith("PYTEST_")} == sandbox_env(spec.limits, "/opt/gpulab")
    for user in (sandbox_user, judge_user):
        assert _ours_left(leftovers, user) == ([], [])
    assert list((tmp_path / "warm").iterdir()) == []


def test_warm_subject_is_sandboxed(
    warm: WarmLocalSandbox,
    tiny_spec: Callable[..., ExerciseSpec],
    sandbox_user: pwd.struct_passwd,
    leftovers: Callable[[int], tuple[list[str], list[str]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPULAB_SECRET_KEY", "host-secret-that-must-not-leak-0123456789")
    outcome = grade(tiny_spec(), INSPECT, sandbox=warm, work_root=tmp_path / "work")
    assert outcome.verdict.value == "passed", outcome
    out = outcome.stdout
    assert _fields(out, "UID")[1:] == [str(sandbox_user.pw_uid), "CAPEFF", "0000000000000000", "CAPBND",
                                       "0000000000000000", "NNP", "1", "SECCOMP", "2"]  # fmt: skip
    env_line = next(line for line in out.splitlines() if line.startswith("ENV "))
    assert env_line == f"ENV {sorted(sandbox_env(tiny_spec().limits, '/opt/gpulab').items())}"
    assert "host-secret" not in out
    # In the job's cgroup (v1 memory controller path or the v2 one), not the template's.
    assert "/gpulab-test/" in _fields(out, "CGROUP")[1] or "/gpulab-test/" in out
    pid, fds = _fields(out, "PID")[1], "".join(_fields(out, "PID")[3:])
    assert int(pid) < 10, "the subject must sit in its own pid namespace"
    # stdio, the listing itself, the judge socket (and the per-test child's socket): no template fd.
    assert fds.startswith("[0,1,2,3") and fds.count(",") <= 4, fds
    assert _ours_left(leftovers, sandbox_user) == ([], [])
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.parametrize("role", ["subject", "judge"])
def test_dead_template_is_replaced(
    role: str,
    local_sandbox: LocalSandbox,
    warm: WarmLocalSandbox,
    pool: WarmPool,
    tiny_spec: Callable[..., ExerciseSpec],
    sandbox_user: pwd.struct_passwd,
    leftovers: Callable[[int], tuple[list[str], list[str]]],
    tmp_path: Path,
) -> None:
    spec = tiny_spec()
    solution = "def add(a, b):\n    return a + b\n"
    assert grade(spec, solution, sandbox=warm, work_root=tmp_path).verdict.value == "passed"
    key = RuntimeKey.of_spec(spec) if role == "subject" else JUDGE_KEY
    template = pool.acquire(key)
    os.kill(template.pid, signal.SIGKILL)
    template.proc.wait(timeout=10)
    started = pool.started
    outcome = grade(spec, solution, sandbox=warm, work_root=tmp_path)
    assert outcome.verdict.value == "passed", outcome
    assert pool.started == started + 1
    replacement = pool.acquire(key)
    assert replacement is not template and replacement.alive()
    users = (sandbox_user, pwd.getpwnam(local_sandbox.judge_user))
    deadline = time.monotonic() + 2
    while any(_ours_left(leftovers, u) != ([], []) for u in users) and time.monotonic() < deadline:
        time.sleep(0.05)
    for user in users:
        assert _ours_left(leftovers, user) == ([], [])
    assert list(tmp_path.iterdir()) == []


def test_warm_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPULAB_WARM_POOLS")  # the tests' own default is off
    settings = Settings(mode="dev", data_dir=tmp_path)  # type: ignore[arg-type]
    assert settings.warm_pools == "auto" and settings.warm_memory_mb == 0 and settings.warm_idle_s == 1800
    sandbox = get_sandbox(settings)
    assert isinstance(sandbox, WarmLocalSandbox) and sandbox.pool.runtimes == ("python", "torch", "tensorflow")
    assert sandbox.pool.budget is not None and sandbox.pool.budget.total_mb >= 512


def test_a_key_the_budget_has_no_room_for_runs_cold(
    local_sandbox: LocalSandbox, tiny_spec: Callable[..., ExerciseSpec], tmp_path: Path
) -> None:
    pool = WarmPool(("python",), budget=MemoryBudget(10))  # less than a plain Python template holds
    try:
        warm = WarmLocalSandbox(
            pool=pool, user=local_sandbox.user, cgroup_root=local_sandbox.cgroup_root,
            cgroup_name=local_sandbox.cgroup_name, timeout_margin_s=local_sandbox.timeout_margin_s,
        )  # fmt: skip
        outcome = grade(tiny_spec(), "def add(a, b):\n    return a + b\n", sandbox=warm, work_root=tmp_path)
        assert outcome.verdict.value == "passed", outcome  # graded, cold
        assert pool.started == 0 and pool.templates() == [] and pool.budget is not None and pool.budget.used_mb == 0
        assert pool.acquire(JUDGE_KEY) is None
    finally:
        pool.close()


def test_idle_templates_are_closed_and_their_memory_given_back() -> None:
    budget = MemoryBudget(1000)
    pool = WarmPool(("python",), budget=budget, idle_s=3600)
    try:
        template = pool.acquire(JUDGE_KEY)
        assert template is not None and template.alive() and budget.used_mb == template.cost_mb
        assert pool.reap_idle() == 0  # just used
        assert pool.reap_idle(now=time.monotonic() + 3601) == 1
        template.proc.wait(timeout=10)
        assert not template.alive() and budget.used_mb == 0 and pool.templates() == []
        assert pool.status()[0]["cold"] == "idle"
        again = pool.acquire(JUDGE_KEY)  # the next job that needs it starts it again
        assert again is not None and again is not template and again.alive() and budget.used_mb == again.cost_mb
        assert pool.status()[0]["misses"] == {"first use": 1, "idle": 1}
    finally:
        pool.close()
    assert budget.used_mb == 0


PLAIN_SUBJECT = RuntimeKey(preload=(), framework="none", replicas=1, threads=1)


def test_a_template_is_charged_what_it_measures_and_status_counts_hits_and_misses() -> None:
    budget = MemoryBudget(1000)
    pool = WarmPool(("python",), size=1, budget=budget)
    try:
        first = pool.acquire(JUDGE_KEY)
        assert first is not None
        measured = measured_mb(first.pid)
        assert measured is not None and first.cost_mb == measured and budget.used_mb == measured
        assert pool.acquire(JUDGE_KEY) is first and pool.acquire(JUDGE_KEY) is first
        [judge] = pool.status()
        assert judge == {
            "kind": "judge", "warm": 1, "size": 1, "hits": 2, "misses": {"first use": 1}, "memory_mb": measured,
            "cold": "",
        }  # fmt: skip
    finally:
        pool.close()


def test_a_kind_with_a_job_takes_the_memory_of_an_idle_kind_never_of_a_busy_one() -> None:
    pool = WarmPool(("python",), size=1, budget=MemoryBudget(cost_mb("python")))  # room for one template
    try:
        judge = pool.acquire(JUDGE_KEY)
        assert judge is not None
        assert pool.acquire(PLAIN_SUBJECT) is None  # the judge was just used: it keeps its memory, this job is cold
        judge.last_used -= EVICT_IDLE_S + 1  # now idle for longer than a kind may keep memory another job needs
        subject = pool.acquire(PLAIN_SUBJECT)
        assert subject is not None and subject.alive()
        judge.proc.wait(timeout=10)
        assert not judge.alive() and pool.evicted == 1
        by_kind = {kind["kind"]: kind for kind in pool.status()}
        assert by_kind["judge"]["cold"] == "evicted" and by_kind["judge"]["warm"] == 0
        # Both of its jobs missed for the budget: the first ran cold, the second waited for its template to start.
        assert by_kind["python"]["warm"] == 1 and by_kind["python"]["misses"] == {"budget": 2}
        assert PLAIN_SUBJECT.label == "python" and RuntimeKey(("torch",), "torch", 2, 2).label == (
            "torch, 2 virtual CUDA devices, 2 threads"
        )
    finally:
        pool.close()


def test_judge_key_is_served_by_any_warm_pool() -> None:
    assert WarmPool(("python",)).serves(JUDGE_KEY) and not WarmPool(()).serves(JUDGE_KEY)
    assert JUDGE_KEY.runtime == "judge" and not WarmPool(("python",)).serves(RuntimeKey(("torch",), "torch", 1, 1))


def test_judge_key_follows_the_jobs_framework(tmp_path: Path) -> None:
    (tmp_path / "subject.json").write_text(
        '{"version": 1, "preload": ["torch"], "devices": {"framework": "torch", "replicas": 2}}'
    )
    subject = RuntimeKey.of_job(tmp_path, Limits(cpus=2.0))
    torch_judge = WarmPool(("python", "torch")).judge_key_for(subject)
    # One torch template serves every CPU share (its fork sets the job's threads): the key holds 1.
    assert torch_judge == RuntimeKey(("torch",), "none", 1, 1, role="judge") and torch_judge.runtime == "judge-torch"
    # A pool without torch templates still warms the judge, without the framework (no torch copy for it).
    assert WarmPool(("python",)).judge_key_for(subject) == JUDGE_KEY
    assert WarmPool(()).judge_key_for(subject) is None


def test_runtime_key_of_job(tmp_path: Path) -> None:
    (tmp_path / "subject.json").write_text(
        '{"version": 1, "preload": ["torch"], "devices": {"framework": "torch", "replicas": 2}}'
    )
    key = RuntimeKey.of_job(tmp_path, Limits(cpus=2.0))
    assert key == RuntimeKey(("torch",), "torch", 2, 1) and key.runtime == "torch"
    assert RuntimeKey.of_job(tmp_path, Limits(cpus=1.0)) == key  # any CPU share: one torch template kind
