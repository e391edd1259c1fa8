"""Hidden tests for tf-strategy-metrics. They run in the judge, with NumPy only.

The probes evaluate a fixed Dense(3) model with the learner's functions, on one device and on the real
2-replica MirroredStrategy; the judge knows by construction which examples the model gets right (probes.data)
and computes the cross-entropies here in float64.

What the tests observe, so that a message names a cause only where an observation isolates it:
- update_metrics alone, on one device, called once per batch (8 examples, then 3): the metrics' values and what
  each metric's update_state was given (shapes and dtypes), so a mistake inside update_metrics is told apart
  from one in evaluate;
- evaluate on 2 replicas, once and then twice with the same metrics: the values it returned and their types.
  The judge knows each replica's share of each batch (experimental_distribute_dataset gives replica 0 the first
  half of a batch, rounded up), so it knows what each known mistake of evaluate would return.
"""

import math
import re

import numpy as np
from probes import CLASSES, EPOCHS, GLOBAL_BATCH, data, initial_weights
from runner import feedback

TOL = 1e-5
EPS = 1e-7  # keras.config.epsilon(): Keras clips probabilities to [EPS, 1 - EPS] when from_logits=False
ONE_DEVICE = "test_update_metrics_on_one_device"


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        feedback.fail(message)


def _log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _logits(epoch):
    n, seed, right = EPOCHS[epoch]
    x, y = data(n, seed, right)
    kernel, bias = (w.astype("float64") for w in initial_weights())
    return x.astype("float64") @ kernel + bias, y


def _batches(n):
    return [(start, min(n, start + GLOBAL_BATCH)) for start in range(0, n, GLOBAL_BATCH)]


def expected(epoch):
    """The epoch's accuracy, mean loss, and what the known mistakes would report instead."""
    n, _, right = EPOCHS[epoch]
    z, y = _logits(epoch)
    rows = np.arange(n)
    losses = -_log_softmax(z)[rows, y]
    hits = np.array([right(i) for i in range(n)], dtype="float64")
    # experimental_distribute_dataset cuts a batch of b into ceil(b/2) examples for replica 0, the rest for replica 1.
    mine = [[], []]
    scaled = []
    for start, end in _batches(n):
        cut = start + math.ceil((end - start) / 2)
        mine[0] += range(start, cut)
        mine[1] += range(cut, end)
        scaled += [losses[start:cut].sum() / GLOBAL_BATCH, losses[cut:end].sum() / GLOBAL_BATCH]
    last = slice(*_batches(n)[-1])
    # Keras without from_logits=True: the scores are clipped to [EPS, 1 - EPS] and taken as probabilities.
    clipped = np.clip(z, EPS, 1 - EPS)
    no_from_logits = -(np.log(clipped[rows, y]) - np.log(clipped.sum(axis=1)))
    probs = np.exp(_log_softmax(z))
    return {
        "n": n,
        "hits": hits,
        "accuracy": float(hits.mean()),
        "loss": float(losses.mean()),
        "loss_sum": float(losses.sum()),
        "scaled_loss": float(np.mean(scaled)),
        "local": [float(hits[m].mean()) for m in mine],
        "batch_accuracy": [float(hits[s:e].mean()) for s, e in _batches(n)],
        "batch_loss": [float(losses[s:e].mean()) for s, e in _batches(n)],
        "last": {"accuracy": float(hits[last].mean()), "loss": float(losses[last].mean()), "n": last.stop - last.start},
        "no_from_logits": float(no_from_logits.mean()),
        "double_softmax": float(-_log_softmax(probs)[rows, y].mean()),
    }


def _inner(type_name, message):
    """The error a tf.function trace ends with ("in user code: ... ValueError: text"), as (type, text)."""
    lines = message.splitlines()
    if lines and lines[0].strip().startswith("in user code"):
        for i in range(len(lines) - 1, -1, -1):
            found = re.match(r"^\s*(\w+(?:Error|Exception|Warning)):\s?(.*)$", lines[i])
            if found:
                rest = [found[2]] + [line.strip() for line in lines[i + 1 :]]
                return found[1], "\n".join(rest).strip()
    return type_name, message


