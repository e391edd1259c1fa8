"""Hidden tests for tf-mirrored-scope. They run in the judge and never import TensorFlow.

`probe("observe")` reports, from the learner's process: the strategy's type, replica count and devices (and the
devices this grader has), how many weights the model had when the learner's module finished, every model and
optimizer variable (its type, its copies and their devices, whether the learner's strategy created it), whether the
model is compiled, the loss, the model's input shape and its output on a fixed (64, 20) batch.
`probe("fit_once", labels)` runs one fit step and reports the loss or the exception, how many copies each weight has,
whether the copies agree and how many weights the step changed (a strategy over one device passes nothing here).
These tests decide, and say why: a message names a cause only where the observation shows it, else its candidates.
"""

import math
import re

from probes import BATCH, CLASSES, FEATURES
from runner import feedback
from runner.client import SubmissionImportError

SCOPE_FIX = (
    "Put everything that creates variables inside the scope:\n"
    "    strategy = tf.distribute.MirroredStrategy()\n"
    "    with strategy.scope():\n"
    "        model = ...            # build the model here\n"
    "        model.compile(...)     # and compile it here (this creates the optimizer)"
)
FIT = "model.fit(x, y, batch_size=8, epochs=1) on 2 replicas"
LEAVE_DEVICES_OUT = (
    "Leave `devices` out: `tf.distribute.MirroredStrategy()` finds every available device by itself (the GPUs on a "
    "GPU machine, both logical CPUs on this grader)."
)


# TensorFlow's text when a device name cannot be parsed (tf.config.list_physical_devices() names, for example).
DEVICE_SPEC = re.compile(
    r"Unknown attribute '(?P<attr>[^']*)' is encountered while parsing the device spec: '(?P<spec>[^']*)'"
)


def _import_failed(exc: SubmissionImportError) -> None:
    """Word an import failure whose TensorFlow text proves its cause; otherwise let the runner word it."""
    if exc.raised is None:
        return
    type_name, message, line = exc.raised
    found = DEVICE_SPEC.search(message)
    if type_name != "ValueError" or not found:
        return
    where = f" (line {line})" if line is not None else ""
    if found["attr"] == "physical_device":
        said = (
            f"TensorFlow could not parse the device name '{found['spec']}': that is the name of a physical device "
            "(what tf.config.list_physical_devices() lists), and a strategy's devices are logical ones "
            "('/device:CPU:0', 'GPU:1'; tf.config.list_logical_devices() lists them). This grader has one physical "
            "CPU, split into 2 logical ones."
        )
    else:
        said = f"TensorFlow could not parse the device name '{found['spec']}'."
    feedback.fail(f"Your code failed while being imported{where}: {said} " + LEAVE_DEVICES_OUT, details=exc.details)


def _observe(probe):
    try:
        seen = probe("observe")
    except SubmissionImportError as exc:
        _import_failed(exc)
        raise
    if not seen["has_strategy"] or not seen["has_model"]:
        missing = [n for n in ("strategy", "model") if not seen[f"has_{n}"]]
        feedback.fail(
            f"your module has no top-level {' and no '.join(missing)}; define both at the top level of the file "
            "(not only inside a function that is never called), e.g. `strategy = tf.distribute.MirroredStrategy()`."
        )
    return seen


def _keras_model(seen) -> None:
    """Fail, saying what `model` is instead, unless it is a Keras model."""
    if seen["is_keras_model"]:
        return
    kind, name = seen["model_type"], seen["model_name"]
    if kind == "NoneType":
        why = "`model` is None: assign the Keras model you build to it, inside `with strategy.scope():`."
    elif seen["model_is_class"]:
        why = (
            f"`model` is the class {name} itself, not a model made from it: create one by calling the class, "
            f"`model = {name}(...)`, inside `with strategy.scope():` (and build it there)."
        )
    elif kind == "function":
        why = (
            f"`model` is the function {name}, not a Keras model: assign what the function returns, "
            f"`model = {name}()` (with the parentheses), inside `with strategy.scope():`."
        )
    else:
        why = f"`model` is a {kind}, not a Keras model (keras.Sequential, keras.Model or a subclass of keras.Model)."
    feedback.fail(why)


