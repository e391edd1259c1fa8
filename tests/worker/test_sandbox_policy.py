"""The per-role policy the backends share: what the judge and the subject each get."""

from __future__ import annotations

import pytest

from worker.bank.spec import Limits
from worker.grading.sandbox.policy import (
    JUDGE_EXTRA_MB,
    JUDGE_PIDS,
    THREAD_VARS,
    cpu_rlimit_s,
    hard_output_cap,
    role_limits,
    sandbox_env,
)


def test_the_subject_gets_the_exercises_limits_and_the_judge_more_memory_and_its_own_pids() -> None:
    limits = Limits(memory_mb=300, pids=16, cpus=2.0)
    assert role_limits("subject", limits) == limits
    judge = role_limits("judge", limits)
    assert (judge.memory_mb, judge.pids, judge.cpus) == (300 + JUDGE_EXTRA_MB, JUDGE_PIDS, 2.0)
    with pytest.raises(ValueError, match="unknown role"):
        role_limits("root", limits)


def test_the_cpu_rlimit_sits_just_past_the_wall_clock() -> None:
    assert cpu_rlimit_s(Limits(timeout_s=10.5)) == (12, 13)


def test_the_environment_is_fixed_and_holds_nothing_of_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULAB_SECRET_KEY", "host-secret")
    env = sandbox_env(Limits(cpus=3.0), "/opt/gpulab")
    assert env["PYTHONPATH"] == "/opt/gpulab" and env["HOME"] == env["TMPDIR"] == "/tmp"
    assert {env[name] for name in THREAD_VARS} == {"3"}
    assert not any(key.startswith("GPULAB") for key in env)
    assert sandbox_env(Limits(cpus=0.5), "/x")["OMP_NUM_THREADS"] == "1"


def test_the_hard_output_cap_grows_with_the_output_limit() -> None:
    small, large = Limits(output_bytes=1000), Limits(output_bytes=1 << 20)
    assert hard_output_cap(small) == 8 * 1024 * 1024
    assert hard_output_cap(large) == 64 << 20
