"""Hidden tests for tf-custom-loop. They run in the judge, with NumPy only.

The probes train the same seeded Dense(3) model (probes.initial_weights, plain SGD) with the learner's
functions; the judge computes the single-device answer here in float64: softmax cross-entropy, the sum over
each batch divided by the global batch size, one SGD step per batch. Synchronous data parallelism must match it.

What the tests observe, so that a message names a cause only where an observation isolates it:
- train_step alone, on one device, with a full batch (8 examples, global_batch_size=8) and with one replica's
  share (4 examples, global_batch_size=8): its loss and the weights after its step;
- the 2-replica run: the reported losses and every replica's copy of the weights. The judge knows each
  replica's share of each step's loss (experimental_distribute_dataset gives replica 0 the first half of a
  batch), the loss of a batch at the starting weights, and what the known mistakes would give.
"""

import math
import re

import numpy as np
from probes import data, initial_weights
from runner import feedback

N, GLOBAL, LR = 16, 8, 0.5
REPLICAS = 2
SHARE = GLOBAL // REPLICAS  # one replica's examples per step
TOL = 1e-5
WEIGHT_TOL = 1e-4
GRAD_HOW = "optimizer.apply_gradients(zip(grads, model.trainable_variables))"


# ---------------------------------------------------------------- the single-device answer (float64)


def _per_example(x, y, kernel, bias):
    """Softmax cross-entropy of the logits x @ kernel + bias, one per example, and the softmax."""
    z = x @ kernel + bias
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return -np.log(p[np.arange(len(y)), y]), p


def _as_probabilities(x, y, kernel, bias):
    """What Keras computes without from_logits=True: the logits clipped to [1e-7, 1 - 1e-7] and read as
    (unnormalised) probabilities."""
    q = np.clip(x @ kernel + bias, 1e-7, 1 - 1e-7)
    return -np.log(q[np.arange(len(y)), y] / q.sum(axis=1))


def _step(x, y, kernel, bias, lr, divisor):
    """One SGD step on sum(per-example losses) / divisor: (loss, kernel, bias)."""
    losses, p = _per_example(x, y, kernel, bias)
    g = p.copy()
    g[np.arange(len(y)), y] -= 1.0
    g /= divisor
    return float(losses.sum() / divisor), kernel - lr * x.T @ g, bias - lr * g.sum(axis=0)


def _start():
    return [w.astype("float64") for w in initial_weights()]


def alone(n, global_batch_size, lr):
    """train_step alone on the first n examples: the loss, the weights after, and what known mistakes give."""
    x, y = data(n)
    x = x.astype("float64")
    kernel, bias = _start()
    loss, k1, b1 = _step(x, y, kernel, bias, lr, global_batch_size)
    total = float(_per_example(x, y, kernel, bias)[0].sum())
    return {"loss": loss, "weights": [k1, b1], "sum": total,
            "probabilities": float(_as_probabilities(x, y, kernel, bias).sum())}


def reference(n, global_batch, lr):
    """Single-device training over the 2 replicas' batches: per batch its mean loss, each replica's share of
    it, and its loss at the starting weights; the final (kernel, bias)."""
    x, y = data(n)
    x = x.astype("float64")
    kernel, bias = _start()
    losses, shares, at_start = [], [], []
    for start in range(0, n, global_batch):
        xb, yb = x[start:start + global_batch], y[start:start + global_batch]
        cut = math.ceil(len(yb) / REPLICAS)
        each = _per_example(xb, yb, kernel, bias)[0]
        shares.append([float(each[:cut].sum() / global_batch), float(each[cut:].sum() / global_batch)])
        at_start.append(float(_per_example(xb, yb, *_start())[0].sum() / global_batch))
        loss, kernel, bias = _step(xb, yb, kernel, bias, lr, global_batch)
        losses.append(loss)
    return {"losses": losses, "shares": shares, "at_start": at_start, "weights": [kernel, bias]}


# ---------------------------------------------------------------- words


def _close(a, b, rel=1e-5):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=TOL)


def _num(value, other=None):
    """A number rounded for people (more digits only where 4 would hide a difference from `other`)."""
    for digits in (4, 6, 8):
        if other is None or _close(value, other) or f"{value:.{digits}f}" != f"{other:.{digits}f}":
            return f"{value:.{digits}f}"
    return f"{value:.8f}"


