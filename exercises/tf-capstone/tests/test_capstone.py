"""Hidden tests for tf-capstone. They run in the judge, with NumPy only.

The probe runs train(strategy) once per grading on the real 2-replica MirroredStrategy and reports what it returned
and what it did (probes.py says what, and how). The judge recomputes the converted training itself: the same MLP
from build_model()'s seeded weights, plain SGD at the scaled rate on global batches of BATCH x 2 in the dataset's
order, the loss of each step the mean cross-entropy of its global batch. On the CPU stand-in TensorFlow's weights
matched this to about 2e-7; the unconverted script (batches of 32 at LR) ends about 1e-3 away.
"""

import re

import numpy as np
from probes import BATCH, EPOCHS, FEATURES, LR, N_TRAIN, N_VAL, TARGET, make_data
from runner import feedback

REPLICAS = 2
GLOBAL_BATCH = BATCH * REPLICAS
SCALED_LR = LR * REPLICAS
STEPS_PER_EPOCH = N_TRAIN // GLOBAL_BATCH
WEIGHT_TOL, LOSS_TOL = 1e-5, 1e-4
_RUN = {}  # one training run per grading; every test reads it
_REFERENCES = {}  # (rate, batch): the recomputed training


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        feedback.fail(message)


def _first_line(message):
    """The line of a TensorFlow error that says what went wrong (a tf.function error starts with a trace)."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if lines and lines[0].startswith("in user code"):
        named = [line for line in lines if re.match(r"^\w+(Error|Exception):?( |$)", line)]
        if named:
            return named[-1].partition(":")[2].strip().rstrip(" :{")[:300]
    return (lines or [""])[0][:300]


def _reference(lr, batch):
    """SGD on the MLP from build_model()'s starting weights, as one device computes it: the final weights, each
    epoch's weights and mean per-example loss, and the mean loss of the last step's batch."""
    if (lr, batch) in _REFERENCES:
        return _REFERENCES[lr, batch]
    (x, y), _ = make_data()
    x = x.astype("float64")
    w1, b1, w2, b2 = (np.asarray(w, dtype="float64") for w in _RUN["initial"])
    means, epoch_weights, last_step = [], [], None
    for _ in range(EPOCHS):
        losses = []
        for start in range(0, len(x), batch):
            xb, yb = x[start:start + batch], y[start:start + batch]
            hidden = np.maximum(xb @ w1 + b1, 0)
            logits = hidden @ w2 + b2
            logits = logits - logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            step_losses = -np.log(p[np.arange(len(yb)), yb])
            losses.extend(step_losses)
            last_step = float(np.mean(step_losses))
            g = p.copy()
            g[np.arange(len(yb)), yb] -= 1
            g /= len(yb)
            gh = g @ w2.T * (hidden > 0)
            w2, b2 = w2 - lr * hidden.T @ g, b2 - lr * g.sum(axis=0)
            w1, b1 = w1 - lr * xb.T @ gh, b1 - lr * gh.sum(axis=0)
        means.append(float(np.mean(losses)))
        epoch_weights.append([w1, b1, w2, b2])
    found = {"weights": [w1, b1, w2, b2], "loss": means[-1], "epoch_losses": means, "epoch_weights": epoch_weights,
             "last_step_loss": last_step}
    _REFERENCES[lr, batch] = found
    return found


def _val_accuracy(weights):
    """The fraction of the validation examples the MLP with these weights classifies correctly."""
    _, (x_val, y_val) = make_data()
    w1, b1, w2, b2 = weights
    logits = np.maximum(x_val.astype("float64") @ w1 + b1, 0) @ w2 + b2
    return float(np.mean(np.argmax(logits, axis=1) == y_val))


def _converted():
    """The converted training: SGD at the scaled rate on global batches."""
    return _reference(SCALED_LR, GLOBAL_BATCH)


def _run(probe):
    if "seen" not in _RUN:
        _RUN["initial"] = probe("initial_weights")  # the grader's own build_model(): nothing of the learner's runs
        try:
            _RUN["seen"] = probe("run")
        except Exception as exc:  # the learner's process died or could not answer: the runner's own words
            told = feedback.raised("running train(strategy)", type(exc).__name__, _first_line(exc))
            feedback.fail(told, details=str(exc))
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


def _unbatched(seen):
    """The datasets handed to experimental_distribute_dataset whose elements are single examples."""
    return [d for d in seen.get("distributed", ()) if d["api"] == "experimental_distribute_dataset"
            and d["shapes"] and d["shapes"][0] == [FEATURES]]


def _told_error(err, what="train(strategy)"):
    """The learner's exception as a sentence (its known failure class's, else its type and first line), and the
    framework's text for the details."""
    told = feedback.raised(what, err["type"], err["message"])
    if told.cause:  # the details: feedback.clean_details keeps only the learner's frames of a tf.function's trace
        return told.message, told.details
    text = _first_line(err["message"]).rstrip(".")
    said = f"{what} raised {err['type']}" + (f": {text}." if text else " (with no message).")
    return said, feedback.clean_details(f"{err['type']}: {err['message']}")


