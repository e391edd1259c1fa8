"""Hidden tests for tf-fault-tolerance. They run in the judge, with NumPy only.

The probe trains with the learner's `train` on 2 replicas; for a kill it stops the first run with an exception
at the start of a batch and starts a second run, with a new model and the same backup_dir, as a restarted worker
would. A callback of the probe observes each run (the fit calls, the epochs, the weights and SGD's momentum when
the first epoch begins and at every epoch's end, the files in backup_dir, what the model's variables are); the
judge computes uninterrupted training here, SGD with momentum on the mean squared error of a Dense(1), and decides.
"""

import numpy as np
from probes import GLOBAL_BATCH, LR, MOMENTUM, data
from runner import feedback

EPOCHS = 4
KILL_EPOCH, KILL_BATCH = 2, 1
TOL = 1e-4
RESUMED = list(range(KILL_EPOCH, EPOCHS))


def trajectory(epochs):
    """[(weights, momentum)] at the end of every epoch of uninterrupted training, as Keras's SGD computes them."""
    x, y = (a.astype("float64") for a in data())
    kernel, bias = np.zeros((4, 1)), np.zeros(1)
    v_kernel, v_bias = np.zeros((4, 1)), np.zeros(1)
    ends = []
    for _ in range(epochs):
        for start in range(0, len(x), GLOBAL_BATCH):
            xb, yb = x[start:start + GLOBAL_BATCH], y[start:start + GLOBAL_BATCH]
            error = xb @ kernel + bias - yb
            g_kernel, g_bias = 2 * xb.T @ error / len(xb), 2 * error.sum(axis=0) / len(xb)
            v_kernel, v_bias = MOMENTUM * v_kernel - LR * g_kernel, MOMENTUM * v_bias - LR * g_bias
            kernel, bias = kernel + v_kernel, bias + v_bias
        ends.append(([kernel, bias], [v_kernel, v_bias]))
    return ends


def reference(epochs):
    """Kernel and bias after `epochs` uninterrupted epochs."""
    return trajectory(epochs)[-1][0]


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        feedback.fail(message)


MIXED = "Mixing different tf.distribute.Strategy objects"
DEFAULT_STRATEGY = "_DefaultDistributionStrategy"


def _call(probe, *args, what):
    try:
        return probe("run", *args)
    except Exception as exc:
        type_name = getattr(exc, "type_name", type(exc).__name__)
        message = str(exc.args[0]) if exc.args else ""
        told = feedback.raised(what, type_name, message)
        if MIXED in message and DEFAULT_STRATEGY in message:
            # TensorFlow names the two strategies; one is the default strategy: something made outside every scope.
            feedback.fail(
                told.message + " Here one of the two is TensorFlow's default strategy, the one in force outside "
                "every `with ...scope():`: the model (and its optimizer) was built outside the scope and then used "
                "inside it. The case that fits: build_and_compile() called outside `with strategy.scope():` while fit "
                "runs inside it. Call build_and_compile() inside the scope; fit may then run inside or outside it.",
                details=told.details,
            )
        feedback.fail(told)


def _diff(weights, want):
    return max(float(np.max(np.abs(np.asarray(w, dtype="float64") - np.asarray(v, dtype="float64"))))
               for w, v in zip(weights, want, strict=False))


def _momentum(seen, like):
    """The momentum a run observed, zeros where the optimizer had not made its slots yet (they start at zero)."""
    return seen if seen is not None else [np.zeros_like(np.asarray(w, dtype="float64")) for w in like]


def _weights(run, what):
    _expect(run["weights"] is not None, (
        f"{what} returned a {run['model']}; return the trained Keras model."
    ))
    return run["weights"]


_RUNS = {}  # the judge keeps one run of each kind per grading: the tests that read it share it


def _uninterrupted(probe, what):
    if "plain" not in _RUNS:
        _RUNS["plain"] = _call(probe, EPOCHS, what=what)
    return _RUNS["plain"]["first"]


def test_trains_without_interruption(probe):
    what = f"train(strategy, build_and_compile, dataset, epochs={EPOCHS}, backup_dir, callbacks) on 2 replicas"
    seen = _uninterrupted(probe, what)
    _expect(seen["epochs"] == list(range(EPOCHS)), (
        f"{what}: the callbacks saw the epochs {seen['epochs']}; expected {list(range(EPOCHS))}. Pass the "
        "callbacks argument to fit, with epochs=epochs."
    ))
    diff = _diff(_weights(seen, what), reference(EPOCHS))
    if diff < TOL:
        return
    feedback.fail(f"{what}: the weights differ from {EPOCHS} epochs of the compiled SGD by up to {diff:.3g}. "
                  + _why_off(seen))


