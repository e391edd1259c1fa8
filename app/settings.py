"""The app's ``Settings``: the grading side's (``worker.core.config``) and what only ``app/`` reads.

Contract:
- ``Settings`` extends ``worker.core.config.Settings`` (the sandbox, warm pools, Docker, GPUs, ``mode``) with the
  database, the broker, leases and the sweeper, submission limits, log-in limits and cookie sessions, metrics,
  the public address, LTI and framing; all are ``GPULAB_*`` environment variables. The app hands this object to
  grading, which reads only its own fields of it.
- ``database_url`` defaults to a SQLite file under ``data_dir``; ``broker_url`` unset means the in-process
  dispatcher, set means Celery on that Redis.
- Outside ``dev`` and ``demo`` it refuses weak secrets, framing without secure cookies and the ``unsafe``
  sandbox (the grading side's rule); anywhere it refuses a lease shorter than three heartbeats, a relative public
  address and a frame ancestor that is not an origin.
- ``get_settings()`` is cached and is the one every part of the app calls; tests call
  ``get_settings.cache_clear()`` after changing the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from worker.core import config
from worker.core.config import REPO_ROOT
from worker.core.errors import ConfigError

WEAK_SECRETS = {"", "secret", "changeme", "change-me", "dev", "password", "gpulab"}
MIN_SECRET_LENGTH = 32


class Settings(config.Settings):
    database_url: str = ""
    broker_url: str = ""
    secret_key: str = ""
    exercises_dir: Path = Field(default=REPO_ROOT / "exercises")
    max_code_bytes: int = Field(default=64 * 1024, ge=1024)
    max_attempts: int = Field(default=3, ge=1, le=10)
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
    # Health and metrics (app/web/routes/health.py, app/domain/operations/metrics.py): /metrics answers only this
    # bearer token when set, else only loopback clients that did not come through a proxy.
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
    # Erasing a person (app/domain/privacy/erasure.py): "delete" removes the code and output of their submissions
    # (grades stay, as numbers); "pseudonymize" keeps the code under the erased account, for a country whose rules
    # keep graded work for a while. Either way their name, e-mail, LMS ids, tokens, drafts and messages go.
    erasure_code: Literal["delete", "pseudonymize"] = "delete"

    @model_validator(mode="after")
    def _refuse_unsafe_app_values(self) -> Settings:
        """Fill in the database's default; refuse inconsistent leases, addresses, framing and weak secrets."""
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
        if self.frame_origins and not self.cookie_secure and not self.relaxed:
            raise ConfigError("GPULAB_FRAME_ANCESTORS needs GPULAB_COOKIE_SECURE=true: framed sessions need https")
        if not self.relaxed and self.secret_key and self.secret_is_weak:
            raise ConfigError(f"GPULAB_SECRET_KEY is weak: use at least {MIN_SECRET_LENGTH} random characters")
        return self

    @property
    def framed_sessions(self) -> bool:
        """Say whether the session cookie goes into the LMS's frames (SameSite=None, Partitioned).

        Only with GPULAB_COOKIE_SECURE: a browser drops a SameSite=None cookie that is not Secure, which would end
        every log-in, top-level ones too. Dev and demo may frame over plain http: there the cookie stays Lax, so
        gpulab works in its own tab and a frame shows the log-in page (``create_app`` warns at start).
        """
        return bool(self.frame_origins) and self.cookie_secure

    @property
    def frame_origins(self) -> tuple[str, ...]:
        """Return the origins of ``frame_ancestors``, one per space-separated word."""
        return tuple(dict.fromkeys(o.rstrip("/") for o in self.frame_ancestors.split()))

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