def _nums(values, others):
    return "[" + ", ".join("None" if v is None else _num(v, w) for v, w in zip(values, others, strict=True)) + "]"


def _a(word):
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _max_diff(got, want):
    return float(np.max(np.abs(np.asarray(got, dtype="float64") - np.asarray(want, dtype="float64"))))


def _scale(got, want):
    """How many of the expected updates (want - start) the observed weights (got) moved, by least squares."""
    got_step = [np.asarray(g, dtype="float64") - s for g, s in zip(got, _start(), strict=True)]
    want_step = [np.asarray(w, dtype="float64") - s for w, s in zip(want, _start(), strict=True)]
    num = sum(float(np.sum(g * w)) for g, w in zip(got_step, want_step, strict=True))
    den = sum(float(np.sum(w * w)) for w in want_step)
    return num / max(den, 1e-30)


def _unchanged(got):
    return all(_max_diff(g, s) == 0.0 for g, s in zip(got, _start(), strict=True))


# TensorFlow and Keras failures learners meet in this exercise: (type, pattern, what it means). A sentence
# names a cause only where the text proves it, and says "for example" where several causes give the text.
_KNOWN = (
    ("ValueError", re.compile(r"Only input tensors may be passed as positional arguments[\s\S]*PerReplica"),
     lambda m: "the model was called on a PerReplica value (one slice of the batch per replica) instead of a "
               "tensor: code that calls the model ran on the distributed batch outside strategy.run. Call "
               "strategy.run(train_step, args=(...)) so that each replica runs train_step on its own slice"),
    (None, re.compile(r"PerReplica"),
     lambda m: "a PerReplica value (one value per replica: what experimental_distribute_dataset yields and "
               "strategy.run returns) reached code that needs one tensor. Inside the replicas, work through "
               "strategy.run(train_step, args=(...)); combine the replicas' values with strategy.reduce"),
    ("ValueError", re.compile(r"No gradients provided for any variable"),
     lambda m: "optimizer.apply_gradients got no gradient for any variable (every gradient was None): the "
               "tf.GradientTape did not record how the loss depends on the model's weights. Run the forward "
               "pass model(x) and the loss inside `with tf.GradientTape() as tape:`, with TensorFlow operations "
               "(not on .numpy() values), and take tape.gradient(loss, model.trainable_variables)"),
    ("AttributeError", re.compile(r"object has no attribute '_unique_id'"),
     lambda m: "optimizer.apply_gradients got a tensor where it expects a variable: it takes (gradient, variable) "
               f"pairs, {GRAD_HOW}. Pairs in the other order, zip(model.trainable_variables, grads), give this"),
    ("TypeError", re.compile(r"`x` and `y` must have the same dtype, got tf\.(?P<a>\w+) != tf\.(?P<b>\w+)"),
     lambda m: f"an arithmetic operation mixed {_a(m['a'])} tensor and {_a(m['b'])} tensor, and TensorFlow does not "
               "convert dtypes for you (dividing the float32 sum of the losses by tf.constant(global_batch_size), "
               "an int32 tensor, does this). Cast the integer first, "
               "tf.cast(global_batch_size, per_example_losses.dtype), or use tf.nn.compute_average_loss"),
    ("ValueError", re.compile(r"Invalid value passed for `per_example_loss`\. Expected a tensor with at least "
                              r"rank 1"),
     lambda m: "tf.nn.compute_average_loss was given one number (a scalar) instead of one loss per example: it "
               "sums the per-example losses and divides by global_batch_size itself. A Keras loss object with its "
               "default reduction has already averaged them; give compute_average_loss "
               "keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True), or a loss object made "
               'with reduction="none"'),
    ("ValueError", re.compile(r"Argument `output` must have rank \(ndim\) `target\.ndim - 1`\. Received: "
                              r"target\.shape=(?P<t>\([^)]*\)), output\.shape=(?P<o>\([^)]*\))"),
     lambda m: f"the sparse categorical cross-entropy got labels of shape {m['t']} and predictions of shape "
               f"{m['o']}: it takes the integer labels first, shape (batch,), then the logits, shape (batch, "
               "classes), as in keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True). "
               "These shapes are what the two arguments give in the other order"),
    ("ValueError", re.compile(r"Invalid reduction dimension (?P<axis>-?\d+) for input with 0 dimensions"),
     lambda m: f"a reduction along axis {m['axis']} was asked of a scalar, which has no axes. Each replica's loss "
               f"is a scalar, and strategy.reduce(..., axis={m['axis']}) asks exactly this: besides adding the "
               f"replicas' values it reduces each of them along axis {m['axis']}. Add the replicas' scalars with "
               "strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)"),
    ("TypeError", re.compile(r"(?:tf__)?(?P<fn>\w+)\(\) missing (?P<n>\d+) required positional arguments?: "
                             r"(?P<names>.*)"),
     lambda m: f"{m['fn']} was called with too few arguments (missing: {m['names'].strip()}). "
               "strategy.run(train_step, args=(...)) passes the items of args to train_step one by one, so args "
               "must hold its 5 arguments, (model, optimizer, x, y, global_batch_size); passing the batch as one "
               "item instead of x and y (x, y = batch) leaves one out"),
    ("TypeError", re.compile(r"(?:tf__)?(?P<fn>\w+)\(\) takes (?P<want>\d+) positional arguments? but "
                             r"(?P<got>\d+) (?:was|were) given"),
     lambda m: f"{m['fn']} was called with {m['got']} positional arguments, where it takes {m['want']}. "
               "strategy.run(fn, args=(...)) passes the items of args to fn one by one: args must hold exactly "
               "train_step's arguments (model, optimizer, x, y, global_batch_size)"),
    ("ValueError", re.compile(r"A non-DistributedValues value None cannot be reduced"),
     lambda m: "strategy.reduce was given None instead of the replicas' losses. strategy.run returns what the "
               "replica function returns, and a train_step that ends without `return loss` returns None"),
)


