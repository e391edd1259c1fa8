"""Where a warm verdict's time goes around the grading: ``.venv/bin/python -m benchmarks.http_path`` (root).

Starts a real ``gpulab serve`` (SQLite, in-process grading, warm templates for the whole bank, as ``python -m
benchmarks --only warm``), submits one exercise's solution ``--runs`` times after one unmeasured first use, and
splits each submit->verdict (seen on the submission's event stream, as the browser sees it) into: the POST's
answer, the POST to the row's ``created_at``, ``created_at`` to ``started_at`` (dispatch and claim),
``started_at`` to ``finished_at`` (the grading, the result recorded), and ``finished_at`` to the event seen.
Prints p50/min/max per step and writes them as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.__main__ import Server, solution, submit, wait_streamed
from benchmarks.common import REPO

STEPS = ("post_answer", "post_to_created", "created_to_started", "started_to_finished", "finished_to_seen", "total")


def _stamp(value: Any) -> float:
    return datetime.fromisoformat(str(value)).timestamp()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http_path", description=__doc__.split("\n\n")[0])
    parser.add_argument("--exercise", default="torch-dataparallel")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "http-path.json")
    args = parser.parse_args(argv)
    samples: list[tuple[str, float, float, float]] = []
    with Server(warm=True, workers=2) as server:
        client = server.client()
        code = solution(args.exercise)
        wait_streamed(client, submit(client, args.exercise, code))  # first use
        for _ in range(args.runs):
            wall, started = time.time(), time.monotonic()
            sid = submit(client, args.exercise, code)
            answered = time.monotonic() - started
            seen = wait_streamed(client, sid)["seen_at"] - started
            samples.append((sid, wall, answered, seen))
        db = sqlite3.connect(server.data / "gpulab.db")
        steps: dict[str, list[float]] = {step: [] for step in STEPS}
        for sid, wall, answered, seen in samples:
            created, began, finished = (
                _stamp(v)
                for v in db.execute(
                    "SELECT created_at, started_at, finished_at FROM submissions WHERE id = ?", (sid,)
                ).fetchone()
            )
            for step, value in zip(STEPS, (answered, created - wall, began - created, finished - began,
                                           wall + seen - finished, seen), strict=True):  # fmt: skip
                steps[step].append(value)
    out = {step: {"p50_ms": statistics.median(v) * 1000, "min_ms": min(v) * 1000, "max_ms": max(v) * 1000}
           for step, v in steps.items()}  # fmt: skip
    print(f"{args.exercise}: {args.runs} warm verdicts through HTTP (timestamps: this clock and the server's rows)")
    for step, found in out.items():
        print(f"  {step:22s} p50 {found['p50_ms']:7.1f} ms  min {found['min_ms']:7.1f}  max {found['max_ms']:7.1f}")
    args.out.write_text(json.dumps({"exercise": args.exercise, "runs": args.runs, "steps": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
