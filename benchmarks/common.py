"""What the benchmark harnesses share: paths, the benchmark learner, percentiles, and a served gpulab's basics.

Contract: ``Served`` is a running gpulab a benchmark talks to: subclasses set ``url`` and ``tiebreak`` (the
submissions' second sort key: ``rowid`` on SQLite, ``id`` on PostgreSQL) and give ``db()``, a DB-API connection
usable as a context manager; ``drain`` and ``client`` come with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
GPULAB = REPO / ".venv" / "bin" / "gpulab"
EMAIL, PASSWORD = "bench@example.com", "bench-password-0123456789"


def worker_prewarmed(log: str) -> bool:
    """Say whether a ``gpulab worker``'s log shows both its prewarms: the grading pool's and its example lane's.

    Measuring while the example lane's templates still import their frameworks would charge that to the first
    samples; both processes log a ``prewarmed`` line when their templates are up.
    """
    return log.count("prewarmed") >= 2


def pct(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile of ``values`` (nearest rank; NaN for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Served:
    """A running gpulab: its URL, its database, the benchmark learner's client (see the module contract)."""

    url: str
    tiebreak: str

    def db(self) -> Any:
        raise NotImplementedError

    def drain(self, timeout_s: float = 1800) -> int:
        """Wait until nothing is queued or running (what earlier phases left); return how many were left."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.db() as db:
                (left,) = db.execute(
                    "SELECT count(*) FROM submissions WHERE status IN ('queued', 'running')"
                ).fetchone()
            if left == 0 or time.monotonic() >= deadline:
                return int(left)
            time.sleep(0.5)

    def client(self) -> httpx.Client:
        """Return a client logged in as the benchmark learner."""
        client = httpx.Client(base_url=self.url, timeout=120)
        client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD}).raise_for_status()
        return client
