"""Similarity benchmark: a check of 1,000 learners' submissions to one exercise, end to end through the job.

It generates ``--n`` plausible submissions from one bank exercise's own variants (the reference solution,
``right/`` and ``wrong/``) with light mutations a learner or a copier makes (renamed variables, comments added
or dropped, blank lines, a line deleted, a helper appended; seeded, so every run compares the same code), stores
them as graded submissions of ``--n`` learners in a fresh SQLite database (migrated as ``gpulab db upgrade`` does),
then times ``app.domain.review.similarity_runs.run_similarity`` on one run: reading the submissions, copydetect's
fingerprints and comparisons, and storing the ranked pairs. It also times the engine alone
(``app.domain.review.similarity.compare``) on the same code, and says how many pairs reached the display threshold, how
many were compared at all (the rest share too few fingerprints to reach it), and the clusters.

Run it with ``python -m benchmarks.similarity`` (``--n``, ``--exercise``, ``--out``); docs/similarity.md has the
result on the project's machine. The target (issue 14): 1,000 submissions in under a minute. ``--evaluate`` scores
every pair of every exercise's variants at a few thresholds instead (how docs/similarity.md chose them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import REPO

TARGET_S = 60.0
COMMENTS = (
    "# average over the ranks", "# TODO tidy up", "# this is the important part", "# from the lecture notes",
    "# sum then divide", "# careful: in place", "# works on 2 GPUs", "# see the prompt",
)  # fmt: skip
HELPERS = (
    "\n\ndef _log(message):\n    print(f'[rank] {message}')\n",
    "\n\ndef _count(model):\n    return sum(p.numel() for p in model.parameters())\n",
    "\n\nDEBUG = False\n",
)
NAME_RE = re.compile(r"\b([a-z_][a-z0-9_]*)\s*(?:=(?!=)|\bin\b)")
KEEP = {"rank", "world_size", "model", "self", "average_gradients", "train"}  # the prompt's names


def variants(slug: str) -> tuple[str, str, list[str]]:
    """Return the exercise's starter, reference solution and every variant (the solution among them)."""
    folder = REPO / "exercises" / slug
    solution = (folder / "solution.py").read_text()
    others = [p.read_text() for kind in ("right", "wrong") for p in sorted((folder / kind).glob("*.py"))]
    return (folder / "starter.py").read_text(), solution, [solution, *others]


def mutate(code: str, rng: random.Random) -> str:
    """Return ``code`` as one more learner might hand it in: renamed, commented, spaced differently."""
    names = sorted({m.group(1) for m in NAME_RE.finditer(code)} - KEEP)
    for name in rng.sample(names, k=min(len(names), rng.randint(0, 4))):
        code = re.sub(rf"\b{name}\b", rng.choice((f"{name}_", f"my_{name}", f"{name}2", name.upper())), code)
    lines = code.splitlines()
    if rng.random() < 0.3:  # no comments at all
        lines = [line for line in lines if not line.lstrip().startswith("#")]
        lines = [line.split("  # ")[0] for line in lines]
    for _ in range(rng.randint(0, 3)):  # comments of their own, and blank lines
        at = rng.randrange(len(lines) + 1)
        near = [lines[i] for i in (at - 1, at) if 0 <= i < len(lines) and lines[i].strip()]
        indent = max((line[: len(line) - len(line.lstrip())] for line in near), key=len, default="")
        lines.insert(at, indent + rng.choice(COMMENTS) if rng.random() < 0.7 else "")
    if rng.random() < 0.2 and len(lines) > 8:  # a line lost
        del lines[rng.randrange(4, len(lines))]
    text = "\n".join(lines) + "\n"
    if rng.random() < 0.2:
        text += rng.choice(HELPERS)
    return text


def generate(slug: str, n: int, seed: int = 14) -> tuple[str, str, list[str]]:
    """Return the starter, the solution and ``n`` mutated submissions of the exercise's variants."""
    starter, solution, bases = variants(slug)
    rng = random.Random(seed)  # noqa: S311  (seeded on purpose: every run compares the same code)
    return starter, solution, [mutate(rng.choice(bases), rng) for _ in range(n)]


@contextmanager
def database() -> Iterator[str]:
    """Yield the URL of a fresh, migrated SQLite database in a temporary folder."""
    from app.domain.platform.migrate import upgrade

    with tempfile.TemporaryDirectory(prefix="gpulab-similarity-") as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade("head", database_url=url)
        yield url


def seed_submissions(url: str, slug: str, codes: Sequence[str]) -> int:
    """Store the exercise and one graded submission per learner; return the exercise id."""
    from sqlalchemy.orm import Session

    from app.domain.exercises.bank import upsert_exercise
    from app.domain.models import Role, Submission, SubmissionStatus, User
    from app.domain.platform.db import engine_for
    from worker.bank.spec import load_exercise
    from worker.core.outcome import Verdict

    with Session(engine_for(url)) as session:
        exercise, _ = upsert_exercise(session=session, spec=load_exercise(REPO / "exercises" / slug))
        assert exercise.current_version is not None
        version_id = exercise.current_version.id
        users = [
            User(email=f"learner{i}@example.com", password_hash="-", role=Role.learner)  # noqa: S106  (no log-in)
            for i in range(len(codes))
        ]
        session.add_all(users)
        session.flush()
        session.add_all(
            Submission(user_id=user.id, exercise_version_id=version_id, code=code, status=SubmissionStatus.graded,
                       verdict=Verdict.passed, score=1.0, max_score=1.0)
            for user, code in zip(users, codes, strict=True)
        )  # fmt: skip
        session.commit()
        return exercise.id