def _inner(type_name, message):
    """The error a tf.function trace ends with ("in user code: ... ValueError: text"), as (type, text)."""
    lines = message.splitlines()
    if lines and lines[0].strip().startswith("in user code"):
        for i in range(len(lines) - 1, -1, -1):
            found = re.match(r"^\s*(\w+(?:Error|Exception|Warning)):\s?(.*)$", lines[i])
            if found:
                rest = [found[2]] + [line.strip() for line in lines[i + 1:]]
                return found[1], "\n".join(rest).strip()
    return type_name, message


def _fail_raised(what, exc, hint=""):
    """Fail with what the learner's code raised, in words, the framework's own text behind a disclosure."""
    type_name, message = _inner(getattr(exc, "type_name", type(exc).__name__), str(exc.args[0]) if exc.args else "")
    details = feedback.clean_details(f"{type_name}: {message.split(' PerReplica:{', 1)[0]}")
    for known_type, pattern, say in _KNOWN:
        found = pattern.search(message)
        if found and known_type in (None, type_name):
            feedback.fail(f"{what} failed: {say(found)}.{hint}", details=details)
    # Not one of this exercise's known failures: the platform's words (a known class, or the first line).
    message = message.split(" PerReplica:{", 1)[0]
    told = feedback.raised(what, type_name, message)
    feedback.fail(told.message + hint, details=told.details)


def _call(probe, name, *args, what):
    try:
        return probe(name, *args)
    except Exception as exc:
        _fail_raised(what, exc)


# ---------------------------------------------------------------- train_step alone


def _alone_what(n, gbs):
    share = f" (one replica's share of a global batch of {gbs})" if n < gbs else ""
    return f"train_step(model, optimizer, x, y, global_batch_size={gbs}) on one device with {n} examples{share}"


