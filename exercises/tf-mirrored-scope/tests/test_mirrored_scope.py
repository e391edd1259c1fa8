"""Hidden tests for tf-mirrored-scope. They run in the judge and never import TensorFlow.

`probe("observe")` reports, from the learner's process: the strategy's type and replica count, every
model and optimizer variable (its type, how many copies, whether the learner's strategy created it),
whether the model is compiled, the loss, and the model's output on a fixed (64, 20) batch.
`probe("fit_once", labels)` runs one 2-replica fit step and reports the loss or the exception.
These tests decide, and say why.
"""

import math

import pytest
from probes import CLASSES

SCOPE_FIX = (
    "Put everything that creates variables inside the scope:\n"
    "    strategy = tf.distribute.MirroredStrategy()\n"
    "    with strategy.scope():\n"
    "        model = ...            # build the model here\n"
    "        model.compile(...)     # and compile it here (this creates the optimizer)"
)


def _observe(probe):
    try:
        seen = probe("observe")
    except Exception as exc:  # a probe only fails on the learner's objects
        pytest.fail(f"inspecting your `strategy` and `model` raised {type(exc).__name__}: {exc}")
    if not seen["has_strategy"] or not seen["has_model"]:
        missing = [n for n in ("strategy", "model") if not seen[f"has_{n}"]]
        pytest.fail(
            f"your module has no top-level {' and no '.join(missing)}; define both at the top level of the file "
            "(not only inside a function that is never called), e.g. `strategy = tf.distribute.MirroredStrategy()`."
        )
    return seen


def _loss_name(loss):
    if loss["kind"] == "str":
        raw = loss["name"]
    elif loss["kind"] == "object":
        raw = loss["class"] + " " + loss["name"]
    else:
        return ""
    return raw.lower().replace("_", "")


def test_strategy_mirrors_two_replicas(probe):
    seen = _observe(probe)
    kind, replicas = seen["strategy_type"], seen["replicas"]
    assert kind in ("MirroredStrategy", "MirroredStrategyV1"), (
        f"`strategy` is a {kind}; expected a tf.distribute.MirroredStrategy. "
        + (
            "OneDeviceStrategy places everything on a single device: nothing is copied and nothing is "
            "synchronised. "
            if kind == "OneDeviceStrategy"
            else ""
        )
        + "Create it with `tf.distribute.MirroredStrategy()`, which uses every available device."
    )
    assert replicas == 2, (
        f"`strategy.num_replicas_in_sync` is {replicas}, but this grader has 2 devices. A MirroredStrategy "
        "with an explicit devices=['/cpu:0'] (or one GPU) mirrors over that one device only. Leave `devices` out: "
        "`tf.distribute.MirroredStrategy()` finds every device by itself."
    )


def test_weights_created_in_scope(probe):
    seen = _observe(probe)
    weights = seen["weights"]
    if weights is None:
        pytest.fail(
            f"could not read model.weights: {seen['weights_error']['type']}: {seen['weights_error']['message']}. "
            "`model` must be a Keras model (keras.Sequential or keras.Model)."
        )
    assert weights, (
        "your model has no weights yet, so nothing was created in the scope. Give it an input size "
        "(keras.Input(shape=(20,)) or input_shape=(20,) on the first layer) so Keras builds the weights at once, "
        "inside strategy.scope()."
    )
    outside = [w["name"] for w in weights if not w["in_scope"]]
    assert not outside, (
        f"{len(outside)} of {len(weights)} weights were not created by your MirroredStrategy "
        f"(e.g. {outside[:3]}; their type is {weights[0]['type']}). This happens when the model is built before "
        "`with strategy.scope():` — compiling inside the scope later does not convert the weights, and the first "
        "fit fails (RuntimeError 'Need to be inside \"with strategy.scope()\"' with Adam, AssertionError with SGD). "
        + SCOPE_FIX
    )
    not_mirrored = [(w["name"], w["type"], w["components"]) for w in weights
                    if w["type"] != "MirroredVariable" or w["components"] != seen["replicas"] or w["components"] < 2]
    assert not not_mirrored, (
        f"these weights are not mirrored over 2 devices (name, type, copies): {not_mirrored[:3]}. Under a "
        "MirroredStrategy with 2 replicas each weight is a MirroredVariable with one copy per device; a "
        "single-device strategy keeps one copy only. Use `tf.distribute.MirroredStrategy()`."
    )