def _why_off(run):
    """Why a run's training differed from SGD on the dataset as given: trained before its first epoch, or candidates."""
    start = run["start"] or {}
    if any(np.any(np.asarray(w)) for w in start.get("weights") or []):
        return (
            "When fit's first epoch began, the model was already trained (its weights were not the zeros "
            "build_and_compile() makes, and backup_dir was new): something trained it before that fit, such as an "
            "extra fit as a check, train_on_batch, or a checkpoint loaded from elsewhere. Every step counts: train "
            "only in the one fit with epochs=epochs (predict or evaluate change no weights)."
        )
    return (
        "The model began its first epoch from the initial zeros, so the steps themselves differed. Candidates: the "
        "data changed on the way to fit (shuffled, repeated, re-batched or cut: fit on `dataset` as given, in its "
        "order), or the model was recompiled or changed (fit the model that build_and_compile() returns, as it is "
        "compiled)."
    )


def test_builds_under_the_given_strategy(probe):
    what = f"train(strategy, build_and_compile, dataset, epochs={EPOCHS}, backup_dir, callbacks) on 2 replicas"
    seen = _uninterrupted(probe, what)
    variables = seen["variables"] or seen.get("returned_variables")
    _expect(bool(variables), (
        f"{what}: the model's variables could not be observed: the callbacks given to train never ran, and train "
        f"returned a {seen['model']}, not the model. Pass the callbacks argument to fit and return the trained model."
    ))
    kinds = sorted({v["type"] for v in variables})
    if kinds != ["MirroredVariable"]:
        feedback.fail(
            f"{what}: the weights of the model fit trained are {', '.join(kinds)}, not MirroredVariable: they were "
            "not created under the scope of the strategy train was given, so the model is not mirrored over the 2 "
            "replicas (fit trains a single copy). Call build_and_compile() inside "
            "`with strategy.scope():`, with the strategy argument."
        )
    _expect(all(v["in_scope"] for v in variables), (
        f"{what}: the model's weights are MirroredVariables, but of another strategy than the one train was given. "
        "Build and compile under `with strategy.scope():` of the strategy argument; do not make a strategy of your "
        "own (the caller chose the devices, or the cluster, the model must be mirrored over)."
    ))


def _killed_and_restarted(probe, what):
    if "killed" not in _RUNS:
        _RUNS["killed"] = _call(probe, EPOCHS, KILL_EPOCH, KILL_BATCH, what=what)
    seen = _RUNS["killed"]
    first = seen["first"]
    _expect(not (first["raised"] and not first["killed"]), (
        f"{what}: the given callback raised an exception at the start of batch {KILL_BATCH} of epoch {KILL_EPOCH} "
        "(that is how the test kills the worker), but train returned normally: your code caught it. A killed run "
        "must stop: do not wrap fit in try/except, let the exception propagate."
    ))
    _expect(first["killed"], (
        f"{what}: the first run was never stopped, so the callbacks given to train did not run (they stop it in "
        f"epoch {KILL_EPOCH}). Pass the callbacks argument to fit."
    ))
    return seen


def test_resumes_from_the_last_completed_epoch(probe):
    what = (f"train(..., epochs={EPOCHS}, backup_dir, callbacks), killed in epoch {KILL_EPOCH} (at its batch "
            f"{KILL_BATCH}) and started again with the same backup_dir")
    seen = _killed_and_restarted(probe, what)
    first, second = seen["first"], seen["second"]
    files = first["files"]
    if not files and first.get("files_at_kill"):
        feedback.fail(
            f"{what}: when the kill came, backup_dir held {first['files_at_kill'][:4]}, but once train had stopped it "
            "was empty: your code deleted the backup on the way out (a `finally:` or `except:` that removes "
            "backup_dir, or a cleanup callback), so the restarted worker had nothing to resume from. Keras deletes "
            "the backup itself when a fit finishes normally; never delete it when training stops with an exception."
        )
    if not files and first["fits"] > 1:
        feedback.fail(
            f"{what}: when the first run was killed, backup_dir held no files, and train had called fit "
            f"{first['fits']} times in that run. BackupAndRestore deletes its backup whenever a fit ends normally, so "
            "with one fit per epoch nothing is left when a run is killed: call fit once, with epochs=epochs (and, if "
            "no fit was given a BackupAndRestore(backup_dir), nothing was saved there at all)."
        )
    _expect(files, (
        f"{what}: when the first run was killed, backup_dir held no files, so a restarted worker had nothing to "
        "resume from. Pass keras.callbacks.BackupAndRestore(backup_dir) to fit, with the backup_dir you were given "
        "(it saves at the end of every epoch)."
    ))
    if second["epochs"] == RESUMED:
        return
    said = (f"{what}: backup_dir held {files[:4]} after the kill, but the second run went through the epochs "
            f"{second['epochs']}; expected {RESUMED}: epochs 0-{KILL_EPOCH - 1} were complete, and epoch "
            f"{KILL_EPOCH} starts again from its beginning.")
    start = second["start"] or {}
    initial = all(not np.any(np.asarray(w)) for w in start.get("weights") or [])
    if second["epochs"][:1] == [0] and not initial:
        feedback.fail(
            f"{said} The second run did restore a trained state (its weights were not the initial zeros when epoch 0 "
            "began) but then trained every epoch again: restoring is half of resuming. Start fit at the number of "
            "completed epochs (initial_epoch=...), or let BackupAndRestore(backup_dir) do both."
        )
    if second["epochs"][:1] == [0] and not start.get("files"):
        feedback.fail(
            f"{said} When the second run's first epoch began, backup_dir held no files: what the killed run left "
            "there was gone, so it did not restore from backup_dir. Keep what is there when a run starts (do not "
            "delete or replace it), and let BackupAndRestore(backup_dir) restore it."
        )
    if second["epochs"][:1] == [0]:
        folders = sorted({f.split("/")[0] for f in start["files"]})
        sub = ""
        if all("/" in f for f in start["files"]):
            sub = (f" Everything in it lies in the subfolder(s) {folders[:3]}: if the folder your code backs up to is "
                   "named after something that changes when a worker restarts (its process id, the time, a random "
                   "name), the restarted run looks in a new, empty folder. Give BackupAndRestore backup_dir itself.")
        feedback.fail(
            f"{said} backup_dir still held {start['files'][:4]} when the second run began, but it started from the "
            "initial weights: it did not restore from backup_dir."
            + (sub or " Let BackupAndRestore(backup_dir) restore it (or restore your own checkpoint and pass "
               "initial_epoch to fit).")
        )
    if second["epochs"] and 0 < second["epochs"][0] < KILL_EPOCH:
        feedback.fail(
            f"{said} It resumed at epoch {second['epochs'][0]}, so it trained a completed epoch again: the epoch to "
            f"start at is the number of epochs completed (at the end of epoch e, e + 1 are done)."
        )
    feedback.fail(said)