def _alone_problem(seen, n, gbs):
    """What is wrong with train_step alone (kind, sentence), or None: kind names the cause for the other tests."""
    want = alone(n, gbs, LR)
    got = seen["loss"]
    if got is None:
        return "no_loss", (f"it returned {seen['loss_type']}, not its loss: train_step must return the loss "
                           "(a scalar tensor), `return loss`")
    diff = max(_max_diff(g, w) for g, w in zip(seen["weights"], want["weights"], strict=True))
    if not _close(got, want["loss"]):
        told = (f"it returned loss {_num(got, want['loss'])}; expected {_num(want['loss'], got)}: the sum of the "
                f"{n} per-example sparse categorical cross-entropies of the logits model(x), "
                f"{_num(want['sum'])}, divided by global_batch_size = {gbs}.")
        if diff < WEIGHT_TOL:
            mean = " (the mean over its examples)" if _close(got, want["sum"] / n) else ""
            return "report", told + (
                " Its update is right, though: the weights equal one SGD step on sum / global_batch_size, so the "
                f"loss it differentiates is right and the value it returns{mean} is another one. Return the loss "
                "you took the gradient of")
        if _close(got, want["sum"]):
            return "no_divide", told + (
                " Yours is that sum, never divided: a loss object with reduction=\"sum\" (or tf.reduce_sum) adds "
                "the per-example losses, and the sum must then be divided by global_batch_size")
        if n != gbs and _close(got, want["sum"] / n):
            return "own_batch", told + (
                f" You returned their mean over the {n} examples the replica got, not sum / global_batch_size. "
                "tf.reduce_mean, a Keras loss object with its default reduction, tf.nn.compute_average_loss "
                "without its global_batch_size argument, and a batch size computed from the shape of x or of the "
                "losses (times num_replicas_in_sync, which is 1 with no strategy) all divide by the examples they "
                f"see; on a replica that is {n}, not {gbs}. Divide by the GLOBAL batch size you are given: "
                "tf.nn.compute_average_loss(per_example_losses, global_batch_size=global_batch_size)")
        if _close(got, want["probabilities"] / gbs, rel=1e-4) or _close(got, want["probabilities"] / n, rel=1e-4):
            return "from_logits", told + (
                " Your value is the cross-entropy of model(x) read as probabilities: the loss was computed "
                "without from_logits=True. model(x) returns logits: "
                "keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True), or "
                "tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)")
        if _close(got * gbs, want["loss"]) or _close(got * n, want["loss"]):
            return "twice", told + (" Yours is that divided once more by the batch size: divide the sum once, by "
                                    "global_batch_size")
        return "loss", told
    if diff < WEIGHT_TOL:
        return None
    if _unchanged(seen["weights"]):
        return "no_update", ("its loss is right, but the weights did not change: train_step never applied the "
                             f"gradients. Call {GRAD_HOW} after tape.gradient(loss, model.trainable_variables)")
    scale = _scale(seen["weights"], want["weights"])
    told = (f"its loss is right, but the weights differ from one SGD step on that loss by up to {diff:.2g}. Take "
            "the gradient of the loss you return with a tf.GradientTape and apply it once with " + GRAD_HOW)
    if math.isclose(scale, 2.0, rel_tol=0.05):
        told += "; the weights moved twice as far as one step: were the gradients applied twice?"
    return "update", told


def _check_alone(probe, n, gbs):
    what = _alone_what(n, gbs)
    seen = _call(probe, "single", n, gbs, LR, what=what)
    problem = _alone_problem(seen, n, gbs)
    if problem is not None:
        feedback.fail(f"{what}: {problem[1]}.")


def test_train_step_single_device(probe):
    _check_alone(probe, GLOBAL, GLOBAL)


def test_train_step_divides_by_global_batch_size(probe):
    _check_alone(probe, SHARE, GLOBAL)


_SHORT = {
    "no_loss": "it returns no loss; end it with `return loss`",
    "own_batch": f"it divides its summed losses by the {SHARE} examples a replica gets, not by global_batch_size = "
                 f"{GLOBAL}, so each replica's loss, and its gradient, is {REPLICAS} times its share. Divide by the "
                 "GLOBAL batch size you are given: tf.nn.compute_average_loss(per_example_losses, "
                 "global_batch_size=global_batch_size)",
    "from_logits": "its loss is the cross-entropy of model(x) read as probabilities; model(x) returns logits, so "
                   "compute the loss with from_logits=True",
    "no_update": f"its loss is right, but it never changes the weights; apply the gradients with {GRAD_HOW}",
    "no_divide": "it returns the sum of its per-example losses, never divided by global_batch_size, so each "
                 f"replica's loss, and its gradient, is {GLOBAL} times its share. Divide the sum by the "
                 "global_batch_size you are given",
    "report": "its update is right, but the loss it returns is not the one it differentiates (sum / "
              "global_batch_size); return the loss you took the gradient of",
}


