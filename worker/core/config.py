"""One ``Settings`` object for app, worker and CLI, read from ``GPULAB_*`` environment variables.

Contract:
- ``mode`` is ``production`` unless set; ``dev`` and ``demo`` relax the secret-key rule and allow the
  ``unsafe`` sandbox (no isolation, labelled on every result). Production refuses weak secrets and ``unsafe``.
- ``database_url`` defaults to a SQLite file under ``data_dir``; ``broker_url`` unset means the in-process
  dispatcher, set means Celery on that Redis.
- ``get_settings()`` is cached; tests call ``get_settings.cache_clear()`` after changing the environment.
"""

from __future__ import annotations

import enum
from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.core.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
WEAK_SECRETS = {"", "secret", "changeme", "change-me", "dev", "password", "gpulab"}
MIN_SECRET_LENGTH = 32


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
    database_url: str = ""
    broker_url: str = ""
    secret_key: str = ""
    sandbox: SandboxKind = SandboxKind.local
    exercises_dir: Path = Field(default=REPO_ROOT / "exercises")
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
    max_code_bytes: int = Field(default=64 * 1024, ge=1024)
    max_attempts: int = Field(default=3, ge=1, le=10)
    timeout_margin_s: float = Field(default=5.0, ge=0.5)
    # Leases (app/jobs/sweeper.py, app/jobs/heartbeat.py): a grading renews its claim every heartbeat_interval_s; one
    # whose heartbeat is older than grading_lease_s (its worker died) is taken over. Every grading process
    # beats as a worker every heartbeat_interval_s and counts as dead after worker_stale_s. The sweeper runs
    # every sweep_interval_s and re-sends queued work that nobody picked up for stale_queued_s.
    heartbeat_interval_s: float = Field(default=10.0, gt=0, le=300)
    grading_lease_s: float = Field(default=30.0, ge=3.0)
    worker_stale_s: float = Field(default=30.0, ge=1.0)
    sweep_interval_s: float = Field(default=5.0, gt=0, le=600)
    stale_queued_s: float = Field(default=15.0, ge=1.0)
    login_max_failures: int = Field(default=5, ge=1)
    login_window_s: int = Field(default=300, ge=1)
    session_max_age_s: int = Field(default=7 * 24 * 3600, ge=60)
    cookie_secure: bool = False
    # Docker backend (GPULAB_SANDBOX=docker): engine URL (empty: DOCKER_HOST or the local socket), grading
    # image, the limit on every Engine API call, and on GPU workers the GPUs to share and how many per job.
    docker_url: str = ""
    docker_image: str = "gpulab/grader:cpu"
    docker_api_timeout_s: float = Field(default=10.0, gt=0, le=120)
    gpu_ids: str = ""
    gpus_per_job: int = Field(default=1, ge=1, le=64)
    # Health and metrics (app/web/routes/health.py, app/domain/operations/metrics.py): /metrics answers only this
    # bearer token when
    # set, else only loopback clients that did not come through a proxy.
    metrics_token: str = ""
    # Example runs and checks as jobs (issue 10 item 2): in Celery mode an example-run request waits this long
    # for a worker's answer (app/domain/exercises/example_runs.py), then answers 503 with Retry-After.
    example_run_wait_s: float = Field(default=30.0, gt=0, le=300)
    # Shared state (issue 10 item 3): a live status stream re-reads the database at least this often; news
    # (app/domain/platform/news.py, across processes over Redis with a broker) wakes it sooner, so this is only a
    # safety net.
    events_poll_s: float = Field(default=0.3, gt=0, le=60)
    # The address browsers and LTI platforms reach gpulab at (https://gpulab.example.edu, no trailing slash):
    # the LTI endpoints gpulab registers and checks links against. Empty: the address each request came to.
    public_url: str = ""
    # LTI 1.3 (app/domain/lti/): how long a launch may take from the OIDC login to the id_token post (the state
    # cookie's lifetime), the clock skew allowed on a token's exp/iat, how long a retired gpulab key is still
    # published (launches and platform caches in flight keep verifying), and the limit on each call to a platform.
    lti_state_max_age_s: int = Field(default=600, ge=30, le=3600)
    lti_leeway_s: int = Field(default=60, ge=0, le=600)
    lti_key_grace_s: int = Field(default=3 * 24 * 3600, ge=0)
    lti_http_timeout_s: float = Field(default=10.0, gt=0, le=60)
    # Origins allowed to show gpulab in a frame (an LMS that embeds LTI launches: "https://moodle.example.edu
    # https://canvas.example.edu"). Empty: no site may frame gpulab. When set, the session cookie is sent in
    # those frames too (SameSite=None), which browsers accept only over https: GPULAB_COOKIE_SECURE must be on.
    frame_ancestors: str = ""

    @model_validator(mode="after")
    def _refuse_unsafe_defaults(self) -> Settings:
        relaxed = self.mode in (Mode.dev, Mode.demo)
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'gpulab.db'}"
        if self.grading_lease_s < 3 * self.heartbeat_interval_s:
            raise ConfigError(
                "GPULAB_GRADING_LEASE_S must be at least three times GPULAB_HEARTBEAT_INTERVAL_S, or a busy database "
                "would let a live grading lose its lease"
            )
        self.public_url = self.public_url.rstrip("/")
        if self.public_url and not self.public_url.startswith(("https://", "http://")):
            raise ConfigError("GPULAB_PUBLIC_URL must be an absolute http(s) address, e.g. https://gpulab.example.edu")
        for origin in self.frame_origins:
            scheme, _, host = origin.partition("://")
            if scheme not in ("https", "http") or not host or any(c in host for c in "/;'\" *"):
                raise ConfigError(
                    f"GPULAB_FRAME_ANCESTORS holds {origin!r}: give origins, e.g. https://lms.example.edu"
                )
        if self.frame_origins and not self.cookie_secure and not relaxed:
            raise ConfigError("GPULAB_FRAME_ANCESTORS needs GPULAB_COOKIE_SECURE=true: framed sessions need https")
        if not relaxed:
            if self.sandbox is SandboxKind.unsafe:
                raise ConfigError("GPULAB_SANDBOX=unsafe runs learner code without isolation; only dev/demo allow it")
            if self.secret_key and self.secret_is_weak:
                raise ConfigError(f"GPULAB_SECRET_KEY is weak: use at least {MIN_SECRET_LENGTH} random characters")
        return self

    @property
    def frame_origins(self) -> tuple[str, ...]:
        """Return the origins of ``frame_ancestors``, one per space-separated word."""
        return tuple(dict.fromkeys(o.rstrip("/") for o in self.frame_ancestors.split()))

    @property
    def relaxed(self) -> bool:
        return self.mode in (Mode.dev, Mode.demo)

    @property
    def secret_is_weak(self) -> bool:
        return self.secret_key.lower() in WEAK_SECRETS or len(self.secret_key) < MIN_SECRET_LENGTH

    def session_secret(self) -> str:
        """Return the key that signs cookies; refuse a missing or weak one outside dev/demo."""
        if self.secret_key and not self.secret_is_weak:
            return self.secret_key
        if self.relaxed:
            return self.secret_key or "gpulab-dev-only-secret-never-use-in-production"
        raise ConfigError(f"set GPULAB_SECRET_KEY to at least {MIN_SECRET_LENGTH} random characters")

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache
def get_settings() -> Settings:
    return Settings()