def _fail_raised(what, type_name, message, hint=""):
    """Fail with what the learner's code raised, in words; the framework's own text behind a disclosure."""
    type_name, message = _inner(type_name, message)
    details = feedback.clean_details(f"{type_name}: {message.split(' PerReplica:{', 1)[0]}")
    if "PerReplica" in message:
        feedback.fail(
            f"{what} failed: a Keras model or metric was given PerReplica values (one slice per replica, what a "
            "batch of a distributed dataset holds) outside strategy.run. Update the metrics inside the replicas, with "
            f"strategy.run(update_metrics, args=(model, metrics, x, y)) for each batch.{hint}",
            details=details,
        )
    if re.search(r"'DistributedDataset' object has no attribute", message):
        feedback.fail(
            f"{what} failed: your code used dist_dataset, a DistributedDataset, as a tf.data.Dataset (TensorFlow "
            "looked for a Dataset attribute it does not have), for example by giving it to "
            "experimental_distribute_dataset again. It is already distributed: iterate over it as it is and hand "
            f"each batch to strategy.run.{hint}",
            details=details,
        )
    ranks = re.search(
        r"`target` and `output` must have the same rank"
        r".*?target\.shape=\((\d+),\), output\.shape=\((\d+), (\d+)\)",
        message,
        re.S,
    )
    if ranks and ranks[1] == ranks[2]:
        b, c = ranks[1], ranks[3]
        feedback.fail(
            f"{what} failed: a cross-entropy was given the integer labels, shape ({b},), with logits of shape "
            f"({b}, {c}), and Keras refused the two shapes. categorical_crossentropy (and CategoricalCrossentropy) take one-hot "
            "labels, one row per example like the logits; for integer class ids use the sparse one, "
            f"keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True).{hint}",
            details=details,
        )
    told = feedback.raised(what, type_name, feedback.framework_text(message).strip())
    feedback.fail(told.message + hint, details=told.details or details)


def _call(probe, name, *args, what):
    try:
        return probe(name, *args)
    except Exception as exc:
        hint = _one_device_hint(probe, None) if name == "epochs" else ""
        _fail_raised(
            what, getattr(exc, "type_name", type(exc).__name__), str(exc.args[0]) if exc.args else "", hint=hint
        )


def _close(got, want):
    return got is not None and want is not None and math.isclose(got, want, rel_tol=TOL, abs_tol=TOL)


def _shape(desc):
    return None if desc is None or desc["shape"] is None else tuple(desc["shape"])


def _show(desc):
    if desc is None:
        return "nothing"
    if desc["shape"] is None:
        return f"a {desc['dtype']}"
    shape = tuple(desc["shape"])
    return f"shape {shape if len(shape) != 1 else f'({shape[0]},)'} ({desc['dtype']})"


def _arg(call, index, name):
    if call is None:
        return None
    args = call["args"]
    return args[index] if len(args) > index else call["kwargs"].get(name)


def _accuracy_args(call, b):
    """What metrics['accuracy'].update_state was given, and what those shapes say (None when they look right)."""
    true, pred = _arg(call, 0, "y_true"), _arg(call, 1, "y_pred")
    seen = f"metrics['accuracy'].update_state was given y_true of {_show(true)} and y_pred of {_show(pred)}"
    t, p = _shape(true), _shape(pred)
    labels, scores = (b,), (b, CLASSES)
    if t == labels and p == scores:
        return seen, None
    integer = pred is not None and "int" in pred["dtype"]
    if t == scores and p == labels and integer:
        why = (
            "y_true has the shape of the logits and y_pred that of the labels: update_state(y_true, y_pred) takes the "
            "labels first, then the logits"
        )
    elif t == scores and p == scores:
        why = (
            f"y_true holds {CLASSES} numbers per example, like one-hot labels: SparseCategoricalAccuracy takes the "
            f"integer class ids, shape ({b},), as they come (one-hot labels belong to CategoricalAccuracy)"
        )
    elif t == labels and p == labels:
        why = (
            f"y_pred holds one number per example, such as the predicted class ids (tf.argmax of the logits): "
            f"SparseCategoricalAccuracy takes the scores, shape ({b}, {CLASSES}), and takes the argmax itself"
        )
    else:
        why = f"it takes the integer labels, shape ({b},), then the logits, shape ({b}, {CLASSES})"
    return seen, why


def _loss_args(calls, b):
    """What metrics['loss'].update_state was given first, and what that says (None when it looks right)."""
    values = _arg(calls[0], 0, "values") if calls else None
    seen = f"metrics['loss'].update_state was given {_show(values)} for a batch of {b}"
    shape = _shape(values)
    if not calls:
        return "metrics['loss'].update_state was never called", "update it with the per-example losses"
    if shape == (b,):
        return seen, None
    if shape == ():
        why = (
            "one number, not one loss per example: the losses were already reduced (a Keras loss object with its "
            "default reduction, tf.nn.compute_average_loss, tf.reduce_mean or tf.reduce_sum give one number). The "
            "Mean then averages one number per call, and a batch of 3 counts as much as a batch of 8: give it the "
            "unreduced losses, such as keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)"
        )
    else:
        why = f"it takes one loss per example, shape ({b},)"
    return seen, why