def _train_step_alone(probe):
    """The first problem of train_step alone (full batch, then one replica's share) as (kind, words), or None; a
    probe that raises counts as a problem of its own kind."""
    for n in (GLOBAL, SHARE):
        try:
            seen = probe("single", n, GLOBAL, LR)
        except Exception:
            return "raised", f"{_alone_what(n, GLOBAL)} raises (see the tests of train_step alone)"
        problem = _alone_problem(seen, n, GLOBAL)
        if problem is not None:
            kind, words = problem
            return kind, f"{_SHORT.get(kind, words)} (see the tests of train_step alone)"
    return None


_ALREADY = " train_step alone, on one device, is already wrong, and every replica runs it: "


# ---------------------------------------------------------------- the 2-replica run


def _run(probe, what):
    return _call(probe, "distributed", N, GLOBAL, LR, what=what)


def _weights_problem(seen, ref):
    """(kind, sentence) about the replicas' weights after training, or None when they are right."""
    for name, copies in zip(("kernel", "bias"), seen["copies"], strict=True):
        if len(copies) != REPLICAS:
            return "copies", (f"the {name} has {len(copies)} copies; expected one per replica (the probe builds the "
                              "model in the scope, so this means the variable was replaced)")
        if _max_diff(copies[0], copies[1]) != 0.0:
            return "differ", (f"the two replicas' copies of the {name} differ. Apply the gradients with the "
                              "optimizer inside strategy.run, so that the strategy all-reduces them and updates "
                              "every copy the same way")
    got = [copies[0] for copies in seen["copies"]]
    diffs = [_max_diff(g, w) for g, w in zip(got, ref["weights"], strict=True)]
    if max(diffs) < WEIGHT_TOL:
        return None
    which = "kernel" if diffs[0] >= diffs[1] else "bias"
    told = (f"the {which} differs from single-device training on the same batches by up to {max(diffs):.2g}; "
            "with synchronous data parallelism both must agree (up to rounding)")
    if _unchanged(got):
        return "no_update", told + (". The weights did not change at all: the gradients were never applied. Call "
                                    f"{GRAD_HOW} in train_step, inside strategy.run")
    scale = _scale(got, ref["weights"])
    if math.isclose(scale, REPLICAS, rel_tol=0.15):
        return "double", told + ". The updates are about twice too big"
    if math.isclose(scale, 1 / REPLICAS, rel_tol=0.15):
        return "half", told + ". The updates are about half as big as they should be"
    return "other", told


def _distribution_hint(kind, first_loss_right=False):
    """What a 2x or 1/2 update says when train_step alone is right. With the first step's reported loss right,
    each replica's loss was scaled right, so the gradients were scaled after tape.gradient."""
    if kind in ("double", "half") and first_loss_right:
        much = "twice" if kind == "double" else "half"
        how = ("summed once more (an all-reduce of the gradients by hand, before apply_gradients all-reduces them "
               "again) or multiplied by num_replicas_in_sync" if kind == "double" else
               "divided by num_replicas_in_sync (or averaged over the replicas by hand)")
        return (f" The updates were {much} those of single-device training, yet the first step's loss is right, "
                "so each replica's loss, sum / global_batch_size, is right: the gradients that reached "
                f"apply_gradients were {much} the gradients of that loss. For example they were "
                f"{how} between tape.gradient and apply_gradients. The strategy's all-reduce SUM of the replicas' "
                "gradients of sum / global batch size is already the gradient of the global mean: pass them to "
                f"{GRAD_HOW} unchanged.")
    if kind == "double":
        return (f" train_step alone divides by the global_batch_size it is given ({SHARE} examples with "
                f"global_batch_size={GLOBAL} give sum / {GLOBAL}), so on the replicas it divided by less: "
                "distributed_train_step passes it something other than global_batch_size (the per-replica "
                "batch size, global_batch_size // num_replicas_in_sync, for example), or train_step multiplies "
                "its loss by the number of replicas. Pass global_batch_size unchanged: the all-reduce adds the "
                "replicas' gradients, and sum / global batch size on every replica makes that sum the mean.")
    if kind == "half":
        return (f" train_step alone divides by the global_batch_size it is given, so on the {REPLICAS} replicas "
                "the loss was divided by more: train_step divides by num_replicas_in_sync as well (the sum / global "
                "batch size already makes the all-reduced gradients the mean, nothing is left to average), or "
                "distributed_train_step passes it more than global_batch_size.")
    return ""