def test_resumed_training_matches_uninterrupted(probe):
    what = (f"training killed in epoch {KILL_EPOCH} and resumed with the same backup_dir (SGD with momentum "
            f"{MOMENTUM})")
    seen = _killed_and_restarted(probe, what)
    first, second = seen["first"], seen["second"]
    diff = _diff(_weights(second, what), reference(EPOCHS))
    if diff < TOL:
        return
    said = (f"after {what} the weights differ from {EPOCHS} uninterrupted epochs by up to {diff:.3g}; resuming must "
            "give the same model as never being killed.")
    if second["epochs"] != RESUMED:
        feedback.fail(f"{said} The second run went through the epochs {second['epochs']}, not {RESUMED} (see the "
                      "test of the epochs), so it did not train what an uninterrupted run trains after the kill.")
    ends = trajectory(KILL_EPOCH)
    for epoch in range(KILL_EPOCH):
        end = first["ends"].get(str(epoch))
        if end is None:
            continue
        off = _diff(end["weights"], ends[epoch][0])
        if off >= TOL:
            feedback.fail(
                f"{said} The first run already differed before the kill: at the end of epoch {epoch} its weights "
                f"differed from SGD on the dataset as given by up to {off:.3g}. " + _why_off(first)
            )
    saved = first["ends"].get(str(KILL_EPOCH - 1))
    start = second["start"]
    if saved is None or start is None:
        feedback.fail(said)
    off = _diff(start["weights"], saved["weights"])
    if off >= TOL:
        feedback.fail(
            f"{said} When the second run began epoch {KILL_EPOCH}, its weights were not those the killed run had at "
            f"the end of epoch {KILL_EPOCH - 1} (they differ by up to {off:.3g}): it resumed from a state of another "
            "point. One cause: a backup taken during an epoch (save_freq as a number of batches); Keras restores the "
            "epoch, not the batch, so the cut-short epoch is trained again on top of weights that already hold part "
            "of it. Back up at the end of every epoch (BackupAndRestore's default save_freq=\"epoch\")."
        )
    momentum = _momentum(start["momentum"], saved["weights"])
    off = _diff(momentum, _momentum(saved["momentum"], saved["weights"]))
    if off >= TOL:
        zero = all(not np.any(np.asarray(m)) for m in momentum)
        got = "all zero" if zero else f"different, by up to {off:.3g}"
        feedback.fail(
            f"{said} The run resumed at the right epoch with the right weights, but SGD's momentum was {got} when "
            f"epoch {KILL_EPOCH} began again, not what it was at the end of epoch {KILL_EPOCH - 1}: the optimizer's "
            "state must come back too. Keras 3's load_weights skips the optimizer variables of a weights file when "
            "the model's optimizer has not been built yet (it warns \"Skipping variable loading for optimizer\"); "
            "BackupAndRestore restores both."
        )
    feedback.fail(
        f"{said} The second run began epoch {KILL_EPOCH} with the weights and SGD's momentum the killed run had at the "
        f"end of epoch {KILL_EPOCH - 1}, and trained the epochs {RESUMED}, yet ended elsewhere: fit the restored model "
        "as it is compiled, on the dataset as given."
    )