def _returned(seen):
    """The run's result, or fail with what went wrong (the error, or the shape of what came back)."""
    if seen["error"]:
        err = seen["error"]
        said, details = _told_error(err)
        if _unbatched(seen):
            said = (f"train(strategy) raised {err['type']}. strategy.experimental_distribute_dataset was given a "
                    f"dataset whose elements are single examples (features of shape ({FEATURES},)): the dataset was "
                    "not batched before it was distributed. The strategy splits each element, a global batch, among "
                    "the replicas, so batch first: "
                    "strategy.experimental_distribute_dataset(dataset.batch(global_batch)) (a .batch(...) on the "
                    "distributed dataset it returns comes too late).")
            if err["type"] == "IndexError":
                said += " TensorFlow 2.21 raises this IndexError for a dataset without a batch dimension."
        elif err["type"] == "AssertionError" and _scope_problem(seen):
            said += (" TensorFlow 2.21 raises this bare AssertionError when gradients are applied to variables made "
                     "outside the strategy's scope. " + _scope_problem(seen))
        feedback.fail(said, details=details)
    if seen.get("keys") is None:
        feedback.fail(f"train(strategy) returned a {seen.get('returned')}, not a dict; return the script's dict, "
                      "{\"model\": model, \"train_loss\": ..., \"val_accuracy\": ...}, with the trained Keras model.")
    _expect("weights" in seen, (
        f"train(strategy) returned a dict with keys {seen.get('keys')}, and its \"model\" is a {seen.get('model')}, "
        "not a Keras model; return the script's dict, {\"model\": model, \"train_loss\": ..., \"val_accuracy\": ...}, "
        "with the trained Keras model."
    ))
    return seen


def _weights(seen):
    return [np.asarray(w, dtype="float64") for w in seen["weights"]]


def _diff(a, b):
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return float("inf")
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _train_passes(seen):
    """The noted passes over the training set: per pass, per step, per replica, the example ids."""
    passes = {}
    for b in seen["batches"]:
        if "replicas" in b and any(0 <= i < N_TRAIN for r in b["replicas"] for i in r):
            passes.setdefault(b["pass"], []).append(b)
    return [[b["replicas"] for b in passes[k]] for k in sorted(passes)]


def _first_pass_from_function(seen):
    """Whether the first noted training pass came from distribute_datasets_from_function (None: not seen)."""
    notes = [b for b in seen["batches"] if "replicas" in b and any(0 <= i < N_TRAIN for r in b["replicas"] for i in r)]
    return notes[0].get("from_function") if notes else None


def _trained_right(seen):
    return _diff(_weights(seen), _converted()["weights"]) < WEIGHT_TOL