DEFAULT_STRATEGY = "_DefaultDistributionStrategy"


def _strategy_kind(seen) -> str:
    """What `strategy` is, in words a learner knows (TensorFlow's default strategy has a private class name)."""
    if seen["strategy_type"] == DEFAULT_STRATEGY:
        return (
            "TensorFlow's default strategy, which tf.distribute.get_strategy() returns outside any scope and "
            "which distributes nothing"
        )
    return f"a {seen['strategy_type']}"


def _strategy_object(seen) -> None:
    """Fail when `strategy` is no strategy object, so no variable can have been created by it."""
    if seen["strategy_type"] == "NoneType":
        feedback.fail(
            "`strategy` is None, so no variable of your model was created by it: create it with "
            "`strategy = tf.distribute.MirroredStrategy()` and build and compile under `with strategy.scope():`."
        )
    if seen["strategy_is_class"]:
        name = seen["strategy_class"]
        feedback.fail(
            f"`strategy` is the class {name} itself, not a strategy object, so no variable of your model was "
            f"created by it: each call `{name}()` (or `strategy()`) makes a new strategy, and the one whose scope your "
            f"code entered is not the object `strategy` holds. Make one, `strategy = tf.distribute.{name}()`, and "
            "build and compile under `with strategy.scope():`."
        )


