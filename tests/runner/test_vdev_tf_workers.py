"""The TensorFlow multi-worker harness: forked worker processes on loopback ports, their results and their ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from worker.runner.vdev import tf_workers

ROOT = Path(__file__).resolve().parents[2]


def _returns(workers: list[str], index: int) -> dict[str, object]:
    return {"workers": workers, "index": index, "pid": os.getpid(), "values": np.arange(3, dtype="int64") * index}


def test_each_worker_gets_the_same_addresses_and_its_index() -> None:
    results = tf_workers.run(_returns, 2, timeout_s=30)
    assert [r.ok for r in results] == [True, True], [r.describe() for r in results]
    first, second = (r.value for r in results)
    assert first is not None and second is not None
    assert first["workers"] == second["workers"]
    hosts = {w.rpartition(":")[0] for w in first["workers"]}
    ports = {w.rpartition(":")[2] for w in first["workers"]}
    assert hosts == {"127.0.0.1"} and len(ports) == 2
    assert [first["index"], second["index"]] == [0, 1]
    assert first["pid"] != second["pid"] != os.getpid()
    assert results[1].arrays["values"].tolist() == [0, 1, 2]
    assert results[0].exit_code == results[1].exit_code == 0
    assert results[1].plain()["arrays"]["values"] == {"dtype": "int64", "shape": [3], "data": [0, 1, 2]}


def _one_fails_one_waits(workers: list[str], index: int) -> dict[str, object]:
    if index == 1:
        raise ValueError("worker 1 gives up")
    time.sleep(600)  # waits for a partner that is gone, as a worker in a collective would
    return {}


def test_a_failure_stops_the_others_after_the_grace() -> None:
    results = tf_workers.run(_one_fails_one_waits, 2, timeout_s=300, grace_s=0.5)
    waiting, failed = results
    assert failed.error is not None and failed.error.type == "ValueError"
    assert failed.error.message == "worker 1 gives up" and "_one_fails_one_waits" in failed.error.traceback
    assert failed.exit_code == 1 and not failed.ok
    assert waiting.stopped and not waiting.timed_out and waiting.exit_code == -9
    assert "still running" in waiting.describe() and "raised ValueError" in failed.describe()


def _never_ends(workers: list[str], index: int) -> dict[str, object]:
    time.sleep(600)
    return {}


def test_workers_still_running_at_the_deadline_time_out() -> None:
    results = tf_workers.run(_never_ends, 2, timeout_s=0.5)
    assert [(r.timed_out, r.stopped, r.exit_code) for r in results] == [(True, False, -9)] * 2


def _not_a_dict(workers: list[str], index: int) -> object:
    return [index]


def test_a_result_that_is_not_a_dict_is_an_error() -> None:
    results = tf_workers.run(_not_a_dict, 1, timeout_s=30)
    assert results[0].error is not None and results[0].error.type == "TypeError"
    assert "must return a dict, not list" in results[0].error.message


CLUSTER = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
from worker.runner.vdev import tf_workers

def work(workers, index):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(index + 1))), axis=None)
    return {"replicas": int(strategy.num_replicas_in_sync), "task": strategy.cluster_resolver.task_id,
            "total": float(total)}

print(json.dumps([r.plain() for r in tf_workers.run(work, 2, timeout_s=120)]))
"""


@pytest.mark.slow
def test_tensorflow_workers_form_one_cluster() -> None:
    pytest.importorskip("tensorflow")
    # A fresh interpreter: the workers must fork from a process whose TensorFlow runtime has not started.
    done = subprocess.run([sys.executable, "-c", CLUSTER], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["value"] for r in results] == [
        {"replicas": 2, "task": 0, "total": 3.0},
        {"replicas": 2, "task": 1, "total": 3.0},
    ], results
