"""``python -m runner JOB_DIR``: the judge with a subject child of its own; development and ``unsafe`` only.

Contract: as ``runner.judge`` (see ``judge.py``), except that the subject is started here over a
socketpair instead of by a sandbox backend, so nothing separates the two.
"""

from .judge import run

if __name__ == "__main__":
    run(spawn_subject=True)