def _names(items, most: int = 3) -> str:
    shown = ", ".join(str(i) for i in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _missing_devices(seen) -> list[str]:
    return [d for d in seen["strategy_devices"] or [] if d not in seen["available_devices"]]


def _loss_name(loss):
    if loss["kind"] == "str":
        raw = loss["name"]
    elif loss["kind"] == "object":
        raw = loss["class"] + " " + loss["name"]
    else:
        return ""
    return raw.lower().replace("_", "")


def _outside_scope(seen, outside, weights) -> str:
    """Why some weights were not created by the learner's strategy, from what the probe saw."""
    n, total = len(outside), len(weights)
    kind = outside[0]["type"]
    example = _names([w["name"] for w in outside])
    if seen["weights_after_import"] == 0:
        return (
            f"when your module had finished, `model` had no weights yet: it was given no input size, so Keras creates "
            "its weights the first time the model is called, and that first call (the tests', after your module "
            f"ran) is outside strategy.scope(): its {total} weights are now plain {kind} variables, not mirrored ones. "
            f"Give the model its input size, keras.Input(shape=({FEATURES},)) or input_shape=({FEATURES},) on the "
            "first layer (or call it once on a batch inside the scope), so that its weights are created inside "
            "`with strategy.scope():`."
        )
    others = [w for w in outside if w["components"]]
    if others:
        owner = others[0].get("owner") or "strategy"
        return (
            f"{len(others)} of {total} weights ({example}) are mirrored, but by a different {owner} object than "
            "your `strategy`: every tf.distribute.MirroredStrategy() call makes a new strategy, and each owns only "
            "the variables made in its own scope. Make the strategy once and build and compile under its scope, "
            "`with strategy.scope():` (not `with tf.distribute.MirroredStrategy().scope():`, and no new "
            "`strategy = ...` after the model is built)."
        )
    optimizer_vars = seen["optimizer_variables"] or []
    if optimizer_vars and all(v["in_scope"] for v in optimizer_vars):
        return (
            f"{n} of {total} weights ({example}) are plain {kind} variables that your MirroredStrategy did not "
            "create, while the optimizer was created inside its scope: the model was built before `with "
            "strategy.scope():` (or after it) and only compiled inside it. Compiling inside the scope does not "
            "convert weights that already exist, and the first fit fails (RuntimeError 'Need to be inside \"with "
            "strategy.scope()\"' with Adam, AssertionError with SGD). " + SCOPE_FIX
        )
    optimizer = "the optimizer's variables are not mirrored either" if optimizer_vars else "there is no optimizer"
    return (
        f"{n} of {total} weights ({example}) are plain {kind} variables that your MirroredStrategy did not create, "
        f"and {optimizer}: nothing that creates variables ran inside the scope. Either the scope was never entered "
        "(`strategy.scope()` on a line of its own only makes a context manager; enter it with `with "
        "strategy.scope():` and indent the building and compiling under it), or the model was built and compiled "
        "before or after the `with` block. " + SCOPE_FIX
    )


def test_strategy_mirrors_two_replicas(probe):
    seen = _observe(probe)
    kind, replicas = seen["strategy_type"], seen["replicas"]
    if kind == "NoneType":
        feedback.fail("`strategy` is None: create it with `strategy = tf.distribute.MirroredStrategy()`.")
    if seen["strategy_is_class"]:
        feedback.fail(
            f"`strategy` is the class {seen['strategy_class']} itself, not a strategy: create one by calling it, "
            "`strategy = tf.distribute.MirroredStrategy()` (with the parentheses)."
        )
    assert kind in ("MirroredStrategy", "MirroredStrategyV1"), (
        f"`strategy` is {_strategy_kind(seen)}; expected a tf.distribute.MirroredStrategy. "
        + (
            "OneDeviceStrategy places everything on a single device: nothing is copied and nothing is synchronised. "
            if kind == "OneDeviceStrategy"
            else ""
        )
        + "Create it with `tf.distribute.MirroredStrategy()`, which uses every available device."
    )
    devices, available = seen["strategy_devices"] or [], seen["available_devices"]
    assert replicas == 2, (
        f"`strategy.num_replicas_in_sync` is {replicas}: your MirroredStrategy mirrors over {_names(devices)}, but "
        f"this grader has 2 devices ({_names(available)}). A MirroredStrategy mirrors over exactly the devices it is "
        "given. " + LEAVE_DEVICES_OUT
    )
    missing = _missing_devices(seen)
    assert not missing, (
        f"your MirroredStrategy mirrors over {_names(devices)}, but this grader has no {_names(missing)}: its "
        f"devices are {_names(available)}. Given names of devices that do not exist, a MirroredStrategy still "
        f"counts {replicas} replicas, but TensorFlow puts their copies on the devices it has, and training over "
        "them can wait forever. " + LEAVE_DEVICES_OUT
    )


def test_weights_created_in_scope(probe):
    seen = _observe(probe)
    _keras_model(seen)
    _strategy_object(seen)
    weights = seen["weights"]
    if weights is None:
        error = seen["weights_error"]
        feedback.fail(feedback.raised("reading model.weights", error["type"], error["message"]))
    assert weights, (
        f"your model has no weights at all, even after it was called on a ({BATCH}, {FEATURES}) batch: it needs "
        f"layers with weights, such as keras.layers.Dense({CLASSES}, activation='softmax'), created inside "
        "`with strategy.scope():`."
    )
    outside = [w for w in weights if not w["in_scope"]]
    if outside:
        feedback.fail(_outside_scope(seen, outside, weights))
    not_mirrored = [w for w in weights if w["type"] != "MirroredVariable" or (w["components"] or 1) < 2]
    if not_mirrored:
        w = not_mirrored[0]
        copies = w["components"] or 1
        feedback.fail(
            f"{len(not_mirrored)} of {len(weights)} weights are not mirrored over 2 devices: {w['name']} is a "
            f"{w['type']} with {copies} cop{'y' if copies == 1 else 'ies'}. Under a MirroredStrategy with 2 replicas "
            f"each weight is a MirroredVariable with one copy per device; a strategy over one device keeps one copy "
            f"only (your `strategy` is {_strategy_kind(seen)}, with {seen['replicas']} replica(s)). Use "
            "`tf.distribute.MirroredStrategy()`."
        )
    shared = [w for w in weights if w.get("devices") and len(set(w["devices"])) < len(w["devices"])]
    assert not shared, (
        f"each weight has {shared[0]['components']} copies, but not on {shared[0]['components']} different devices: "
        f"{shared[0]['name']} has its copies on {_names(shared[0]['devices'])} (this grader's devices are "
        f"{_names(seen['available_devices'])}). The strategy's devices must be devices this machine has. "
        + LEAVE_DEVICES_OUT
    )


def _not_probabilities(rows) -> str:
    """Say how the (64, 10) output fails to be one probability distribution per row."""
    sums = [sum(r) for r in rows]
    bad = [i for i, s in enumerate(sums) if not math.isclose(s, 1.0, abs_tol=1e-4)]
    negative = [v for r in rows for v in r if v < 0]
    first = bad[0] if bad else 0
    seen = f"row {first} of model(x) sums to {sums[first]:.3g}"
    columns = [sum(r[j] for r in rows) for j in range(len(rows[0]))]
    if negative:
        return (
            f"the outputs are not probabilities: {seen} and {len(negative)} values are negative (the smallest "
            f"{min(negative):.3g}), which a softmax never gives: the model does not end in a softmax, so it returns "
            f"raw scores (logits). End it in one, keras.layers.Dense({CLASSES}, activation='softmax'), so every row "
            "is >= 0 and sums to 1. (Raw logits with a from_logits=True loss train too, but this exercise asks the "
            "model itself to return class probabilities.)"
        )
    if bad and all(math.isclose(c, 1.0, abs_tol=1e-4) for c in columns):
        return (
            f"the outputs are not probabilities per example: {seen}, while each of the {len(columns)} columns sums to "
            f"1 over the {len(rows)} examples of the batch: your softmax normalises over axis 0, the batch axis. "
            "Normalise over the classes, the last axis: keras.layers.Softmax() or Softmax(axis=-1), or "
            "activation='softmax'."
        )
    within = all(0 <= v <= 1 for r in rows for v in r)
    return (
        f"the outputs are not probabilities: {seen}"
        + (
            ", although every value lies between 0 and 1: each class is squashed on its own (as a sigmoid does), "
            "not normalised against the others. "
            if within
            else ". "
        )
        + f"The model must end in a softmax over the classes, keras.layers.Dense({CLASSES}, activation='softmax'), "
        "so every row is >= 0 and sums to 1."
    )


def _input_problem(seen) -> str:
    """Why the model cannot take a (64, 20) batch, from its input shape; "" when the shape does not show it."""
    shape = seen["input_shape"]
    if not shape or shape[1:] == [FEATURES]:
        return ""
    shown = "(" + ", ".join("None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    said = (
        f"your model takes inputs of shape {shown} (None is the batch), so it cannot take the ({BATCH}, {FEATURES}) "
        f"batch: one example is {FEATURES} features, so the input shape must be (None, {FEATURES}). "
    )
    if len(shape) > 2:
        return said + (
            "keras.Input(shape=...) and input_shape= take the shape of ONE example, without the batch size: "
            f"shape=({FEATURES},)."
        )
    hint = f" ({CLASSES} is the number of classes, the output size)" if shape[-1] == CLASSES else ""
    return said + f"Give it keras.Input(shape=({FEATURES},)) or input_shape=({FEATURES},){hint}."


def test_outputs_ten_class_probabilities(probe):
    seen = _observe(probe)
    _keras_model(seen)
    if seen["output"] is None:
        error = seen["output_error"]
        got = feedback.raised(f"model(x) on a ({BATCH}, {FEATURES}) float32 batch", error["type"], error["message"])
        problem = _input_problem(seen)
        if problem:
            feedback.fail(problem, details=got.details)
        feedback.fail(got.message + f" The model must take {FEATURES} input features.", details=got.details)
    shape = seen["output_shape"]
    assert shape == [BATCH, CLASSES], (
        f"model(x) on a ({BATCH}, {FEATURES}) batch returned shape {tuple(shape)}; expected ({BATCH}, {CLASSES}): one "
        "row per example and one probability per class. "
        + (
            f"The last layer needs {CLASSES} units: keras.layers.Dense({CLASSES}, activation='softmax')."
            if len(shape) == 2 and shape[0] == BATCH
            else f"The model must end in keras.layers.Dense({CLASSES}, activation='softmax') on (batch, features)."
        )
    )
    assert _probabilities(seen), _not_probabilities(seen["output"])


def _probabilities(seen) -> bool:
    """Whether model(x) returned one probability distribution per row (False when it returned nothing)."""
    rows = seen["output"]
    if not rows or seen["output_shape"] != [BATCH, CLASSES]:
        return False
    return all(math.isclose(sum(r), 1.0, abs_tol=1e-4) for r in rows) and not any(v < 0 for r in rows for v in r)


def test_compiled_in_scope(probe):
    seen = _observe(probe)
    _keras_model(seen)
    assert seen["compiled"] is True and seen["optimizer"], (
        "`model` is not compiled (no optimizer): call model.compile(optimizer=..., loss=...) inside "
        "`with strategy.scope():`, right after building the model. Without compile, fit refuses to run."
    )
    variables = seen["optimizer_variables"] or []
    outside = [v for v in variables if not v["in_scope"]]
    if not outside:
        return
    _strategy_object(seen)
    others = [v for v in outside if v["components"]]
    if others:
        feedback.fail(
            f"your {seen['optimizer']} optimizer's variables are mirrored, but by a different "
            f"{others[0].get('owner') or 'strategy'} object than your `strategy`: it was created (by compile or by "
            "hand) under the scope of another strategy object. Compile under `with strategy.scope():` of the "
            "strategy you export, and make that strategy once."
        )
    weights_plain = any(not w["in_scope"] and not w["components"] for w in seen["weights"] or [])
    feedback.fail(
        f"your {seen['optimizer']} optimizer was created outside strategy.scope(): its variables "
        f"{_names([v['name'] for v in outside])} are not mirrored. Keras creates an optimizer's variables when the "
        "optimizer object is made — by `compile(optimizer='adam')`, or by `keras.optimizers.Adam()` wherever you "
        "wrote it (also as a function's default argument: Python evaluates a default once, when `def` runs, not "
        "when the function is called inside the scope). "
        + (
            "Your model's weights are plain variables too: if your code calls `strategy.scope()` on a line of its "
            "own, without `with`, the scope is never entered. "
            if weights_plain
            else "With the model built in the scope and the optimizer made outside it, fit with Adam raises "
            "'RuntimeError: Mixing different tf.distribute.Strategy objects' (SGD happens to run, with an unmirrored "
            "step counter). "
        )
        + "Call compile inside the scope and create any optimizer object there too."
    )


def test_classification_loss(probe):
    seen = _observe(probe)
    _keras_model(seen)
    loss = seen["loss"]
    assert loss["kind"] in ("str", "object"), (
        "the model has no loss: compile it with a classification loss, e.g. "
        "model.compile(optimizer='adam', loss='sparse_categorical_crossentropy') for integer labels."
    )
    name = _loss_name(loss)
    shown = loss.get("name") or loss.get("class")
    assert "categorical" in name and "crossentropy" in name, (
        f"the model is compiled with loss {shown!r}; a 10-class classifier needs a categorical cross-entropy: "
        "'sparse_categorical_crossentropy' for integer labels (0..9) or 'categorical_crossentropy' for one-hot "
        "labels. (Binary cross-entropy and mean squared error are for other kinds of targets.)"
    )
    if loss.get("from_logits") is not True:
        return
    if _probabilities(seen):
        feedback.fail(
            f"the loss {shown!r} has from_logits=True, but the model already applies softmax: the loss would apply "
            "softmax a second time. Leave from_logits at False when the model outputs probabilities."
        )
    feedback.fail(
        f"the loss {shown!r} has from_logits=True, which fits a model that returns raw scores (logits), as yours "
        "does (see the output test); but this exercise asks the model itself to end in a softmax, and then the loss "
        "must leave from_logits at False (the default), or it would apply softmax a second time."
    )


def _fit_blockers(seen) -> list[str]:
    """What the other tests found that can make fit fail."""
    found = []
    if not (seen["compiled"] is True and seen["optimizer"]):
        found.append("the model is not compiled: call model.compile(optimizer=..., loss=...) inside the scope")
    weights = seen["weights"] or []
    if any(not w["in_scope"] for w in weights):
        found.append("the model's weights were not created by your strategy (see the weights test)")
    if any(not v["in_scope"] for v in seen["optimizer_variables"] or []):
        found.append("the optimizer was not created by your strategy (see the compile test)")
    name = _loss_name(seen["loss"])
    if seen["compiled"] is True and not ("categorical" in name and "crossentropy" in name):
        found.append("the loss is not a categorical cross-entropy (see the loss test)")
    if seen["output"] is None:
        found.append(f"the model does not take a batch of {FEATURES} features (see the output test)")
    elif len(seen["output_shape"]) == 2 and seen["output_shape"][1] < CLASSES:
        found.append(
            f"the model outputs {seen['output_shape'][1]} value(s) per example, but the labels are classes 0 to "
            f"{CLASSES - 1}: the last layer needs {CLASSES} units, keras.layers.Dense({CLASSES}, activation='softmax')"
        )
    return found


def test_fit_step_on_two_replicas(probe):
    seen = _observe(probe)
    _keras_model(seen)
    missing = _missing_devices(seen)
    if missing:
        feedback.fail(
            f"not run: your strategy mirrors over {_names(missing)}, which this grader does not have, and a fit over "
            "devices that do not exist can wait forever (see the strategy test). " + LEAVE_DEVICES_OUT
        )
    labels = "sparse" if "sparse" in _loss_name(seen["loss"]) else "onehot"
    result = probe("fit_once", labels)
    if not result["ok"]:
        got = feedback.raised(FIT, result["type"], result["message"])
        found = _fit_blockers(seen)
        if found:
            said = got.message if got.cause else f"{FIT} raised {result['type']} (TensorFlow's text: see details)."
            feedback.fail(
                said
                + "\nFix what the tests above found first; each of these can make fit fail:\n"
                + "\n".join(f"- {f}" for f in found),
                details=got.details,
            )
        feedback.fail(
            got.message + f"\nA model built and compiled inside strategy.scope(), with {FEATURES} inputs and "
            f"{CLASSES} softmax outputs, fits without errors.",
            details=got.details,
        )
    loss = result["loss"]
    assert loss and all(math.isfinite(v) for v in loss), (
        f"one fit step on 2 replicas reported loss {loss}; expected a finite number. Check the loss and the "
        "output layer (softmax probabilities with a cross-entropy loss)."
    )
    copies = result.get("copies") or []
    single = [c for c in copies if c < 2]
    if not result["copies_equal"] or single:
        feedback.fail(
            f"one fit step, model.fit(x, y, batch_size=8, epochs=1), ran, but not over 2 replicas: {len(single)} of "
            f"{len(copies)} weights have a single copy "
            f"after the step (your `strategy` has {result.get('replicas')} replica(s)), so the step trained one "
            "copy and there is nothing to keep in sync. Under tf.distribute.MirroredStrategy() with 2 replicas each "
            "weight has one copy per device, and fit splits the batch of 8 between them (see the strategy and "
            "weights tests)."
        )
    assert all(result["copies_equal"]), (
        "after one fit step the two copies of some weight differ; mirrored weights must stay identical. "
        "Build and compile the model inside strategy.scope() and train it with model.fit."
    )
    assert result.get("changed") != 0, (
        "one fit step, model.fit(x, y, batch_size=8, epochs=1), ran, but changed none of the model's weights: the "
        "step did not train. Compile with an optimizer "
        "that has a positive learning rate, and train every layer (trainable=True)."
    )
