"""The grading side's ``Settings``: what ``worker/`` reads, from ``GPULAB_*`` environment variables.

Contract:
- ``Settings`` holds what grading reads (the sandbox backend, its user and cgroups, warm pools and their memory,
  Docker, the GPUs to share, the margin on a run's timeout, the data folder) and ``mode``: ``production``
  unless set; ``dev`` and ``demo`` allow the ``unsafe`` sandbox (no isolation, labelled on every result), which
  production refuses.
- The app's ``Settings`` (``app.settings``: the database, the broker, leases, limits, sessions, LTI, metrics...)
  extends this class; the app builds one and hands it to grading, which never builds its own, so one process reads
  its environment once. A setting only ``app/`` reads lives there, never here.
"""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.core.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


class Mode(enum.StrEnum):
    production = "production"
    dev = "dev"
    demo = "demo"


class SandboxKind(enum.StrEnum):
    local = "local"
    docker = "docker"
    unsafe = "unsafe"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPULAB_", extra="ignore")

    mode: Mode = Mode.production
    data_dir: Path = Field(default=REPO_ROOT / ".data")
    sandbox: SandboxKind = SandboxKind.local
    sandbox_user: str = "gpulab-sandbox"
    cgroup_root: Path = Path("/sys/fs/cgroup")
    cgroup_name: str = "gpulab"
    grading_workers: int = Field(default=2, ge=1, le=64)
    # local sandbox only: runtimes whose subjects fork from warm template processes ("", "all", or a comma
    # list of python,torch,tensorflow); GPULAB_GRADING_WORKERS templates per runtime key, started when the
    # server or worker starts (app/jobs/prewarm.py) or on first use.
    # Warm grading (worker/grading/sandbox/warm.py, docker_warm.py): "auto" (the default) and "all" warm every
    # runtime the published exercises need, "off" none, or a list such as "python,torch"; within
    # GPULAB_WARM_MEMORY_MB (0: a quarter of the machine's memory, see budget.py) per grading process; a kind
    # no job used for GPULAB_WARM_IDLE_S is closed (and started again by the next job that needs it).
    warm_pools: str = "auto"
    warm_memory_mb: int = Field(default=0, ge=0)
    warm_idle_s: float = Field(default=1800.0, ge=0)
    timeout_margin_s: float = Field(default=5.0, ge=0.5)
    # Docker backend (GPULAB_SANDBOX=docker): engine URL (empty: DOCKER_HOST or the local socket), grading
    # image, the limit on every Engine API call, and on GPU workers the GPUs to share and how many per job.
    docker_url: str = ""
    docker_image: str = "gpulab/grader:cpu"
    docker_api_timeout_s: float = Field(default=10.0, gt=0, le=120)
    gpu_ids: str = ""
    gpus_per_job: int = Field(default=1, ge=1, le=64)
    # Where the local backend reads the GPUs' device nodes and the driver's tables: /dev and /proc on a node;
    # tests and the CPU benchmarks point them at stand-ins (gpu_devices.py, gpu_health.py).
    gpu_dev_root: Path = Path("/dev")
    gpu_proc_root: Path = Path("/proc")

    @model_validator(mode="after")
    def _refuse_unsafe_sandbox(self) -> Settings:
        """Refuse the ``unsafe`` sandbox outside dev and demo."""
        if self.sandbox is SandboxKind.unsafe and not self.relaxed:
            raise ConfigError("GPULAB_SANDBOX=unsafe runs learner code without isolation; only dev/demo allow it")
        return self

    @property
    def relaxed(self) -> bool:
        return self.mode in (Mode.dev, Mode.demo)
