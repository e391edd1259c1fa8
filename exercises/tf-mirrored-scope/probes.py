"""Probes: look at the learner's `strategy` and `model` in their own process and report plain data.

They only observe (types, flags, numbers, the exception a fit step raised); the hidden tests decide what
is right. TensorFlow is imported inside the functions so that the judge can import this file cheaply.
"""

import numpy as np

BATCH = 64
FEATURES = 20
CLASSES = 10

# id(learner module) -> what the first observation in this process saw (see observe).
_FIRST_LOOK: dict[int, dict] = {}


def inputs(n: int = BATCH, seed: int = 0) -> np.ndarray:
    """The (n, 20) float32 batch the probes feed the model; the tests can rebuild it."""
    return np.random.RandomState(seed).rand(n, FEATURES).astype("float32")


def _error(exc: BaseException) -> dict:
    text = str(exc)
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ")]
    if "(most recent call last)" in text and frames:
        # A graph execution error lists TensorFlow's own call stack; the cause is the first line after it.
        cause = next((line.strip() for line in lines[frames[-1] + 1 :] if line.strip() and not line[0].isspace()), "")
        text = f"{lines[0].strip()} {cause}".strip()
    return {"type": type(exc).__name__, "message": text[:600]}


def _device(name) -> str:
    """A device name as "CPU:0" (TensorFlow writes the same device several ways: "/gpu:0", "/device:GPU:0", ...)."""
    import tensorflow as tf

    try:
        spec = tf.DeviceSpec.from_string(str(name))
    except Exception:
        return str(name)
    if spec.device_type is None:
        return str(name)
    return f"{spec.device_type.upper()}:{spec.device_index or 0}"


def _variable(strategy, variable) -> dict:
    value = getattr(variable, "value", variable)  # Keras 3: the tf.Variable (a MirroredVariable) is `.value`
    info = {"name": str(getattr(variable, "path", getattr(variable, "name", "?"))), "type": type(value).__name__}
    components = getattr(value, "values", None)
    info["components"] = len(components) if isinstance(components, (tuple, list)) else None
    if isinstance(components, (tuple, list)):
        info["devices"] = [_device(getattr(c, "device", "?")) for c in components]
    owner = getattr(value, "_distribute_strategy", None)  # the strategy that made a distributed variable
    info["owner"] = None if owner is None else type(owner).__name__
    try:
        info["in_scope"] = bool(strategy.extended.variable_created_in_scope(value))
    except Exception as exc:
        info["in_scope"] = None
        info["error"] = _error(exc)
    return info


def _describe_loss(loss) -> dict:
    if loss is None:
        return {"kind": "none"}
    if isinstance(loss, str):
        return {"kind": "str", "name": loss}
    info = {
        "kind": "object",
        "class": type(loss).__name__,
        "name": str(getattr(loss, "name", "") or getattr(loss, "__name__", "")),
    }
    try:
        config = loss.get_config()
        info["from_logits"] = bool(config.get("from_logits", False))
    except Exception:
        info["from_logits"] = None
    return info