def _batch_problem(seen):
    """Say how the training batches differ from BATCH per replica, one share each, STEPS_PER_EPOCH steps, or None."""
    if seen["runs"]["plain"] and not _trained_right(seen):
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
        said = (f"each replica took {' or '.join(map(str, sizes))} examples per step; keep the script's "
                f"BATCH = {BATCH} per replica, so that a step learns from a global batch of "
                f"BATCH * strategy.num_replicas_in_sync = {GLOBAL_BATCH}.")
        from_function = _first_pass_from_function(seen)
        if from_function:
            return said + (" These batches came from distribute_datasets_from_function, where each replica's "
                           "pipeline is batched on its own: batch the dataset your dataset_fn returns by "
                           f"context.get_per_replica_batch_size(global_batch) = {BATCH}, not by the global batch.")
        if from_function is False:
            return said + (" These batches came from strategy.experimental_distribute_dataset, which splits each "
                           f"batch among the replicas: batch the dataset by the global batch, {GLOBAL_BATCH}.")
        return said + (" Batch the dataset by that global batch for experimental_distribute_dataset (it splits each "
                       "batch among the replicas), or by BATCH in distribute_datasets_from_function.")
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


def _a(kind):
    """A type's name with its article, as a learner knows it (an EagerTensor is a tf.Tensor)."""
    kind = {"EagerTensor": "tf.Tensor", "NoneType": "None"}.get(kind, str(kind))
    return kind if kind == "None" else ("an " if kind[:1].lower() in "aeiou" else "a ") + kind


def _check_float(seen, key, read):
    """The returned number `key`, after checking that it is a Python float, as the prompt asks."""
    got = seen[key]
    kind = seen.get("types", {}).get(key)
    _expect(got is not None, f"the returned {key} is {_a(kind)}, not a number; return float({read}).")
    _expect(seen.get("are_floats", {}).get(key, True), (
        f"the returned {key} is {_a(kind)} (value {got:.4f}), not a Python float; the prompt asks for Python floats, "
        f"as the script returns them: float({read})."
    ))
    return got


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
        diff = _diff(_weights(seen), _converted()["weights"])
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


def _doubled_step(seen):
    """Why the updates were twice the global mean gradient's, from what the probe saw (the weights matched SGD at
    twice the rate while the optimizer's rate was right)."""
    said = (f" They equal {EPOCHS} epochs of SGD({2 * SCALED_LR:g}) while the optimizer's rate was {SCALED_LR:g}: "
            "every update was twice the step of the global batch's mean gradient.")
    sizes = {c["global_batch_size"] for c in seen["average_loss"] if c["global_batch_size"] is not None}
    if seen["all_reduces"]:
        return said + (" Your replica function all-reduces values itself (ReplicaContext.all_reduce), and under "
                       "MirroredStrategy optimizer.apply_gradients already sums the replicas' gradients, so the "
                       "gradients were summed twice: remove the all_reduce of the gradients and pass each replica's "
                       "own gradients to apply_gradients.")
    if sizes == {BATCH}:
        return said + (f" tf.nn.compute_average_loss was given global_batch_size={BATCH}, each replica's own batch: "
                       "the strategy sums the replicas' gradients, so divide by the global batch, not by the "
                       f"replica's own batch: global_batch_size={GLOBAL_BATCH}.")
    if not seen["average_loss"]:
        return said + (" No all-reduce by hand was seen and tf.nn.compute_average_loss was not called, so the usual "
                       f"cause: each replica divided the sum of its per-example losses by its own {BATCH} examples "
                       "(tf.reduce_mean). The strategy sums the replicas' gradients, so divide by the global batch, "
                       "not by the replica's own batch: tf.nn.compute_average_loss(per_example, "
                       f"global_batch_size={GLOBAL_BATCH}).")
    return said + (" Candidates: each replica's loss divided by its own batch instead of the global batch of "
                   f"{GLOBAL_BATCH}, or the gradients summed across the replicas a second time (apply_gradients "
                   "already sums them).")


