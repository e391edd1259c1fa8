"""Where a warm TensorFlow grading's time goes: ``.venv/bin/python -m benchmarks.tf_floor [--runs N]``.

A warm template has imported TensorFlow and split the CPU into two logical devices before it forks
(``worker/runner/vdev/tf_devices.py``); everything after that is paid per grading, because TensorFlow's
runtime starts threads that a fork cannot carry. This harness replays, in a fresh process per run, what
``tf-mirrored-scope``'s reference solution and its probes do after that point, and times each step:
the template's part (import, device split: shown, not paid by a warm job), then the job's part: the
runtime's start with the strategy, the model built and compiled under its scope, the probes' first predict,
the first ``model.fit`` step under ``MirroredStrategy``, and a second one (what the first would cost once
Keras' train function and distributed dataset exist). The sum of the job's steps is the floor a warm
grading cannot go below without sharing a started runtime between learners. Results go to stdout as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from benchmarks.common import pct

_STEPS = r"""
import json, os, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
marks = [("start", time.perf_counter())]
def mark(name):
    marks.append((name, time.perf_counter()))
from worker.runner.vdev.tf_devices import setup_tensorflow
import numpy as np
setup_tensorflow(2)
import tensorflow as tf
mark("import_and_split")
strategy = tf.distribute.MirroredStrategy()
mark("runtime_and_strategy")
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(20,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
mark("build_and_compile")
x = np.random.default_rng(0).standard_normal((64, 20)).astype("float32")
model(x[:64])
mark("first_call")
y = np.arange(8) % 10
model.fit(x[:8], y, batch_size=8, epochs=1, verbose=0, shuffle=False)
mark("first_fit")
model.fit(x[:8], y, batch_size=8, epochs=1, verbose=0, shuffle=False)
mark("second_fit")
print(json.dumps({b[0]: b[1] - a[1] for a, b in zip(marks, marks[1:])}))
"""

JOB_STEPS = ("runtime_and_strategy", "build_and_compile", "first_call", "first_fit")


def measure(runs: int) -> dict[str, Any]:
    """Run the steps ``runs`` times, each in a fresh interpreter; return each step's median and p95."""
    samples: list[dict[str, float]] = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _STEPS], capture_output=True, text=True, check=True)
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    steps = {name: {"p50_s": pct([s[name] for s in samples], 50), "p95_s": pct([s[name] for s in samples], 95)}
             for name in samples[0]}  # fmt: skip
    floor = [sum(s[name] for name in JOB_STEPS) for s in samples]
    return {"runs": runs, "steps": steps, "job_floor_p50_s": pct(floor, 50), "job_floor_p95_s": pct(floor, 95)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tf_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.runs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