def test_outputs_ten_class_probabilities(probe):
    seen = _observe(probe)
    if seen["output"] is None:
        err = seen["output_error"]
        pytest.fail(
            f"model(x) on a (64, 20) float32 batch raised {err['type']}: {err['message']}. The model must take "
            "20 input features."
        )
    shape = seen["output_shape"]
    assert shape == [64, 10], (
        f"model(x) on a (64, 20) batch returned shape {tuple(shape)}; expected (64, 10): one row per example and "
        "one probability per class. The last layer needs 10 units: keras.layers.Dense(10, activation='softmax')."
    )
    rows = seen["output"]
    sums = [sum(r) for r in rows]
    negative = any(v < 0 for r in rows for v in r)
    bad = [i for i, s in enumerate(sums) if not math.isclose(s, 1.0, abs_tol=1e-4)]
    assert not bad and not negative, (
        f"the outputs are not probabilities: row {bad[0] if bad else 0} sums to {sums[bad[0] if bad else 0]:.4g}"
        + (" and some values are negative" if negative else "")
        + ". The model must end in a softmax (Dense(10, activation='softmax')), so every row is >= 0 and sums to 1. "
        "If you used raw logits with a from_logits=True loss, that trains too, but this exercise asks the model "
        "itself to return class probabilities."
    )


def test_compiled_in_scope(probe):
    seen = _observe(probe)
    assert seen["compiled"] is True and seen["optimizer"], (
        "`model` is not compiled (no optimizer): call model.compile(optimizer=..., loss=...) inside "
        "`with strategy.scope():`, right after building the model. Without compile, fit refuses to run."
    )
    variables = seen["optimizer_variables"] or []
    outside = [v["name"] for v in variables if not v["in_scope"]]
    assert not outside, (
        f"your {seen['optimizer']} optimizer was created outside strategy.scope(): its variables {outside[:3]} are "
        "not mirrored. Keras creates an optimizer's variables when the optimizer object is made — by "
        "`compile(optimizer='adam')`, or by `keras.optimizers.Adam()` wherever you wrote it. Made outside the "
        "scope, fit with Adam raises 'RuntimeError: Mixing different tf.distribute.Strategy objects' (SGD happens "
        "to run, with an unmirrored step counter). Call compile inside the scope and create any optimizer "
        "object there too."
    )


def test_classification_loss(probe):
    seen = _observe(probe)
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
    assert loss.get("from_logits") is not True, (
        f"the loss {shown!r} has from_logits=True, but the model already applies softmax: the loss would apply "
        "softmax a second time. Leave from_logits at False when the model outputs probabilities."
    )


def test_fit_step_on_two_replicas(probe):
    seen = _observe(probe)
    labels = "sparse" if "sparse" in _loss_name(seen["loss"]) else "onehot"
    result = probe("fit_once", labels)
    if not result["ok"]:
        kind, message = result["type"], result["message"]
        fix = f"\n{SCOPE_FIX}"  # where the scope goes, for every cause but one the scope cannot have
        if "must call `compile()`" in message:
            why = "The model was never compiled: call model.compile(...) inside the scope."
        elif "label value" in message and "valid range" in message:
            why = (f"The labels are class ids 0 to {CLASSES - 1}, but the model's output has fewer units: the last "
                   f"layer needs one unit per class, keras.layers.Dense({CLASSES}, activation='softmax').")
            fix = ""
        elif "Mixing different" in message:
            why = ("The model's weights belong to the MirroredStrategy but the optimizer does not: it was created "
                   "(by compile or by hand) outside strategy.scope(). Compile inside the scope.")
        elif "Need to be inside" in message or kind == "AssertionError" or "colocate_vars_with" in message:
            why = ("This is what TensorFlow raises when the model was built outside strategy.scope() and only "
                   "compiled inside it: the weights are plain variables but the optimizer is mirrored.")
        else:
            why = "A model built and compiled inside strategy.scope() fits without errors."
        pytest.fail(
            f"model.fit(x, y, batch_size=8, epochs=1) on 2 replicas raised {kind}: {message[:300]}\n{why}{fix}"
        )
    loss = result["loss"]
    assert loss and all(math.isfinite(v) for v in loss), (
        f"one fit step on 2 replicas reported loss {loss}; expected a finite number. Check the loss and the "
        "output layer (softmax probabilities with a cross-entropy loss)."
    )
    assert all(result["copies_equal"]), (
        "after one fit step the two copies of some weight differ; mirrored weights must stay identical. "
        "Build and compile the model inside strategy.scope() and train it with model.fit."
    )