def observe(submission) -> dict:
    """Everything the tests need that does not train: strategy, variables, compile state, loss, outputs."""
    import keras
    import tensorflow as tf

    seen = {"has_strategy": hasattr(submission, "strategy"), "has_model": hasattr(submission, "model")}
    strategy = getattr(submission, "strategy", None)
    model = getattr(submission, "model", None)
    seen["strategy_type"] = type(strategy).__name__
    seen["strategy_module"] = type(strategy).__module__
    seen["strategy_is_class"] = isinstance(strategy, type)
    seen["strategy_class"] = strategy.__name__ if isinstance(strategy, type) else None
    try:
        seen["replicas"] = int(strategy.num_replicas_in_sync)
    except Exception as exc:
        seen["replicas"] = None
        seen["replicas_error"] = _error(exc)
    try:
        seen["strategy_devices"] = [_device(d) for d in strategy.extended.worker_devices]
    except Exception:
        seen["strategy_devices"] = None
    seen["available_devices"] = [
        _device(d.name) for d in tf.config.list_logical_devices() if d.device_type in ("CPU", "GPU")
    ]
    seen["model_type"] = type(model).__name__
    seen["model_is_class"] = isinstance(model, type)
    seen["model_name"] = str(getattr(model, "__name__", "")) if callable(model) else ""
    seen["is_keras_model"] = isinstance(model, (keras.Model, tf.keras.Model)) and not isinstance(model, type)
    # What the model held when the learner's module had finished: the first look in this process comes before any
    # probe calls the model (calling an unbuilt model creates its weights then, outside the learner's scope).
    first = _FIRST_LOOK.setdefault(id(submission), {})
    if "weights" not in first:
        try:
            first["weights"] = len(model.weights)
        except Exception:
            first["weights"] = None
    seen["weights_after_import"] = first["weights"]
    try:
        shape = model.input_shape
        seen["input_shape"] = None if shape is None else [None if d is None else int(d) for d in shape]
    except Exception:
        seen["input_shape"] = None
    try:
        seen["weights"] = [_variable(strategy, w) for w in model.weights]
    except Exception as exc:
        seen["weights"] = None
        seen["weights_error"] = _error(exc)
    seen["compiled"] = getattr(model, "compiled", None)
    optimizer = getattr(model, "optimizer", None)
    seen["optimizer"] = None if optimizer is None else type(optimizer).__name__
    try:
        seen["optimizer_variables"] = [_variable(strategy, v) for v in optimizer.variables] if optimizer else []
    except Exception as exc:
        seen["optimizer_variables"] = None
        seen["optimizer_error"] = _error(exc)
    seen["loss"] = _describe_loss(getattr(model, "loss", None))
    seen["output"] = seen["output_shape"] = None
    if not seen["is_keras_model"]:  # never call what is not a model (a builder function would run again here)
        return seen
    try:
        out = model(inputs(), training=False)
        seen["output"] = np.asarray(out, dtype="float64").tolist()
        seen["output_shape"] = list(np.shape(out))
    except Exception as exc:
        seen["output_error"] = _error(exc)
    return seen


def fit_once(submission, labels: str) -> dict:
    """Run model.fit for one step of 8 samples (outside the scope, as a training script would).

    `labels` is "sparse" (integer class ids) or "onehot"; the tests choose it from the loss.
    """
    model = submission.model
    x = inputs(8, seed=1)
    y = np.arange(8) % CLASSES
    if labels == "onehot":
        y = np.eye(CLASSES, dtype="float32")[y]
    try:
        before = [np.array(w.numpy()) for w in model.weights]
    except Exception:
        before = None
    try:
        history = model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    except Exception as exc:
        return {"ok": False, **_error(exc)}
    copies_equal, copies = [], []
    for w in model.weights:
        value = getattr(w, "value", w)
        parts = getattr(value, "values", None)
        copies.append(len(parts) if isinstance(parts, (tuple, list)) else 1)
        if isinstance(parts, (tuple, list)) and len(parts) > 1:
            first = parts[0].numpy()
            copies_equal.append(all(np.array_equal(first, p.numpy()) for p in parts[1:]))
    changed = None
    if before is not None:
        try:
            changed = sum(not np.array_equal(b, w.numpy()) for b, w in zip(before, model.weights, strict=False))
        except Exception:
            changed = None
    losses = history.history.get("loss", [])
    return {
        "ok": True,
        "loss": [float(v) for v in losses],
        "copies_equal": copies_equal,  # one entry per weight with 2 or more copies
        "copies": copies,  # how many copies each weight has after the step
        "changed": changed,  # how many weights the step changed
        "replicas": _replicas(getattr(submission, "strategy", None)),
    }


def _replicas(strategy):
    try:
        return int(strategy.num_replicas_in_sync)
    except Exception:
        return None