def test_trains_like_one_device_on_the_global_batch(probe):
    seen = _returned(_run(probe))
    diff = _diff(_weights(seen), _converted()["weights"])
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
        why = (f" The optimizer took {steps} steps, not {EPOCHS * STEPS_PER_EPOCH} ({EPOCHS} epochs of "
               f"{STEPS_PER_EPOCH}).")
    elif _train_passes(seen) and not _in_order(seen):
        why = (" The first epoch did not take the examples in the dataset's order: keep the order (no shuffle), the "
               "grader recomputes the training in it.")
    elif _diff(_weights(seen), _reference(2 * SCALED_LR, GLOBAL_BATCH)["weights"]) < WEIGHT_TOL:
        why = _doubled_step(seen)
    else:
        seen_right = " The batches, their order," if _train_passes(seen) else " The"
        sizes = sorted({c["global_batch_size"] for c in seen["average_loss"]} - {None, GLOBAL_BATCH})
        divided = (f" tf.nn.compute_average_loss was given global_batch_size={sizes[0]}, not {GLOBAL_BATCH}."
                   if sizes else "")
        why = (f"{seen_right} rate and the number of steps were right, so the difference is in the step itself."
               f"{divided} Candidates: the loss (sparse categorical cross-entropy from logits, each replica dividing "
               f"the sum of its per-example losses by the global batch: tf.nn.compute_average_loss(per_example, "
               f"global_batch_size={GLOBAL_BATCH})), the gradients (applied once per step with "
               "optimizer.apply_gradients, which sums the replicas'), the optimizer (plain SGD), or the order of the "
               "data (no shuffle).")
    feedback.fail(said + why)


def test_reaches_the_target_accuracy(probe):
    seen = _returned(_run(probe))
    accuracy = seen["probe_val_accuracy"]
    if accuracy is None:
        said, details = _told_error(seen["probe_error"], "the returned model, called on the validation features,")
        feedback.fail(said, details=details)
    steps = max((o["iterations"] for o in seen["optimizers"]), default=0)
    budget = EPOCHS * STEPS_PER_EPOCH
    # Weights equal to the converted training took exactly the budget; an optimizer made outside the scope counts
    # its steps on every replica (the scope test says so), so its counter is no measure.
    if not _trained_right(seen) and not _scope_problem(seen):
        shares = " (see the test on the replicas' shares)" if _batch_problem(seen) else ""
        _expect(steps <= budget, (
            f"the optimizer took {steps} steps; the script's budget is {EPOCHS} epochs, {budget} steps of "
            f"{GLOBAL_BATCH} examples on {REPLICAS} replicas{shares}."
        ))
    lr = _lr(seen)
    hint = (f" With the unscaled rate ({lr:g}) each epoch's half as many steps learn too little: scale it to "
            f"{SCALED_LR:g}." if lr is not None and lr < SCALED_LR - 1e-9 else "")
    _expect(accuracy >= TARGET, (
        f"the trained model classifies {accuracy:.1%} of the {N_VAL} validation examples correctly; the target is "
        f"{TARGET:.0%} within {EPOCHS} epochs, as the script reaches on one device.{hint}"
    ))


