"""TensorFlow on logical CPU devices: one subprocess forks a child after ``setup_tensorflow(2)`` and reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

WORKER_DIR = Path(__file__).resolve().parents[2] / "worker"

# Runs in a fresh interpreter: the template configures devices, then a forked child does all the TF work,
# as the subject's per-test children will. The child prints one JSON line of facts.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys, traceback
    from runner.vdev import tf_devices

    tf_devices.setup_tensorflow(2)
    facts = {"label": tf_devices.describe()}

    def child():
        import numpy as np
        import keras
        import tensorflow as tf

        s = tf.distribute.MirroredStrategy()
        facts["replicas"] = s.num_replicas_in_sync
        facts["devices"] = list(s.extended.worker_devices)
        facts["cross_device_ops"] = type(s.extended._cross_device_ops).__name__
        facts["v1_replicas"] = tf.compat.v1.distribute.MirroredStrategy().num_replicas_in_sync
        facts["explicit"] = tf.distribute.MirroredStrategy(["/cpu:0"]).num_replicas_in_sync
        facts["one_device"] = tf.distribute.OneDeviceStrategy("/cpu:0").num_replicas_in_sync
        facts["isinstance"] = isinstance(s, tf.distribute.MirroredStrategy)

        with s.scope():
            m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            m.compile(optimizer="adam", loss="mse")
        w = m.weights[0]
        facts["weight_value_type"] = type(w.value).__name__
        facts["in_scope"] = bool(s.extended.variable_created_in_scope(w.value))

        per = s.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32))
        local = s.experimental_local_results(per)
        facts["per_replica"] = [float(v) for v in local]
        facts["per_replica_devices"] = [v.device for v in local]
        facts["sum"] = float(s.reduce(tf.distribute.ReduceOp.SUM, per, axis=None))

        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 4)).astype("float32")
        y = x.sum(axis=1, keepdims=True)
        hist = m.fit(x, y, batch_size=16, epochs=2, verbose=0)
        facts["losses"] = hist.history["loss"]

        outside = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        with s.scope():
            outside.compile(optimizer="adam", loss="mse")
        try:
            outside.fit(x, y, batch_size=16, epochs=1, verbose=0)
            facts["outside_error"] = None
        except Exception as exc:
            facts["outside_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        with s.scope():
            again = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            again.compile(optimizer="adam", loss="mse")
        try:
            again.fit(x, y, batch_size=16, epochs=1, verbose=0)
            facts["after_failure_error"] = None
        except Exception as exc:
            facts["after_failure_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(facts), flush=True)

    pid = os.fork()
    if pid == 0:
        try:
            child()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)

    import tensorflow as tf
    tf.constant(1.0)  # the runtime is up now: configuring again must refuse
    try:
        tf_devices.setup_tensorflow(3)
        print(json.dumps({"late": None}))
    except RuntimeError as exc:
        print(json.dumps({"late": str(exc)}))
    """
)


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(WORKER_DIR), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=240)
    found: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            found.update(json.loads(line))
    assert "replicas" in found, proc.stdout[-2000:] + proc.stderr[-4000:]
    return found


pytestmark = pytest.mark.slow


def test_plain_mirrored_strategy_mirrors_over_two_logical_cpus(facts: dict[str, Any]) -> None:
    assert facts["replicas"] == 2
    assert facts["devices"] == [
        "/job:localhost/replica:0/task:0/device:CPU:0",
        "/job:localhost/replica:0/task:0/device:CPU:1",
    ]
    assert facts["v1_replicas"] == 2
    assert facts["isinstance"] is True
    assert facts["label"] == "2 virtual CPU replicas"


def test_explicit_devices_and_one_device_strategy_are_left_alone(facts: dict[str, Any]) -> None:
    assert facts["explicit"] == 1
    assert facts["one_device"] == 1


def test_keras_weights_built_in_scope_are_mirrored(facts: dict[str, Any]) -> None:
    assert facts["weight_value_type"] == "MirroredVariable"
    assert facts["in_scope"] is True


def test_run_gives_one_value_per_device_and_reduce_sums_them(facts: dict[str, Any]) -> None:
    assert facts["per_replica"] == [1.0, 2.0]
    assert [d.rsplit(":", 2)[-2:] for d in facts["per_replica_devices"]] == [["CPU", "0"], ["CPU", "1"]]
    assert facts["sum"] == 3.0
    assert facts["cross_device_ops"] == "CollectiveAllReduce"


def test_fit_runs_on_two_replicas_and_learns(facts: dict[str, Any]) -> None:
    losses = facts["losses"]
    assert len(losses) == 2 and losses[1] < losses[0]


def test_model_built_outside_scope_fails_to_fit(facts: dict[str, Any]) -> None:
    assert facts["outside_error"] is not None
    print(facts["outside_error"], facts["after_failure_error"])


def test_setup_after_runtime_start_is_refused(facts: dict[str, Any]) -> None:
    assert facts["late"] and "before TensorFlow starts" in facts["late"]
