"""Hidden tests for tf-fault-tolerance. They run in the judge, with NumPy only.

The probe trains with the learner's `train` on 2 replicas; for a kill it stops the first run with an exception
at the start of a batch and starts a second run, with a new model and the same backup_dir, as a restarted worker
would. The judge computes uninterrupted training here: SGD with momentum on the mean squared error of a Dense(1).
"""

import re

import numpy as np
import pytest
from probes import GLOBAL_BATCH, LR, MOMENTUM, data

EPOCHS = 4
KILL_EPOCH, KILL_BATCH = 2, 1
TOL = 1e-4


def reference(epochs):
    """Kernel and bias after `epochs` uninterrupted epochs, as Keras's SGD(momentum) computes them."""
    x, y = (a.astype("float64") for a in data())
    kernel, bias = np.zeros((4, 1)), np.zeros(1)
    v_kernel, v_bias = np.zeros((4, 1)), np.zeros(1)
    for _ in range(epochs):
        for start in range(0, len(x), GLOBAL_BATCH):
            xb, yb = x[start:start + GLOBAL_BATCH], y[start:start + GLOBAL_BATCH]
            error = xb @ kernel + bias - yb
            g_kernel, g_bias = 2 * xb.T @ error / len(xb), 2 * error.sum(axis=0) / len(xb)
            v_kernel, v_bias = MOMENTUM * v_kernel - LR * g_kernel, MOMENTUM * v_bias - LR * g_bias
            kernel, bias = kernel + v_kernel, bias + v_bias
    return [kernel, bias]


def _first_line(exc):
    """The line of an exception's text that says what went wrong (a tf.function error starts with a trace)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and lines[0].startswith("in user code"):
        named = [line for line in lines if re.match(r"^\w+(Error|Exception): ", line)]
        if named:  # drop the type (the caller names it) and an opening brace of a value dump
            return named[-1].split(": ", 1)[1].rstrip(" :{")[:300]
    return (lines or [""])[0][:300]


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        pytest.fail(message, pytrace=False)


def _call(probe, *args, what):
    try:
        return probe("run", *args)
    except Exception as exc:
        first = _first_line(exc)
        pytest.fail(f"{what} raised {type(exc).__name__}: {first.rstrip('.')}.")


def _diff(weights, want):
    return max(float(np.max(np.abs(np.asarray(w, dtype="float64") - v))) for w, v in zip(weights, want))


def _weights(run, what):
    _expect(run["weights"] is not None, (
        f"{what} returned a {run['model']}; return the trained Keras model."
    ))
    return run["weights"]


def test_trains_without_interruption(probe):
    what = f"train(strategy, build_and_compile, dataset, epochs={EPOCHS}, backup_dir, callbacks) on 2 replicas"
    seen = _call(probe, EPOCHS, what=what)["first"]
    _expect(seen["epochs"] == list(range(EPOCHS)), (
        f"{what}: the callbacks saw the epochs {seen['epochs']}; expected {list(range(EPOCHS))}. Pass the "
        "callbacks argument to fit, with epochs=epochs."
    ))
    diff = _diff(_weights(seen, what), reference(EPOCHS))
    _expect(diff < TOL, (
        f"{what}: the weights differ from {EPOCHS} epochs of the compiled SGD by up to {diff:.3g}. Fit the model "
        "that build_and_compile() returns, as it is compiled, on the dataset as given."
    ))


_KILLED_RUNS = {}  # the judge keeps one kill-and-restart per grading: both tests below read the same run


def _killed_and_restarted(probe, what):
    if "seen" not in _KILLED_RUNS:
        _KILLED_RUNS["seen"] = _call(probe, EPOCHS, KILL_EPOCH, KILL_BATCH, what=what)
    seen = _KILLED_RUNS["seen"]
    first = seen["first"]
    _expect(first["killed"], (
        f"{what}: the first run was never stopped, so the callbacks given to train did not run (they stop it in "
        f"epoch {KILL_EPOCH}). Pass the callbacks argument to fit."
    ))
    return seen


def test_resumes_from_the_last_completed_epoch(probe):
    what = (f"train(..., epochs={EPOCHS}, backup_dir, callbacks), killed in epoch {KILL_EPOCH} (at its batch "
            f"{KILL_BATCH}) and started again with the same backup_dir")
    seen = _killed_and_restarted(probe, what)
    files, second = seen["first"]["files"], seen["second"]
    _expect(files, (
        f"{what}: when the first run was killed, backup_dir held no files: nothing was saved there, so a restarted "
        "worker has nothing to resume from. Pass keras.callbacks.BackupAndRestore(backup_dir) to fit, with the "
        "backup_dir you were given (it saves at the end of every epoch)."
    ))
    _expect(second["epochs"] == list(range(KILL_EPOCH, EPOCHS)), (
        f"{what}: backup_dir held {files[:4]} after the kill, but the second run went through the epochs "
        f"{second['epochs']}; expected {list(range(KILL_EPOCH, EPOCHS))}: epochs 0-{KILL_EPOCH - 1} were complete, "
        f"and epoch {KILL_EPOCH} starts again from its beginning."
        + (" It did not restore from backup_dir: keep what is there when a run starts (do not delete or replace "
           "it), and let BackupAndRestore(backup_dir) restore it." if second["epochs"][:1] == [0] else "")
    ))


def test_resumed_training_matches_uninterrupted(probe):
    what = (f"training killed in epoch {KILL_EPOCH} and resumed with the same backup_dir (SGD with momentum "
            f"{MOMENTUM})")
    seen = _killed_and_restarted(probe, what)
    second = seen["second"]
    diff = _diff(_weights(second, what), reference(EPOCHS))
    hint = ""
    if second["epochs"] == list(range(KILL_EPOCH, EPOCHS)):
        hint = (" The run resumed at the right epoch, so the difference is in the state it resumed from: the weights "
                "and the optimizer's state (SGD's momentum) must both come back. Keras 3's load_weights skips the "
                "optimizer variables of a weights file when the model's optimizer has not been built yet (it warns "
                "\"Skipping variable loading for optimizer\"); BackupAndRestore restores both.")
    _expect(diff < TOL, (
        f"after {what} the weights differ from {EPOCHS} uninterrupted epochs by up to {diff:.3g}; resuming must "
        f"give the same model as never being killed.{hint}"
    ))