def run_job(url: str, exercise_id: int) -> dict[str, Any]:
    """Create a run as the API does and carry it out as the worker does; return its timing and what it found."""
    from sqlalchemy.orm import Session

    from app.domain.models import Exercise, SimilarityRun
    from app.domain.platform.db import engine_for
    from app.domain.review.similarity import Params
    from app.domain.review.similarity_runs import create_run, run_similarity

    @contextmanager
    def factory() -> Iterator[Session]:
        with Session(engine_for(url)) as session:
            yield session

    with factory() as session:
        exercise = session.get(Exercise, exercise_id)
        run_id = create_run(session=session, user=None, params=Params(), exercise=exercise).id
        session.commit()
    started = time.perf_counter()
    run_similarity(run_id, factory=factory)
    seconds = time.perf_counter() - started
    with factory() as session:
        run = session.get(SimilarityRun, run_id)
        assert run is not None
        return {
            "status": run.status, "error": run.error, "seconds": round(seconds, 2), "submissions": run.submissions,
            "pairs_found": run.pairs_found, "pairs_stored": len(run.pairs), "clusters": len(run.clusters),
            "largest_cluster": max((len(c) for c in run.clusters), default=0),
            "top_score": round(run.pairs[0].score, 3) if run.pairs else None,
        }  # fmt: skip


def engine_only(starter: str, solution: str, codes: Sequence[str]) -> dict[str, Any]:
    """Time the engine alone on the same code, and count how many pairs its bound let through."""
    from app.domain.review import similarity

    params = similarity.Params()
    started = time.perf_counter()
    excluded = similarity.boilerplate_hashes([starter, solution], params=params)
    prints = [similarity.fingerprint(str(i), code, params=params, boilerplate=excluded) for i, code in enumerate(codes)]
    fingerprinted = time.perf_counter() - started
    candidates = similarity._candidates(prints, params)
    bounded = time.perf_counter() - started - fingerprinted
    pairs = similarity.compare([(str(i), code) for i, code in enumerate(codes)], boilerplate=[starter, solution])
    total = time.perf_counter() - started - fingerprinted - bounded
    n = len(codes)
    return {
        "fingerprint_s": round(fingerprinted, 2), "bound_s": round(bounded, 2), "compare_call_s": round(total, 2),
        "all_pairs": n * (n - 1) // 2, "compared_pairs": len(candidates), "pairs_found": len(pairs),
    }  # fmt: skip


SETTINGS = ((25, 30), (30, 35), (40, 50))  # (noise_t, guarantee_t) tried by --evaluate


def _lines_in_common(a: str, b: str) -> float:
    """Return difflib's ratio of the two files' non-blank lines: how much of one was edited from the other."""
    import difflib

    left, right = ([line.strip() for line in code.splitlines() if line.strip()] for code in (a, b))
    return difflib.SequenceMatcher(None, left, right, autojunk=False).ratio()


def evaluate() -> dict[str, Any]:
    """Score every pair of each exercise's variants at each of ``SETTINGS``, the starter (and, as a check runs,
    the solution too) excluded; split pairs into edited from one another (>= 80 % lines in common) and
    different implementations (< 50 %), and count how many of each reach the display threshold."""
    from app.domain.review.similarity import DISPLAY_T, Params, compare

    found: dict[str, Any] = {}
    for noise_t, guarantee_t in SETTINGS:
        params = Params(noise_t=noise_t, guarantee_t=guarantee_t, display_t=0.0)
        for mode in ("starter", "starter+solution"):
            rows: list[tuple[float, float]] = []
            for folder in sorted((REPO / "exercises").iterdir()):
                if not (folder / "solution.py").exists():
                    continue
                starter, solution, bases = variants(folder.name)
                docs = [(str(i), code) for i, code in enumerate(bases)]
                boilerplate = [starter]
                if mode == "starter+solution":
                    docs, boilerplate = docs[1:], [starter, solution]
                scores = {(p.a, p.b): p.score for p in compare(docs, boilerplate=boilerplate, params=params)}
                for i, (a, code_a) in enumerate(docs):
                    for b, code_b in docs[i + 1 :]:
                        rows.append((scores.get((a, b), 0.0), _lines_in_common(code_a, code_b)))
            edited = [score for score, ratio in rows if ratio >= 0.8]
            different = [score for score, ratio in rows if ratio < 0.5]
            found[f"{noise_t}/{guarantee_t} excluding {mode}"] = {
                "edited_pairs": len(edited), "edited_flagged": sum(s >= DISPLAY_T for s in edited),
                "different_pairs": len(different), "different_flagged": sum(s >= DISPLAY_T for s in different),
                "different_over_half": sum(s >= 0.5 for s in different),
            }  # fmt: skip
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="submissions (one per learner)")
    parser.add_argument("--exercise", default="torch-allreduce-grads", help="the bank exercise whose variants to use")
    parser.add_argument("--out", type=Path, help="write the result as JSON here too")
    parser.add_argument("--evaluate", action="store_true", help="score the bank's variants at several settings")
    args = parser.parse_args(argv)
    if args.evaluate:
        print(json.dumps(evaluate(), indent=2))
        return 0
    starter, solution, codes = generate(args.exercise, args.n)
    result: dict[str, Any] = {
        "exercise": args.exercise, "n": args.n, "cpus": os.cpu_count(), "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }  # fmt: skip
    with database() as url:
        exercise_id = seed_submissions(url, args.exercise, codes)
        result["job"] = run_job(url, exercise_id)
    result["engine"] = engine_only(starter, solution, codes)
    result["target_s"] = TARGET_S
    result["meets_target"] = result["job"]["status"] == "done" and result["job"]["seconds"] < TARGET_S
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
