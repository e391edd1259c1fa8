"""What the benchmark harnesses share: paths, the benchmark learner, percentiles, and a served gpulab's basics.

Contract: ``Served`` is a running gpulab a benchmark talks to: subclasses set ``url`` and ``tiebreak`` (the
submissions' second sort key: ``rowid`` on SQLite, ``id`` on PostgreSQL) and give ``db()``, a DB-API connection
usable as a context manager; ``drain``, ``client``, ``bank_mix`` (every published code exercise's solution, rendered
for the benchmark learner's variant: submissions in the bank's proportions of frameworks and job shapes) and
``warm_counts`` (the live workers' warm hits and misses, from their beats) come with it. ``copy_bank`` copies the
bank as shipped (or named exercises) for a server of its own.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from worker.bank.specdata import render_params

REPO = Path(__file__).resolve().parent.parent
GPULAB = REPO / ".venv" / "bin" / "gpulab"
EMAIL, PASSWORD = "bench@example.com", "bench-password-0123456789"


def copy_bank(target: Path, slugs: Sequence[str] | None = None) -> Path:
    """Copy the bank as shipped (every exercise, its learning path), or only ``slugs``, to ``target``; return it."""
    source = REPO / "exercises"
    if slugs is None:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        for slug in slugs:
            shutil.copytree(source / slug, target / slug, ignore=shutil.ignore_patterns("__pycache__"))
    return target


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

    def bank_mix(self) -> list[tuple[str, str]]:
        """Return ``(slug, code)`` for every published code exercise: its solution in the learner's variant."""
        client = self.client()
        mix = []
        for summary in client.get("/api/exercises").json():
            if summary["kind"] != "code":
                continue
            slug = summary["slug"]
            params = client.get(f"/api/exercises/{slug}").json().get("params") or {}
            mix.append((slug, render_params((REPO / "exercises" / slug / "solution.py").read_text(), params)))
        return mix

    def warm_counts(self) -> dict[str, int]:
        """Return the warm hits and misses the live workers' beats report, summed over kinds and workers."""
        with self.db() as db:
            rows = db.execute("SELECT warm FROM worker_heartbeats WHERE stopped_at IS NULL").fetchall()
        hits = misses = 0
        for (warm,) in rows:
            for kind in (json.loads(warm) if isinstance(warm, str) else warm) or []:
                hits += int(kind.get("hits", 0))
                misses += sum(int(n) for n in (kind.get("misses") or {}).values())
        return {"hits": hits, "misses": misses}

    def client(self) -> httpx.Client:
        """Return a client logged in as the benchmark learner."""
        client = httpx.Client(base_url=self.url, timeout=120)
        client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD}).raise_for_status()
        return client
