"""The queues jobs travel on: one grading queue per kind of grading node, and a fast lane for its example runs.

Contract: the grading queues are the exercise format's (``worker.bank.spec.QUEUES``: an exercise names where it is
graded); each has an example-run lane ``examples-<queue>``. ``grading_queue`` and ``lane_for`` map an
exercise's queue to them (a name the format does not know goes to ``cpu``). Importing this loads neither
Celery nor a database, so readiness, metrics and the CLI name queues exactly as the workers do.
"""

from __future__ import annotations

from worker.bank.spec import QUEUES

DEFAULT_QUEUE = "cpu"
EXAMPLE_LANES = {queue: f"examples-{queue}" for queue in QUEUES}
ALL_QUEUES = (*QUEUES, *EXAMPLE_LANES.values())

__all__ = ["ALL_QUEUES", "DEFAULT_QUEUE", "EXAMPLE_LANES", "QUEUES", "grading_queue", "lane_for"]


def grading_queue(queue: str) -> str:
    """Return the grading queue an exercise's ``queue`` names."""
    return queue if queue in QUEUES else DEFAULT_QUEUE


def lane_for(queue: str) -> str:
    """Return the example-run lane of an exercise's ``queue``."""
    return EXAMPLE_LANES[grading_queue(queue)]