def test_update_metrics_on_one_device(probe):
    want = expected("A")
    n, first = want["n"], GLOBAL_BATCH
    what = f"update_metrics(model, metrics, x, y) on one device, called for {first} examples and then {n - first}"
    got = _call(probe, "one_device", "A", what=what)
    calls, error = got["calls"], got["error"]
    if error:
        for name, said in (("accuracy", _accuracy_args), ("loss", None)):
            if calls[name] and calls[name][-1]["raised"]:
                size = first if len(calls[name]) == 1 else n - first
                seen, why = _accuracy_args(calls[name][-1], size) if said else _loss_args(calls[name][-1:], size)
                if why:
                    _fail_raised(what, error["type"], error["message"], hint=f" There {seen}: {why}.")
        _fail_raised(what, error["type"], error["message"])
    if not _close(got["accuracy"], want["accuracy"]):
        seen, why = _accuracy_args(calls["accuracy"][0] if calls["accuracy"] else None, first)
        if not calls["accuracy"]:
            seen, why = "metrics['accuracy'].update_state was never called", "update it with the labels and logits"
        value = "no value" if got["accuracy"] is None else f"{got['accuracy']:.6f}"
        last = want["last"]
        if why is None and _close(got["accuracy"], last["accuracy"]) and _close(got["loss"], last["loss"]):
            feedback.fail(
                f"after {what}, metrics['accuracy'].result() is {value} and metrics['loss'].result() "
                f"{got['loss']:.6f}: the values of the second call's {last['n']} examples alone (expected "
                f"{want['accuracy']:.6f} and {want['loss']:.6f} over all {n}). The metrics lost the first call's "
                f"{first} examples, as when update_metrics calls reset_state(): update_metrics only adds one "
                "replica's examples to the totals; reset the metrics once per pass, at the start of evaluate."
            )
        feedback.fail(
            f"after {what}, metrics['accuracy'].result() is {value}; expected {want['accuracy']:.6f} (the model gets "
            f"{int(want['hits'].sum())} of the {n} right); {seen}"
            + (f": {why}." if why else ", the right shapes, so the values it got differ from the labels and logits.")
        )
    if not _close(got["loss"], want["loss"]):
        seen, why = _loss_args(calls["loss"], first)
        if why is None and _close(got["loss"], want["no_from_logits"]):
            why = (
                "the result matches the cross-entropy computed with from_logits=False (the default), which takes "
                "the logits as probabilities: model(x) returns logits, so pass from_logits=True"
            )
        elif why is None and _close(got["loss"], want["double_softmax"]):
            why = (
                "the result matches the cross-entropy of softmax(logits) computed with from_logits=True, a second "
                "softmax on top of the first: give the raw logits with from_logits=True (or the probabilities "
                "with from_logits=False). Inside a tf.function Keras spots a Softmax output given with "
                "from_logits=True, warns, and uses the softmax's input instead, so evaluate can still come out "
                "right there; called eagerly, as here, it cannot"
            )
        elif why is None:
            why = (
                "the shape is right, but its values are not the sparse categorical cross-entropies of the logits "
                "model(x) (from_logits=True)"
            )
        value = "no value" if got["loss"] is None else f"{got['loss']:.6f}"
        feedback.fail(
            f"after {what}, metrics['loss'].result() is {value}; expected {want['loss']:.6f}, the mean of the "
            f"{n} per-example cross-entropies; {seen}: {why}."
        )


def _result(seen, index, what):
    result = seen["results"][index]
    _expect(
        result["type"] == "dict" and {"accuracy", "loss"} <= set(result["keys"]),
        (f"{what} returned {result.get('keys', result['type'])}; return a dict with the keys 'accuracy' and 'loss'."),
    )
    _expect(
        result["accuracy"] is not None and result["loss"] is not None,
        (f"{what} returned values that are not single numbers; return float(metric.result()) for each metric."),
    )
    return result


def _one_device_hint(probe, name):
    """When update_metrics alone already gives a wrong value on one device, say so: the mistake is there."""
    want = expected("A")
    try:
        got = probe("one_device", "A")
    except Exception:
        got = {"error": True}
    if got.get("error"):
        return (
            f" update_metrics alone fails on one device too (see {ONE_DEVICE}): the mistake is in "
            "update_metrics, so fix it first."
        )
    wrong = [k for k in ([name] if name else ["accuracy", "loss"]) if not _close(got.get(k), want[k])]
    if wrong:
        return (
            f" update_metrics alone gives a wrong {' and '.join(wrong)} on one device too (see {ONE_DEVICE}): "
            "the mistake is in update_metrics, so fix it first."
        )
    return ""


