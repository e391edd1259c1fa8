"""Hidden tests for tf-capstone. They run in the judge, with NumPy only.

The probe runs train(strategy) once per grading on the real 2-replica MirroredStrategy and reports what it returned
and what it did (probes.py says what, and how). The judge recomputes the converted training itself: the same MLP
from build_model()'s seeded weights, plain SGD at the scaled rate on global batches of BATCH x 2 in the dataset's
order, the loss of each step the mean cross-entropy of its global batch. On the CPU stand-in TensorFlow's weights
matched this to about 2e-7; the unconverted script (batches of 32 at LR) ends about 1e-3 away.
"""

import re

import numpy as np
import pytest
from probes import BATCH, EPOCHS, LR, N_TRAIN, N_VAL, TARGET, make_data

REPLICAS = 2
GLOBAL_BATCH = BATCH * REPLICAS
SCALED_LR = LR * REPLICAS
STEPS_PER_EPOCH = N_TRAIN // GLOBAL_BATCH
WEIGHT_TOL, LOSS_TOL = 1e-5, 1e-4
_RUN = {}  # one training run per grading; every test reads it


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        pytest.fail(message, pytrace=False)


def _first_line(message):
    """The line of a TensorFlow error that says what went wrong (a tf.function error starts with a trace)."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if lines and lines[0].startswith("in user code"):
        named = [line for line in lines if re.match(r"^\w+(Error|Exception):?( |$)", line)]
        if named:
            return named[-1].partition(":")[2].strip().rstrip(" :{")[:300]
    return (lines or [""])[0][:300]


def _reference(initial, lr, batch, *, every_epoch=False):
    """Final weights and the last epoch's mean per-example loss of SGD on the MLP, as one device computes them
    (with every_epoch: each epoch's mean loss, in a list)."""
    (x, y), _ = make_data()
    x = x.astype("float64")
    w1, b1, w2, b2 = (np.asarray(w, dtype="float64") for w in initial)
    means = []
    for _ in range(EPOCHS):
        losses = []
        for start in range(0, len(x), batch):
            xb, yb = x[start:start + batch], y[start:start + batch]
            hidden = np.maximum(xb @ w1 + b1, 0)
            logits = hidden @ w2 + b2
            logits = logits - logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            losses.extend(-np.log(p[np.arange(len(yb)), yb]))
            g = p.copy()
            g[np.arange(len(yb)), yb] -= 1
            g /= len(yb)
            gh = g @ w2.T * (hidden > 0)
            w2, b2 = w2 - lr * hidden.T @ g, b2 - lr * g.sum(axis=0)
            w1, b1 = w1 - lr * xb.T @ gh, b1 - lr * gh.sum(axis=0)
        means.append(float(np.mean(losses)))
    return [w1, b1, w2, b2], (means if every_epoch else means[-1])


def _run(probe):
    if "seen" not in _RUN:
        _RUN["initial"] = probe("initial_weights")  # the grader's own build_model(): nothing of the learner's runs
        try:
            _RUN["seen"] = probe("run")
        except Exception as exc:
            pytest.fail(f"running train(strategy) failed: {type(exc).__name__}: {_first_line(exc)}", pytrace=False)
    return _RUN["seen"]


def _scope_problem(seen):
    outside = [i for i, in_scope in enumerate(seen["builds"]) if not in_scope]
    if outside:
        return ("build_model() was called outside strategy.scope(), so the model's variables are not mirrored: "
                "create the model inside `with strategy.scope():`.")
    if any(not o["in_scope"] for o in seen["optimizers"]):
        return ("the optimizer was created outside strategy.scope(): its variables (the step counter, any slots) "
                "belong to no strategy. Create it inside `with strategy.scope():` with the model.")
    return None


def _returned(seen):
    """The run's result, or fail with what went wrong (the error, or the shape of what came back)."""
    if seen["error"]:
        err = seen["error"]
        hint = ""
        if err["type"] == "AssertionError" and _scope_problem(seen):
            hint = " TensorFlow 2.21 raises this bare AssertionError when gradients are applied to variables made "\
                   "outside the strategy's scope. " + _scope_problem(seen)
        text = _first_line(err["message"]).rstrip(".")
        said = f"train(strategy) raised {err['type']}" + (f": {text}." if text else " (with no message).")
        pytest.fail(said + hint, pytrace=False)
    _expect(seen.get("keys") is not None and "weights" in seen, (
        f"train(strategy) returned {seen.get('returned')} with keys {seen.get('keys')}; return the script's dict, "
        "{\"model\": model, \"train_loss\": ..., \"val_accuracy\": ...}, with the trained Keras model."
    ))
    return seen


def _weights(seen):
    return [np.asarray(w, dtype="float64") for w in seen["weights"]]


def _diff(a, b):
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def _train_passes(seen):
    """The noted passes over the training set: per pass, per step, per replica, the example ids."""
    passes = {}
    for b in seen["batches"]:
        if "replicas" in b and any(0 <= i < N_TRAIN for r in b["replicas"] for i in r):
            passes.setdefault(b["pass"], []).append(b["replicas"])
    return [passes[k] for k in sorted(passes)]


def _batch_problem(seen):
    """Say how the training batches differ from BATCH per replica, one share each, STEPS_PER_EPOCH steps, or None."""
    trained_apart = _diff(_weights(seen), _reference(_RUN["initial"], SCALED_LR, GLOBAL_BATCH)[0]) >= WEIGHT_TOL
    if seen["runs"]["plain"] and trained_apart:
        shape = seen["plain_shape"]
        return (f"strategy.run got plain tensors{f' of shape {shape}' if shape else ''}, not per-replica values: "
                "every replica then gets the whole batch, so each example counts once per replica. Feed "
                "strategy.run the batches of strategy.experimental_distribute_dataset (or "
                "distribute_datasets_from_function), which give each replica its own slice.")
    passes = _train_passes(seen)
    if not passes:
        return None
    steps = passes[0]
    sizes = sorted({len(r) for step in steps for r in step})
    if sizes != [BATCH]:
        return (f"each replica took {' or '.join(map(str, sizes))} examples per step; keep the script's BATCH = {BATCH} "
                f"per replica, so that a step learns from a global batch of BATCH * strategy.num_replicas_in_sync = "
                f"{GLOBAL_BATCH}. Batch the dataset by that global batch for experimental_distribute_dataset (it "
                "splits each batch among the replicas), or by BATCH in distribute_datasets_from_function.")
    ids = [i for step in steps for r in step for i in r]
    if sorted(ids) != list(range(N_TRAIN)) or len(steps) != STEPS_PER_EPOCH:
        return (f"the first epoch took {len(steps)} steps over {len(ids)} examples ({len(set(ids))} different); one "
                f"epoch is each of the {N_TRAIN} training examples once, {STEPS_PER_EPOCH} steps of {GLOBAL_BATCH}.")
    return None


def _in_order(seen):
    """Whether the first noted training epoch took the examples in the dataset's order (replica by replica)."""
    passes = _train_passes(seen)
    return bool(passes) and [i for step in passes[0] for r in step for i in r] == list(range(N_TRAIN))


def _lr(seen):
    trained = [o for o in seen["optimizers"] if o["iterations"] > 0]
    return trained[0]["learning_rate"] if trained else None


def test_builds_in_scope(probe):
    seen = _run(probe)
    problem = _scope_problem(seen)
    _expect(problem is None, problem)
    _returned(seen)
    kinds = seen["variable_types"]
    _expect(kinds == ["MirroredVariable"], (
        f"the returned model's variables are {', '.join(kinds)}, not MirroredVariable: build it with build_model() "
        "inside strategy.scope()."
    ))


def test_feeds_each_replica_its_share(probe):
    seen = _returned(_run(probe))
    problem = _batch_problem(seen)
    if problem is None and not _train_passes(seen):
        # Batches taken inside a tf.function are not seen: the recomputed weights decide.
        diff = _diff(_weights(seen), _reference(_RUN["initial"], SCALED_LR, GLOBAL_BATCH)[0])
        problem = None if diff < WEIGHT_TOL else (
            "The batches could not be seen (none was taken from a distributed dataset in a Python loop), and the "
            f"final weights differ from training on global batches of {GLOBAL_BATCH} by up to {diff:.3g}, so this "
            "test cannot confirm the batches.")
    _expect(problem is None, problem)


def test_scales_the_learning_rate(probe):
    seen = _returned(_run(probe))
    lr = _lr(seen)
    _expect(lr is not None, "no optimizer made during train(strategy) took a step; train with an optimizer.")
    _expect(abs(lr - SCALED_LR) < 1e-9, (
        f"the optimizer's learning rate is {lr:g}. A step now learns from {GLOBAL_BATCH} examples instead of the "
        f"script's {BATCH}, and an epoch has half as many steps: the linear scaling rule multiplies the rate by the "
        f"same factor as the batch, LR * strategy.num_replicas_in_sync = {SCALED_LR:g}."
    ))


def test_trains_like_one_device_on_the_global_batch(probe):
    seen = _returned(_run(probe))
    want, _ = _reference(_RUN["initial"], SCALED_LR, GLOBAL_BATCH)
    diff = _diff(_weights(seen), want)
    if diff < WEIGHT_TOL:
        return
    said = (f"the final weights differ by up to {diff:.3g} from {EPOCHS} epochs of SGD({SCALED_LR:g}) on global "
            f"batches of {GLOBAL_BATCH} in the dataset's order, computed on one device.")
    lr = _lr(seen)
    steps = max((o["iterations"] for o in seen["optimizers"]), default=0)
    if _scope_problem(seen):
        why = " " + _scope_problem(seen)
    elif _batch_problem(seen):
        why = " The batches were not the expected global batches (see the test on the replicas' shares)."
    elif lr is not None and abs(lr - SCALED_LR) >= 1e-9:
        why = f" The learning rate was {lr:g}, not {SCALED_LR:g} (see the learning-rate test)."
    elif steps != EPOCHS * STEPS_PER_EPOCH:
        why = f" The optimizer took {steps} steps, not {EPOCHS * STEPS_PER_EPOCH} ({EPOCHS} epochs of {STEPS_PER_EPOCH})."
    elif _train_passes(seen) and not _in_order(seen):
        why = (" The first epoch did not take the examples in the dataset's order: keep the order (no shuffle), the "
               "grader recomputes the training in it.")
    elif _train_passes(seen):
        why = (" The batches, their order, the rate and the number of steps were right, so the difference is in the "
               "step itself. The usual cause: in each replica, divide the sum of its per-example losses by the global "
               f"batch (tf.nn.compute_average_loss(per_example, global_batch_size={GLOBAL_BATCH})), not by the "
               "replica's own batch (tf.reduce_mean): the strategy sums the replicas' gradients. Otherwise check the "
               "loss (sparse categorical cross-entropy from logits) and the optimizer (plain SGD).")
    else:
        why = (" Check each replica's loss (divided by the global batch: tf.nn.compute_average_loss(per_example, "
               f"global_batch_size={GLOBAL_BATCH})), the batches and the order of the data (no shuffle).")
    pytest.fail(said + why, pytrace=False)


def test_reaches_the_target_accuracy(probe):
    seen = _returned(_run(probe))
    accuracy = seen["probe_val_accuracy"]
    _expect(accuracy is not None, f"the returned model could not be evaluated: {seen.get('probe_error')}.")
    steps = max((o["iterations"] for o in seen["optimizers"]), default=0)
    budget = EPOCHS * STEPS_PER_EPOCH
    _expect(steps <= budget, (
        f"the optimizer took {steps} steps; the script's budget is {EPOCHS} epochs, {budget} steps of "
        f"{GLOBAL_BATCH} examples on {REPLICAS} replicas."
    ))
    lr = _lr(seen)
    hint = (f" With the unscaled rate ({lr:g}) each epoch's half as many steps learn too little: scale it to "
            f"{SCALED_LR:g}." if lr is not None and lr < SCALED_LR - 1e-9 else "")
    _expect(accuracy >= TARGET, (
        f"the trained model classifies {accuracy:.1%} of the {N_VAL} validation examples correctly; the target is "
        f"{TARGET:.0%} within {EPOCHS} epochs, as the script reaches on one device.{hint}"
    ))


def test_reports_the_validation_accuracy(probe):
    seen = _returned(_run(probe))
    got, want = seen["val_accuracy"], seen["probe_val_accuracy"]
    _expect(got is not None, "the returned val_accuracy is not a number; return float(val_accuracy.result()).")
    _expect(want is not None and abs(got - want) < 0.5 / N_VAL, (
        f"train returned val_accuracy {got:.4f}, but the returned model classifies {want:.4f} of all {N_VAL} "
        "validation examples correctly. Update a SparseCategoricalAccuracy made in strategy.scope() inside "
        "strategy.run, on every replica's slice of the validation batches, and read result() outside strategy.run "
        "after the last batch: it then counts every replica's examples."
    ))


def test_reports_the_training_loss(probe):
    seen = _returned(_run(probe))
    got = seen["train_loss"]
    _, want = _reference(_RUN["initial"], SCALED_LR, GLOBAL_BATCH)
    _expect(got is not None, "the returned train_loss is not a number; return float(train_loss.result()).")
    if abs(got - want) <= LOSS_TOL * max(1.0, abs(want)):
        return
    if _diff(_weights(seen), _reference(_RUN["initial"], SCALED_LR, GLOBAL_BATCH)[0]) >= WEIGHT_TOL:
        pytest.fail(f"train returned train_loss {got:.5f}; the converted training's last epoch has a mean loss of "
                    f"{want:.5f}, but the training itself differs (see the test on the final weights), so the loss "
                    "cannot be checked apart from it.", pytrace=False)
    _, means = _reference(_RUN["initial"], SCALED_LR, GLOBAL_BATCH, every_epoch=True)
    close = lambda value: abs(got - value) <= LOSS_TOL * max(1.0, abs(value))  # noqa: E731
    said = f"train returned train_loss {got:.5f}, but the mean per-example loss of the last epoch is {want:.5f}."
    if close(float(np.mean(means))):
        pytest.fail(said + f" {got:.5f} is the mean over all {EPOCHS} epochs: the Mean metric kept counting. Call "
                    "train_loss.reset_state() at the start of every epoch.", pytrace=False)
    if close(want / REPLICAS):
        pytest.fail(said + f" {got:.5f} is that divided by the {REPLICAS} replicas: the metric was given the loss "
                    "scaled for the gradients (each replica's share of the mean, from compute_average_loss). Give it "
                    "the per-example losses instead: train_loss.update_state(per_example), inside strategy.run.",
                    pytrace=False)
    pytest.fail(said + " Feed a keras.metrics.Mean made in strategy.scope() the per-example losses of every step, "
                "inside strategy.run, reset it at the start of each epoch, and read result() after the epoch.",
                pytrace=False)
