"""Hidden tests for tf-lr-scaling. They run in the judge (no TensorFlow here, only data).

The probes call the learner's scaled_lr with a real 2-replica MirroredStrategy ("mirrored"), a 1-replica
MirroredStrategy ("one") or a stand-in object whose only attribute is num_replicas_in_sync (a number); they
call WarmupSchedule eagerly and inside a tf.function, and fit a Dense(1) with make_optimizer's optimizer.
An exception the learner's code raised comes back as data ({"type", "message"}); the messages word it with
runner.feedback and keep TensorFlow's own text as details.
"""

import math
import re
from typing import NoReturn

from runner import feedback

FIX = "Scale with the global batch: base_lr * (per_replica_batch * strategy.num_replicas_in_sync) / base_batch."

# TensorFlow's texts for two schedule mistakes, told in our words (the raw text stays in the details).
SYMBOLIC = "as a Python `bool` is not allowed"
# int(t)/float(t) on a symbolic tensor, and t.numpy() (also what int() of a variable calls) inside a tf.function.
SYMBOLIC_VALUE = re.compile(
    r"(?P<fn>int|float)\(\) argument must be .*not 'SymbolicTensor'|'SymbolicTensor' object has no attribute 'numpy'"
)
FLOAT_INTO_INT = re.compile(
    r"Cannot convert (?P<v>\S+) to EagerTensor of dtype (?P<d>u?int\d+)|Expected (?P<d2>u?int\d+), but got (?P<v2>\S+) "
    r"of type 'float'"
)
STAND_IN_ATTRIBUTE = re.compile(r"'StandInStrategy' object has no attribute '(?P<name>\w+)'")


def _describe(replicas):
    if replicas == "mirrored":
        return "MirroredStrategy() with 2 replicas"
    if replicas == "one":
        return "MirroredStrategy(devices=['/cpu:0']) with 1 replica"
    return f"a strategy with num_replicas_in_sync == {replicas}"


def _count(replicas):
    return 2 if replicas == "mirrored" else 1 if replicas == "one" else int(replicas)


def _close(got, want):
    return got is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)


def _num(value):
    return "none" if value is None else f"{value:.6g}"


def _nums(values):
    return "[" + ", ".join(_num(v) for v in values) + "]"


def _schedule_error(what, error) -> NoReturn:
    """Fail with an exception from calling the schedule: in our words where its text proves what happened (TensorFlow's
    own text, whose advice does not fit here, stays in the details), else worded by runner.feedback."""
    message = error["message"]
    details = feedback.clean_details(f"{error['type']}: {message}")
    if SYMBOLIC in message:
        feedback.fail(
            f"{what} raised {error['type']}: a symbolic tensor was used as a Python bool. A Python `if` (or `while`, "
            "`and`, `or`, `not`, bool()) looked at the value of a tensor, and inside a compiled function (a "
            "tf.function, and the train step model.fit compiles) the step has no value yet. Compute the ramp with "
            "tensor ops instead, e.g. tf.minimum(1.0, (tf.cast(step, tf.float32) + 1) / warmup_steps), or choose with "
            "tf.where/tf.cond; an `if` on warmup_steps itself (a Python int) is fine.",
            details=details,
        )
    value = SYMBOLIC_VALUE.search(message)
    if value:
        how = f"{value['fn']}()" if value["fn"] else ".numpy() (or int() of a variable)"
        feedback.fail(
            f"{what} raised {error['type']}: Python asked a symbolic tensor for its value with {how}. Inside a "
            "compiled function (a tf.function, and the train step model.fit compiles) the step has no value yet, so "
            "int(step), float(step) and step.numpy() work only when the schedule is called eagerly. Keep the step a "
            "tensor (tf.cast(step, tf.float32)) and compute with tensor ops; to log from inside, use tf.print.",
            details=details,
        )
    found = FLOAT_INTO_INT.search(message)
    if found:
        value, dtype = found["v"] or found["v2"], found["d"] or found["d2"]
        feedback.fail(
            f"{what} raised {error['type']}: TensorFlow had to turn the float {value} into an {dtype} tensor. A float "
            "met an integer tensor in one operation (Keras passes the step as an int64 tensor), and TensorFlow does "
            "not mix dtypes: cast the step to float first, tf.cast(step, tf.float32).",
            details=details,
        )