def _evaluate_hint(name, got, want, other=None):
    """What a wrong value of one pass matches: a known mistake of evaluate, told by the value alone."""
    batch = want[f"batch_{name}"]
    if got == 0 and want[name] != 0:
        return (
            " 0 is what a metric reports when it has counted nothing since its last reset_state(): either no batch "
            "reached the metrics, or they were reset after the last batch was counted (for example right after "
            "reading or logging each batch's values). Reset once per pass, before the loop, and read result() once, "
            "after it."
        )
    if name == "accuracy" and any(_close(got, v) for v in want["local"] + [sum(want["local"]) / 2]):
        return (
            f" That is what result() says inside a replica: replica 0 alone is at {want['local'][0]:g}, "
            f"replica 1 at {want['local'][1]:g}. Read result() once, after the loop and outside strategy.run: "
            "then it combines every replica's totals and counts."
        )
    if name == "loss" and _close(got, want["scaled_loss"]):
        return (
            " That is the mean of the replicas' losses divided by the global batch size (the loss you would "
            "take gradients of): a Mean metric averages what it is given, so give it the per-example losses."
        )
    if other is not None and _close(got, other):
        return (
            f" That is the {name} over both calls' examples together: the metrics still held the first call's. "
            f"Call reset_state() on each metric (metrics['{name}'] too) at the start of evaluate."
        )
    if _close(got, want["last"][name]):
        return (
            f" That is the {name} of the last batch alone ({want['last']['n']} examples): the metrics lost the "
            "batches before it, as when reset_state() runs inside the loop over batches or inside update_metrics. "
            "Reset once per pass, in evaluate, before the loop."
        )
    if _close(got, sum(batch) / len(batch)):
        shown = ", ".join(f"{v:.6f}" for v in batch)
        return (
            f" That is the plain mean of the per-batch values ({shown}), which weights the last, smaller batch "
            "like a full one: let the metric count over the whole pass and read result() once, after the loop."
        )
    return None


def test_evaluate_combines_the_replicas(probe):
    want = expected("A")
    what = f"evaluate(strategy, model, metrics, dist_dataset) on 2 replicas ({want['n']} examples, batches of 8)"
    result = _result(_call(probe, "epochs", ["A"], what=what), 0, what)
    for name, of in (
        ("accuracy", "the share of right predictions"),
        ("loss", "the mean of the per-example cross-entropies"),
    ):
        got = result[name]
        if _close(got, want[name]):
            continue
        hint = _evaluate_hint(name, got, want)
        if hint is None:
            hint = _one_device_hint(probe, name)
        feedback.fail(
            f"{what} returned {name} {got:.6f}; expected {want[name]:.6f}, {of} over all {want['n']} examples of "
            f"both replicas.{hint}"
        )


def test_evaluate_starts_each_pass_from_zero(probe):
    a, b = expected("A"), expected("B")
    what = (
        "evaluate(...) run twice with the same metrics, first on epoch A (11 examples, accuracy "
        f"{a['accuracy']:.4f}), then on epoch B ({b['n']} examples)"
    )
    result = _result(_call(probe, "epochs", ["A", "B"], what=what), 1, what)
    both = {
        "accuracy": (a["hits"].sum() + b["hits"].sum()) / (a["n"] + b["n"]),
        "loss": (a["loss_sum"] + b["loss_sum"]) / (a["n"] + b["n"]),
    }
    for name in ("accuracy", "loss"):
        got = result[name]
        if _close(got, b[name]):
            continue
        hint = _evaluate_hint(name, got, b, both[name])
        if hint is None:
            hint = _one_device_hint(probe, name)
        feedback.fail(
            f"{what}: the second call returned {name} {got:.6f}; expected {b[name]:.6f}, epoch B's own.{hint}"
        )


def test_evaluate_returns_floats(probe):
    want = expected("A")
    what = f"evaluate(strategy, model, metrics, dist_dataset) on 2 replicas ({want['n']} examples)"
    result = _result(_call(probe, "epochs", ["A"], what=what), 0, what)
    wrong = [
        f"{name} as a value of type {result['types'][name]}"
        for name in ("accuracy", "loss")
        if not result["floats"][name]
    ]
    _expect(
        not wrong,
        (
            f"{what} returned {' and '.join(wrong)}; the prompt asks for Python floats: convert each value with "
            "float(metric.result())."
        ),
    )