def _replica_shares():
    """For each way of dealing the validation set to the replicas, each replica's example ids."""
    contiguous = [[i for i in range(N_VAL) if (i % GLOBAL_BATCH) // BATCH == r] for r in range(REPLICAS)]
    sharded = [[i for i in range(N_VAL) if i % REPLICAS == r] for r in range(REPLICAS)]
    return [("the slices of each global batch", contiguous), ("a Dataset.shard", sharded)]


def test_reports_the_validation_accuracy(probe):
    seen = _returned(_run(probe))
    got = _check_float(seen, "val_accuracy", "val_accuracy.result()")
    want = seen["probe_val_accuracy"]
    if want is None:
        said, details = _told_error(seen["probe_error"], "the returned model, called on the validation features,")
        feedback.fail(said, details=details)
    if abs(got - want) < 0.5 / N_VAL:
        return
    said = (f"train returned val_accuracy {got:.4f}, but the returned model classifies {want:.4f} of all {N_VAL} "
            "validation examples correctly.")
    close = lambda value, count: abs(got - value) < 0.5 / count  # noqa: E731
    checked = []
    correct = np.asarray(seen.get("probe_val_correct") or [], dtype="float64")
    if len(correct) == N_VAL:
        for how, shares in _replica_shares():
            for r, ids in enumerate(shares):
                if close(float(np.mean(correct[ids])), len(ids)):
                    feedback.fail(said + (
                        f" {got:.4f} is the accuracy on replica {r}'s examples alone ({len(ids)} of them, dealt by "
                        f"{how}): the metric was read inside strategy.run, where it holds that replica's counts only. "
                        "Read result() outside strategy.run, after the last batch: it then combines every replica's "
                        "counts."))
        checked.append("one replica's share")
    train_accuracy = seen.get("probe_train_accuracy")
    if train_accuracy is not None and abs(train_accuracy - want) >= 0.5 / N_VAL and close(train_accuracy, N_TRAIN):
        feedback.fail(said + (
            f" {got:.4f} is the model's accuracy on the {N_TRAIN} training examples: the accuracy was measured on "
            "(x, y). Measure it on the validation data, (x_val, y_val)."))
    if train_accuracy is not None:
        checked.append("the training set's accuracy")
    if _trained_right(seen):
        per_epoch = [_val_accuracy(w) for w in _converted()["epoch_weights"]]
        # float64 here, float32 there: allow one example's verdict to differ over the six evaluations
        if abs(per_epoch[-1] - want) < 0.5 / N_VAL and abs(got - float(np.mean(per_epoch))) <= 1.5 / (EPOCHS * N_VAL):
            feedback.fail(said + (
                f" {got:.4f} is the mean of the accuracies after each of the {EPOCHS} epochs "
                f"({', '.join(f'{a:.3f}' for a in per_epoch)}): the accuracy metric counted every evaluation. Reset it "
                "before each evaluation (val_accuracy.reset_state()), or evaluate once, after training."))
        checked.append("the mean of one evaluation per epoch")
    tried = f" It is not {', '.join(checked[:-1])} or {checked[-1]}." if len(checked) > 1 else (
        f" It is not {checked[0]}." if checked else "")
    feedback.fail(said + tried + (
        f" Measure the final model on all {N_VAL} validation examples: update a SparseCategoricalAccuracy made in "
        "strategy.scope() inside strategy.run, on every replica's slice of the validation batches, once, and read "
        "result() outside strategy.run after the last batch: it then counts every replica's examples."))


def test_reports_the_training_loss(probe):
    seen = _returned(_run(probe))
    got = _check_float(seen, "train_loss", "train_loss.result()")
    converted = _converted()
    want = converted["loss"]
    if abs(got - want) <= LOSS_TOL * max(1.0, abs(want)):
        return
    if not _trained_right(seen):
        feedback.fail(f"train returned train_loss {got:.5f}; the converted training's last epoch has a mean loss of "
                      f"{want:.5f}, but the training itself differs (see the test on the final weights), so the loss "
                      "cannot be checked apart from it.")
    means = converted["epoch_losses"]
    close = lambda value: abs(got - value) <= LOSS_TOL * max(1.0, abs(value))  # noqa: E731
    said = f"train returned train_loss {got:.5f}, but the mean per-example loss of the last epoch is {want:.5f}."
    if close(float(np.mean(means))):
        feedback.fail(said + f" {got:.5f} is the mean over all {EPOCHS} epochs: the Mean metric kept counting. Call "
                      "train_loss.reset_state() at the start of every epoch.")
    if close(want / REPLICAS):
        feedback.fail(said + f" {got:.5f} is that divided by the {REPLICAS} replicas: the metric was given the loss "
                      "scaled for the gradients (each replica's share of the mean, from compute_average_loss). Give it "
                      "the per-example losses instead: train_loss.update_state(per_example), inside strategy.run.")
    last = converted["last_step_loss"]
    if close(last):
        feedback.fail(said + f" {got:.5f} is the mean loss of the last step's global batch of {GLOBAL_BATCH} alone. "
                      "Return the mean over the whole last epoch: feed a keras.metrics.Mean the per-example losses of "
                      "every step and read its result() after the epoch's last step.")
    if close(last / REPLICAS):
        feedback.fail(said + f" {got:.5f} is half the mean loss of the last step's global batch: the loss of one "
                      "replica's share of the last step (scaled for the gradients). Return the mean over the whole "
                      "last epoch: feed a keras.metrics.Mean the per-example losses of every step, inside "
                      "strategy.run, and read its result() after the epoch's last step.")
    feedback.fail(said + " Feed a keras.metrics.Mean made in strategy.scope() the per-example losses of every step, "
                  "inside strategy.run, reset it at the start of each epoch, and read result() after the epoch.")