def _fail_error(what, error, hint="") -> NoReturn:
    """Fail with an exception the learner's code raised (a probe's {"type", "message"}), worded by runner.feedback."""
    told = feedback.raised(what, error["type"], error["message"])
    feedback.fail(told.message + (f" {hint}" if hint else ""), details=told.details)


def _fail_raised(what, exc) -> NoReturn:
    """Fail with an exception a probe call raised in the learner's process (a learner exception outside the
    probe's own try blocks, or the process exiting)."""
    type_name = getattr(exc, "type_name", type(exc).__name__)
    message = str(exc.args[0]) if exc.args else str(exc)
    told = feedback.raised(what, type_name, message)
    line = getattr(exc, "line", None)
    text = told.message[:-1] if told.message.endswith(".") else told.message
    feedback.fail(text + (f" (your code, line {line})." if line else "."), details=told.details)


def _probe(probe, name, *args, what):
    try:
        return probe(name, *args)
    except Exception as exc:  # the learner's exception, told as feedback
        _fail_raised(what, exc)


# ---------------------------------------------------------------------------------------------- scaled_lr


def _scale_hint(got, base_lr, base_batch, per_replica, k):
    """Name the mistake whose value `got` is, when only one mistake gives it here."""
    want = base_lr * per_replica * k / base_batch
    known = [
        (base_lr * per_replica * 2 / base_batch,
         f"that is the rate for 2 replicas, and this strategy has {k}: read the count from "
         "strategy.num_replicas_in_sync instead of hard-coding it (or counting this machine's devices)"),
        (base_lr * per_replica / base_batch,
         "that scales by the per-replica batch only, but each step combines the gradients of every replica's slice: "
         "the step learns from the global batch"),
        (base_lr * k,
         "that is base_lr * num_replicas_in_sync: it ignores how the per-replica batch compares with the base batch"),
        (base_lr * (per_replica * k // base_batch),
         f"that is base_lr times global_batch / base_batch = {per_replica * k}/{base_batch} rounded down to a whole "
         "number: the factor can be fractional, so use true division `/`, not `//` or int()"),
        (base_lr * math.sqrt(per_replica * k / base_batch),
         "that is square-root scaling, base_lr * sqrt(global_batch / base_batch): the task asks for the linear rule, "
         "the rate multiplied by global_batch / base_batch itself"),
        (base_lr * base_batch / (per_replica * k),
         "that is base_lr * base_batch / global_batch: the ratio is upside down (a bigger global batch must give a "
         "bigger rate)"),
    ]
    for value, hint in known:
        if not _close(value, want) and _close(got, value):
            return hint
    return "expected base_lr * global_batch / base_batch"


def _stand_in_error(what, error):
    """Fail when scaled_lr looked for more than num_replicas_in_sync on a stand-in strategy."""
    found = STAND_IN_ATTRIBUTE.search(error["message"])
    if error["type"] == "AttributeError" and found:
        feedback.fail(
            f"{what} raised AttributeError: the strategy has no attribute '{found['name']}'. For machines with "
            "more GPUs than this grader, the tests pass stand-in strategies that have only num_replicas_in_sync, as "
            "the prompt says: compute the global batch from strategy.num_replicas_in_sync alone.",
            details=f"AttributeError: {error['message']}",
        )


def _scaled(probe, base_lr, base_batch, per_replica, replicas):
    what = f"scaled_lr({base_lr}, {base_batch}, {per_replica}, {_describe(replicas)})"
    seen = _probe(probe, "scaled", base_lr, base_batch, per_replica, replicas, what=what)
    error = seen.get("error")
    if error:
        _stand_in_error(what, error)
        hint = ""
        if error["type"] == "ValueError" and 1 in (base_batch, per_replica):
            hint = ("These arguments are valid: a batch size of 1 is allowed, only a batch size below 1 (0 or "
                    "negative) is an error.")
        elif error["type"] == "ValueError":
            hint = "These arguments are valid: base_lr is positive and both batch sizes are at least 1."
        _fail_error(what, error, hint)
    if seen["value"] is None or seen["is_bool"]:
        kind = "None" if str(seen["type"]).startswith("NoneType") else seen["type"]
        feedback.fail(f"{what} returned {kind}; return the learning rate as a number.")
    return what, seen["value"]


# (base_lr, base_batch, per_replica_batch, replicas)
SCALED = [
    (0.1, 64, 32, "mirrored"),  # global 64 = base: unchanged
    (0.1, 32, 32, "mirrored"),  # global 64: twice
    (0.1, 32, 32, "one"),       # one replica at the base batch
    (0.1, 256, 64, 8),          # global 512: twice
    (0.1, 256, 32, 4),          # global 128: half, although 4 GPUs
    (0.05, 100, 30, 5),         # global 150: 1.5x
]


def test_scaled_lr_follows_global_batch(probe):
    for base_lr, base_batch, per_replica, replicas in SCALED:
        k = _count(replicas)
        want = base_lr * per_replica * k / base_batch
        what, got = _scaled(probe, base_lr, base_batch, per_replica, replicas)
        if not _close(got, want):
            hint = _scale_hint(got, base_lr, base_batch, per_replica, k)
            feedback.fail(f"{what} returned {_num(got)}, expected {_num(want)}; {hint}. {FIX}")


FRACTIONS = [(0.1, 256, 48, "mirrored"), (0.3, 1000, 10, 7), (0.1, 48, 16, "one")]


def test_scaled_lr_keeps_fractions(probe):
    for base_lr, base_batch, per_replica, replicas in FRACTIONS:
        k = _count(replicas)
        want = base_lr * per_replica * k / base_batch
        what, got = _scaled(probe, base_lr, base_batch, per_replica, replicas)
        if not _close(got, want):
            hint = _scale_hint(got, base_lr, base_batch, per_replica, k)
            feedback.fail(f"{what} returned {_num(got)}, expected {_num(want)}; {hint}. {FIX}")


# (args, what is wrong with them): each case has one invalid argument.
INVALID = [
    ((0.0, 256, 32, "mirrored"), "base_lr = 0.0 is not positive"),
    ((-0.1, 256, 32, 4), "base_lr = -0.1 is not positive"),
    ((0.1, 0, 32, "mirrored"), "base_batch = 0 is below 1"),
    ((0.1, 256, 0, "mirrored"), "per_replica_batch = 0 is below 1"),
]


def test_scaled_lr_rejects_bad_input(probe):
    for args, wrong in INVALID:
        what = f"scaled_lr({args[0]}, {args[1]}, {args[2]}, {_describe(args[3])})"
        seen = _probe(probe, "scaled", *args, what=what)
        error = seen.get("error")
        if error and error["type"] == "ValueError":
            continue
        if error:
            _stand_in_error(what, error)
            _fail_error(what, error, f"Expected ValueError: {wrong}.")
        feedback.fail(f"{what} returned {_num(seen['value'])}; expected ValueError: {wrong} (raise ValueError when "
                      "base_lr <= 0 or a batch size is below 1).")
    # The smallest valid batches are accepted (their value is the other tests' business): only below 1 is an error.
    for args in [(0.3, 1, 1, "mirrored"), (0.1, 1, 1, "one")]:
        what = f"scaled_lr({args[0]}, {args[1]}, {args[2]}, {_describe(args[3])})"
        seen = _probe(probe, "scaled", *args, what=what)
        error = seen.get("error")
        if error and error["type"] == "ValueError":
            _fail_error(what, error, "These arguments are valid: a batch size of 1 is allowed, only a batch size "
                        "below 1 (0 or negative) is an error.")
        if error:
            _fail_error(what, error)


# ---------------------------------------------------------------------------------------------- WarmupSchedule


def _schedule(probe, target, k, steps):
    what = f"WarmupSchedule(target_lr={target}, warmup_steps={k})"
    seen = _probe(probe, "schedule_values", target, k, steps, what=what)
    if seen["error"]:
        _fail_error(what, seen["error"])
    if not seen["is_schedule"]:
        feedback.fail(
            f"{what} is not a keras.optimizers.schedules.LearningRateSchedule. Subclass it "
            "(class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule)) so that an optimizer accepts it "
            "as its learning_rate and calls it with the step number."
        )
    return what, seen


def _ramp_hint(got, target, k, steps):
    over = [(s, g) for g, s in zip(got, steps, strict=False) if g is not None and g > target * (1 + 1e-6) + 1e-9]
    if over:
        s, g = over[0]
        return (f"at step {s} the rate rose above target_lr, to {_num(g)}: the ramp must stop at target_lr from step "
                "warmup_steps - 1 on (switch to target_lr there, or cap the ramp with tf.minimum)")
    if all(_close(g, target * s / k if s < k else target) for g, s in zip(got, steps, strict=False)):
        return ("that is target_lr * step / warmup_steps: off by one. Keras calls the schedule with the number of "
                "steps already taken, so the first step gets step 0 and would train with learning rate 0; use "
                "(step + 1)")
    if all(_close(g, target * ((s + 1) // k) if s < k else target) for g, s in zip(got, steps, strict=False)):
        return ("the ramp was rounded down to whole multiples of target_lr: (step + 1) // warmup_steps is integer "
                "division; cast the step to float and divide with /")
    return "expected target_lr * (step + 1) / warmup_steps during the warm-up, then target_lr"


def test_warmup_ramps_linearly(probe):
    target, k = 0.4, 4
    steps = [0, 1, 2, 3, 4, 5, 1000]
    what, seen = _schedule(probe, target, k, steps)
    got = seen["eager"]
    if isinstance(got, dict):
        _schedule_error(f"{what}(tf.constant(step, tf.int64))", got)
        _fail_error(f"{what}(tf.constant(step, tf.int64))", got)
    want = [target * min(1.0, (s + 1) / k) for s in steps]
    if not all(_close(g, w) for g, w in zip(got, want, strict=False)):
        feedback.fail(f"{what} at steps {steps} gave {_nums(got)}, expected {_nums(want)}; "
                      + _ramp_hint(got, target, k, steps) + ".")


ZERO = "warmup_steps=0 means no warm-up: every step uses target_lr"
EDGES = [
    (0.2, 0, [0, 7], ZERO),
    (0.3, 1, [0, 1, 50], "with warmup_steps=1 the first step (step 0) already uses target_lr"),
    (1.0, 10, [8, 9, 10], "the last warm-up step, warmup_steps - 1 = 9, already reaches target_lr, and the rate stays "
                          "there"),
]


def test_warmup_edge_cases(probe):
    for target, k, steps, rule in EDGES:
        what = f"WarmupSchedule(target_lr={target}, warmup_steps={k})"
        seen = _probe(probe, "schedule_values", target, k, steps, what=what)
        error = seen["error"]  # raised while the schedule was built
        if error and k == 0 and error["type"] == "ZeroDivisionError":
            _fail_error(what, error, f"{ZERO}, so the constructor must not divide by warmup_steps. Compute the ramp "
                        "in __call__, and only when warmup_steps > 0 (a Python int, fine to test with `if`).")
        if error and k == 0 and error["type"] == "ValueError":
            _fail_error(what, error, f"{ZERO}; it is valid, only a negative warmup_steps is an error.")
        if error:
            _fail_error(what, error, f"{rule}." if k == 0 else "")
        what, seen = _schedule(probe, target, k, steps)
        got = seen["eager"]
        if isinstance(got, dict):
            _schedule_error(f"{what} at step {steps[0]}", got)
            divides = k == 0 and got["type"] == "ZeroDivisionError"
            hint = f"{ZERO}: do not divide by warmup_steps then." if divides else ""
            _fail_error(f"{what} at step {steps[0]}", got, hint)
        want = [target * min(1.0, (s + 1) / k) if k else target for s in steps]
        if not all(_close(g, w) for g, w in zip(got, want, strict=False)):
            over = [s for g, s in zip(got, steps, strict=False) if g is not None and g > target * (1 + 1e-6) + 1e-9]
            extra = (f" At step {over[0]} the rate rose above target_lr: the ramp must stop at target_lr from step "
                     "warmup_steps - 1 on.") if over and k else ""
            feedback.fail(f"{what} at steps {steps} gave {_nums(got)}, expected {_nums(want)}: {rule}.{extra}")
    what = "WarmupSchedule(target_lr=0.1, warmup_steps=-2)"
    seen = _probe(probe, "schedule_rejects", 0.1, -2, what=what)
    raised = seen["raised"]
    expect = "Expected ValueError when the schedule is built: a negative warm-up length is a mistake to report early."
    if raised and raised["type"] != "ValueError":
        _fail_error(what, raised, expect)
    if not raised:
        feedback.fail(f"{what} was accepted. {expect}")


def test_warmup_works_in_graph(probe):
    target, k = 0.4, 4
    steps = [0, 1, 3, 4, 9]
    what, seen = _schedule(probe, target, k, steps)
    got = seen["graph"]
    if isinstance(got, dict):
        called = (f"{what}, called inside a tf.function with the step counter (an int64 variable) as model.fit "
                  "calls it,")
        _schedule_error(called, got)
        _fail_error(called, got)
    want = [target * min(1.0, (s + 1) / k) for s in steps]
    if not all(_close(g, w) for g, w in zip(got, want, strict=False)):
        feedback.fail(
            f"{what} inside a tf.function at steps {steps} gave {_nums(got)}, expected {_nums(want)}; "
            + _ramp_hint(got, target, k, steps) + "."
        )


def test_schedule_serializes(probe):
    target, k = 0.3, 5
    what = f"WarmupSchedule(target_lr={target}, warmup_steps={k})"
    seen = _probe(probe, "schedule_round_trip", target, k, [0, 2, 4, 8], what=what)
    if seen["config_error"]:
        e = seen["config_error"]
        hint = ""
        if e["type"] == "NotImplementedError":
            hint = ("The base class has no config of its own: without get_config, Keras cannot save the optimizer "
                    "(model.save, optimizer.get_config() fail). Return the constructor's arguments, "
                    "{'target_lr': ..., 'warmup_steps': ...}.")
        _fail_error(f"{what}.get_config()", e, hint)
    if seen["rebuilt_error"]:
        e = seen["rebuilt_error"]
        hint = ("The inherited from_config calls WarmupSchedule(**config), so get_config's keys must be the "
                f"constructor's argument names, target_lr and warmup_steps (got {seen['config']}).")
        if not re.search(r"unexpected keyword argument|missing \d+ required|required positional", e["message"]):
            hint = f"The inherited from_config calls WarmupSchedule(**config), here with {seen['config']}."
        _fail_error(f"WarmupSchedule.from_config({what}.get_config())", e, hint)
    if seen.get("call_error"):
        called = f"the schedule rebuilt from {what}.get_config(), called with tf.constant(step, tf.int64),"
        _schedule_error(called, seen["call_error"])
        _fail_error(called, seen["call_error"])
    want = [target * min(1.0, (s + 1) / k) for s in (0, 2, 4, 8)]
    original = seen.get("original")
    faithful = original is not None and None not in original and all(_close(g, o) for g, o in zip(seen["rebuilt"], original, strict=False))
    # A rebuilt schedule that gives what the original gives is serialized right, even when the ramp itself is off
    # (the warm-up tests report that).
    if not faithful and not all(_close(g, w) for g, w in zip(seen["rebuilt"], want, strict=False)):
        feedback.fail(
            f"the schedule rebuilt from {what}.get_config() = {seen['config']} gives {_nums(seen['rebuilt'])} at steps "
            f"[0, 2, 4, 8], expected {_nums(want)}"
            + (f", and the original gives {_nums(original)} there" if original is not None else "")
            + ": get_config must hold everything the schedule needs."
        )
    if seen["optimizer_error"]:
        _fail_error(f"keras.optimizers.SGD(learning_rate={what}).get_config()", seen["optimizer_error"])


# ---------------------------------------------------------------------------------------------- make_optimizer


def _fit_hint(got, seen, base_lr, base_batch, per_replica, k, steps):
    """Name what the learning rates seen during fit show, where one cause (or a named set of candidates) gives them."""
    target = base_lr * per_replica * 2 / base_batch
    last = got[-1] if got else None
    if seen.get("rate") == "number":
        return (" The optimizer's learning rate is a fixed number, not a WarmupSchedule: pass "
                "WarmupSchedule(scaled_lr(...), warmup_steps) as its learning_rate.")
    if seen.get("rate") not in (None, "WarmupSchedule"):
        return (f" The optimizer's learning rate is a {seen['rate']}, not your WarmupSchedule: pass "
                "WarmupSchedule(scaled_lr(...), warmup_steps) as its learning_rate.")
    if _close(last, base_lr):
        return " It ends at base_lr: the optimizer's schedule must warm up to scaled_lr(...), not to the unscaled rate."
    per_replica_rate, sqrt_rate = base_lr * per_replica / base_batch, base_lr * math.sqrt(per_replica * 2 / base_batch)
    if _close(last, per_replica_rate) and _close(last, sqrt_rate):
        return (f" It ends at {_num(last)}, which here is both base_lr * per_replica_batch / base_batch and "
                "base_lr * sqrt(global_batch / base_batch). Candidates: scaling by the per-replica batch only, or "
                "square-root scaling; scale linearly with the global batch (see the scaled_lr tests).")
    if _close(last, per_replica_rate):
        return " It ends at the per-replica rate: scale with the global batch."
    if _close(last, sqrt_rate):
        return (" It ends at base_lr * sqrt(global_batch / base_batch): square-root scaling. The task asks for the "
                "linear rule, base_lr * global_batch / base_batch.")
    if _close(last, 2 * target):
        return (f" It ends at {_num(last)}, twice scaled_lr(...) = {_num(target)}: the replica count went in twice. "
                "Candidates: the global batch passed to scaled_lr as per_replica_batch (scaled_lr multiplies by "
                "num_replicas_in_sync itself), or scaled_lr's result multiplied by the replica count again.")
    if _close(last, base_lr * base_batch / (per_replica * 2)):
        return (" It ends at base_lr * base_batch / global_batch: the ratio is upside down (a bigger global batch must "
                "give a bigger rate).")
    if len(got) == steps and all(_close(g, target * min(1.0, (2 * s + 1) / k)) for s, g in enumerate(got)):
        return (" The warm-up ran twice as fast: the step counter advanced once per replica, which happens when the "
                "optimizer is created outside `with strategy.scope():`.")
    if _close(last, target) and None not in got:
        said = _ramp_hint(got, target, k, list(range(len(got))))
        return " " + said[:1].upper() + said[1:] + "."
    return ""


def test_fit_follows_schedule(probe):
    # base_lr, the per-replica rate (0.02) and the scaled rate (0.04) all differ, so the hints can tell them apart
    # (square-root scaling also gives 0.02 here: that hint names both candidates).
    base_lr, base_batch, per_replica, k, n = 0.01, 4, 8, 3, 96
    what = (f"make_optimizer(MirroredStrategy() with 2 replicas, base_lr={base_lr}, base_batch={base_batch}, "
            f"per_replica_batch={per_replica}, warmup_steps={k})")
    seen = _probe(probe, "fit_lrs", base_lr, base_batch, per_replica, k, n, what=what)
    error = seen["error"]
    if error and error["where"] == "make_optimizer":
        _fail_error(what, error)
    if not error and seen["iterations"] is None:
        kind = "None" if seen["optimizer"] in (None, "None", "NoneType") else f"a {seen['optimizer']}"
        feedback.fail(f"{what} returned {kind}; return the Keras optimizer it creates (keras.optimizers.SGD).")
    if not seen["is_sgd"]:
        feedback.fail(
            f"{what} returned keras.optimizers.{seen['optimizer']}; the task asks for keras.optimizers.SGD with "
            "momentum=0.9: the linear scaling rule it applies was made for SGD (with Adam, other rules such as "
            "square-root scaling are common)."
        )
    if seen["momentum"] is None or not _close(seen["momentum"], 0.9):
        feedback.fail(
            f"{what} returned SGD with momentum={_num(seen['momentum'])}; the task asks for momentum=0.9: "
            "keras.optimizers.SGD(learning_rate=WarmupSchedule(...), momentum=0.9)."
        )
    if error:
        _schedule_error(f"model.fit with the optimizer from {what}", error)
        hint = ""
        if "Mixing different" in error["message"] or "scope" in error["message"]:
            hint = ("An optimizer belongs to the strategy that was current when it was created: create it inside "
                    "`with strategy.scope():` of the strategy make_optimizer is given.")
        _fail_error(f"model.fit with the optimizer from {what}", error, hint)
    target = base_lr * per_replica * 2 / base_batch
    steps = n // (per_replica * 2)
    want = [target * min(1.0, (s + 1) / k) for s in range(steps)]
    got = seen["lrs"]
    ok = len(got) == steps and all(_close(g, w) for g, w in zip(got, want, strict=False))
    if not ok:
        feedback.fail(
            f"fitting one epoch ({steps} steps of the global batch {per_replica * 2}) with the optimizer from {what}, "
            f"the learning rate before each step was {_nums(got)}; expected {_nums(want)}: a warm-up to scaled_lr = "
            f"{target:g} over {k} steps." + _fit_hint(got, seen, base_lr, base_batch, per_replica, k, steps)
        )
    if seen["iterations"] != "MirroredVariable":
        feedback.fail(
            f"the optimizer's step counter is a {seen['iterations']}, not a MirroredVariable: the optimizer was "
            "created outside the strategy's scope. Create it inside `with strategy.scope():` so that its variables are "
            "mirrored like the model's; outside, with momentum or Adam, fit fails."
        )
    if seen["steps"] != steps or seen["loss"] is None or not math.isfinite(seen["loss"]):
        feedback.fail(
            f"after one epoch the optimizer took {seen['steps']} steps (expected {steps}) and the loss was "
            f"{_num(seen['loss'])}."
        )