def test_distributed_loss_is_global_mean(probe):
    what = f"distributed_train_step on 2 replicas ({N} examples, global batch {GLOBAL}, 2 steps)"
    seen = _run(probe, what)
    ref = reference(N, GLOBAL, LR)
    want, got = ref["losses"], seen["losses"]
    if None in got:
        kind = seen["loss_types"][got.index(None)]
        feedback.fail(
            f"{what} returned {kind}, not one number. Combine the replicas' losses into the step's loss with "
            "strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)."
        )
    if all(_close(g, w) for g, w in zip(got, want, strict=True)):
        return
    said = (f"{what} returned losses {_nums(got, want)}; one device on the same batches gives {_nums(want, got)} "
            f"(the mean over each global batch of {GLOBAL}).")
    problem = _train_step_alone(probe)
    if problem is not None:
        feedback.fail(f"{said}{_ALREADY}{problem[1]}.")
    weights = _weights_problem(seen, ref)
    ratios = [g / w for g, w in zip(got, want, strict=True)]
    if weights is None:  # training is right, so each replica's loss for the gradients is right: the report is not
        shares = ref["shares"]
        if all(math.isclose(r, REPLICAS, rel_tol=1e-3) for r in ratios):
            hint = (" Training itself is right (the weights match single-device training), yet the loss you report "
                    f"is {REPLICAS} times the mean. For example train_step returned an all-reduced loss (the sum "
                    "over the replicas, get_replica_context().all_reduce), and strategy.reduce(SUM) then added "
                    "those sums again. "
                    "Return the replica's own share from train_step and add the shares once, with "
                    "strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None).")
        elif all(math.isclose(r, 1 / REPLICAS, rel_tol=1e-3) for r in ratios):
            hint = (f" Training itself is right (the weights match single-device training), yet your loss is 1/"
                    f"{REPLICAS} of the true mean: each replica's loss is already its share (sum / global batch), "
                    "so the shares must be added with ReduceOp.SUM, not averaged with ReduceOp.MEAN (nor divided "
                    "by the number of replicas after adding).")
        elif any(all(_close(g, s[r]) for g, s in zip(got, shares, strict=True)) for r in range(REPLICAS)):
            hint = (" Training itself is right (the weights match single-device training), but each number you "
                    f"report is one replica's share only (replica 0's: {_nums([s[0] for s in shares], got)}; "
                    f"replica 1's: {_nums([s[1] for s in shares], got)}). Add all replicas' shares with "
                    "strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None).")
        else:
            hint = (" Training itself is right (the weights match single-device training), so the replicas' losses "
                    "are combined into a wrong number: add them with strategy.reduce(tf.distribute.ReduceOp.SUM, "
                    "per_replica_losses, axis=None).")
        feedback.fail(said + hint)
    kind, told = weights
    hint = _distribution_hint(kind, _close(got[0], want[0]))
    if not hint and _close(got[0], want[0]):
        hint = (" The first step's loss is right and later ones are not: after the first step " + told + ".")
        if all(_close(g, s) for g, s in zip(got, ref["at_start"], strict=True)):
            hint += (" Every step's loss is the one of the starting weights: the weights never changed. Call "
                     f"{GRAD_HOW} in train_step.")
    elif not hint:
        hint = " After training, " + told + "."
    feedback.fail(said + hint)


def test_distributed_weights_match_single_device(probe):
    what = f"training with distributed_train_step on 2 replicas ({N} examples, global batch {GLOBAL}, SGD lr {LR})"
    seen = _run(probe, what)
    ref = reference(N, GLOBAL, LR)
    weights = _weights_problem(seen, ref)
    if weights is None:
        return
    kind, told = weights
    said = f"after {what} {told}."
    if kind in ("copies", "differ"):
        feedback.fail(said)
    if kind == "no_update":  # told in full already
        feedback.fail(said)
    problem = _train_step_alone(probe)
    if problem is not None:
        feedback.fail(f"{said}{_ALREADY}{problem[1]}.")
    first = seen["losses"][0]
    feedback.fail(said + _distribution_hint(kind, _close(first, ref["losses"][0])))
