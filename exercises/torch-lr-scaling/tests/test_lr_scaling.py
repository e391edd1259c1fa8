"""Hidden tests for scaled_lr, warmup_lr, set_lr and my_lr. They run in the judge: the learner's functions are
called through the submission proxy, set_lr through the probe set_lr_groups (a real torch SGD optimizer).

What the tests observe, so that a message names a cause only where an observation isolates it:
- scaled_lr and warmup_lr: their values over several inputs. A known mistake is named only when it gives every
  value observed in the test (and the right formula does not);
- set_lr: each group's lr afterwards, the keys that appeared in the groups and the attributes that appeared on the
  optimizer, optimizer.defaults["lr"], what set_lr returned, and one SGD step;
- my_lr: its values at five steps, and what the learner's own scaled_lr and warmup_lr give for the run's numbers.
An exception the learner's code raised is worded by runner.feedback, its own text kept as details.
"""

import math
from typing import NoReturn

from runner import feedback
from runner.wire import Opaque, TensorData

SCALE_RULE = "lr = base_lr * (per_device_batch * world_size) / base_batch"
ASSERT_HINT = (
    "An assert raises AssertionError (and is skipped entirely under python -O): check with `if` and raise ValueError."
)


# ---------------------------------------------------------------------------------------------- words


def _is_num(value):
    return isinstance(value, int | float) and not isinstance(value, bool)


def _close(got, want):
    return _is_num(got) and _is_num(want) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15)


def _all_close(got, want):
    return all(_close(g, w) for g, w in zip(got, want, strict=True))


def _precision_hint(got, want):
    """Name a loss of precision that gives every value observed: rounding to whole decimals, or float32 arithmetic.
    "" when neither fits (or the values are right)."""
    if not all(_is_num(g) for g in got) or _all_close(got, want):
        return ""
    for digits in range(11):
        if _all_close(got, [round(w, digits) for w in want]):
            return (
                f"every value equals the right one rounded to {digits} decimals: return the value unrounded (the "
                "tests allow for floating-point rounding, so a value like 0.20000000000000004 is fine)"
            )
    if all(math.isclose(g, w, rel_tol=1e-6) for g, w in zip(got, want, strict=True)):
        return (
            "every value agrees with the right one to about 7 significant digits but no further, the precision "
            "of float32 (likely candidate: the arithmetic ran on float32 torch tensors, torch's default dtype): "
            "compute with Python floats, which are float64"
        )
    return ""


def _kind(value):
    """What a non-number is, for people (never its repr: it may hold an address)."""
    if value is None:
        return "None"
    if isinstance(value, bool | str):
        return repr(value)[:40]
    if isinstance(value, TensorData):
        return f"a {value.framework} tensor"
    if isinstance(value, Opaque):
        return f"a {value.type_name}"
    return f"a {type(value).__name__}"


def _num(value, other=None):
    """A number rounded for people: 6 significant digits, more only where 6 would hide a difference from other."""
    if not _is_num(value):
        return _kind(value)
    for digits in (6, 9, 12, 17):
        text = f"{value:.{digits}g}"
        if not _is_num(other) or _close(value, other) or text != f"{other:.{digits}g}":
            return text
    return repr(value)


def _nums(values, others=None):
    others = others if others is not None else [None] * len(values)
    return "[" + ", ".join(_num(v, o) for v, o in zip(values, others, strict=False)) + "]"


def _call_text(name, args):
    return f"{name}({', '.join(repr(a) for a in args)})"


def _fail_raised(what: str, exc: Exception, hint: str = "") -> NoReturn:
    """Fail with what the learner's code raised (worded by runner.feedback, its own text as details) and a hint."""
    type_name = getattr(exc, "type_name", type(exc).__name__)
    message = str(exc.args[0]) if exc.args else ""
    told = feedback.raised(what, type_name, message)
    line = getattr(exc, "line", None)
    text = told.message[:-1] if told.message.endswith(".") else told.message
    text += f" (your code, line {line})." if line else "."
    feedback.fail(text + (f" {hint}" if hint else ""), details=told.details)


def _type_name(exc):
    return getattr(exc, "type_name", type(exc).__name__)


def _number(submission, name, args, valid=""):
    """Call name(*args) in the learner's code and return its number; fail with feedback when it raises or returns
    something else. `valid` is said when it raised ValueError for valid arguments."""
    what = _call_text(name, args)
    try:
        got = getattr(submission, name)(*args)
    except Exception as exc:  # the learner's exception, told as feedback
        _fail_raised(what, exc, valid if _type_name(exc) == "ValueError" else "")
    if not _is_num(got):
        tensor = " (a tensor's .item() gives one)" if isinstance(got, TensorData) else ""
        feedback.fail(f"{what} returned {_kind(got)}; return the learning rate as a Python float{tensor}.")
    return got


def _must_raise(submission, name, args, wrong, rule):
    """Fail unless name(*args) raises ValueError; `wrong` says which argument is invalid, `rule` the contract."""
    what = _call_text(name, args)
    try:
        got = getattr(submission, name)(*args)
    except Exception as exc:
        if _type_name(exc) == "ValueError":
            return
        if _type_name(exc) == "AssertionError":
            _fail_raised(what, exc, f"Expected ValueError: {wrong}. {ASSERT_HINT}")
        _fail_raised(
            what,
            exc,
            f"Expected ValueError: {wrong}; check the arguments and raise ValueError before computing anything.",
        )
    feedback.fail(f"{what} returned {_num(got)}; expected ValueError: {wrong}. {rule}")


# ---------------------------------------------------------------------------------------------- scaled_lr

# Known mistakes: (formula, what it is). Named only when it gives every value a test observed.
SCALE_MISTAKES = [
    (
        lambda lr, bb, pd, w: lr * w,
        "that is base_lr * world_size: it ignores how the per-GPU batch compares with the base batch",
    ),
    (
        lambda lr, bb, pd, w: lr * pd / bb,
        "that scales by the per-GPU batch only; the optimizer step averages over the global batch, "
        "per_device_batch * world_size",
    ),
    (
        lambda lr, bb, pd, w: lr * (pd * w // bb),
        "that is base_lr times global_batch / base_batch rounded down to a whole number: the factor can be "
        "fractional, so use true division `/`, not `//` (144 // 256 is 0)",
    ),
    (
        lambda lr, bb, pd, w: lr * bb / (pd * w),
        "that is base_lr * base_batch / global_batch: the ratio is upside down (a bigger global batch must give a "
        "bigger learning rate)",
    ),
    (
        lambda lr, bb, pd, w: lr * math.sqrt(pd * w / bb),
        "that is base_lr * sqrt(global_batch / base_batch), the square-root rule; this task asks for the linear rule",
    ),
]
VALID = "These arguments are valid: base_lr is positive and every batch size and the world size at least 1."


def _scale_want(base_lr, base_batch, per_device, world):
    return base_lr * per_device * world / base_batch


def _check_scaled(submission, cases):
    """Call scaled_lr on every case; fail at the first wrong value, naming a known mistake that gives all of them."""
    got = [_number(submission, "scaled_lr", case, VALID) for case in cases]
    wants = [_scale_want(*case) for case in cases]
    wrong = [i for i, (g, w) in enumerate(zip(got, wants, strict=True)) if not _close(g, w)]
    if not wrong:
        return
    i = wrong[0]
    named = [
        hint
        for formula, hint in SCALE_MISTAKES
        if not _close(formula(*cases[i]), wants[i]) and _all_close(got, [formula(*c) for c in cases])
    ]
    if len(named) == 1:
        hint = named[0]
    elif named:
        hint = "every value fits each of these mistakes: " + "; or ".join(named)
    else:
        hint = _precision_hint(got, wants) or f"expected {SCALE_RULE}"
    base_lr, base_batch, per_device, world = cases[i]
    feedback.fail(
        f"scaled_lr(base_lr={base_lr}, base_batch={base_batch}, per_device_batch={per_device}, world_size={world}) "
        f"returned {_num(got[i], wants[i])}, expected {_num(wants[i], got[i])} (global batch {per_device * world}); "
        f"{hint}."
    )


# (base_lr, base_batch, per_device_batch, world_size)
SCALED = [
    (0.1, 256, 32, 8),  # global 256 = base: unchanged
    (0.1, 256, 64, 8),  # global 512: twice
    (0.1, 256, 64, 2),  # global 128: half, although 2 GPUs
    (0.4, 32, 32, 1),  # one device at the base batch
    (0.1, 256, 256, 4),  # each GPU keeps the base batch: 4x
    (0.05, 100, 30, 5),  # global 150: 1.5x
]


def test_scaled_lr_follows_global_batch(submission):
    _check_scaled(submission, SCALED)


def test_scaled_lr_keeps_fractions(submission):
    _check_scaled(submission, [(0.1, 256, 48, 3), (0.1, 256, 64, 2), (0.3, 1000, 10, 7)])


# (args, what is wrong with them): each case has one invalid argument.
INVALID = [
    ((0.0, 256, 32, 8), "base_lr = 0.0 is not positive"),
    ((-0.1, 256, 32, 8), "base_lr = -0.1 is not positive"),
    ((0.1, 0, 32, 8), "base_batch = 0 is below 1"),
    ((0.1, -256, 32, 8), "base_batch = -256 is below 1"),
    ((0.1, 256, 0, 8), "per_device_batch = 0 is below 1"),
    ((0.1, 256, 32, 0), "world_size = 0 is below 1"),
    ((0.1, 256, 32, -2), "world_size = -2 is below 1"),
]
SCALE_CONTRACT = "Raise ValueError when base_lr <= 0 or base_batch, per_device_batch or world_size is below 1."


def test_scaled_lr_rejects_bad_input(submission):
    for args, wrong in INVALID:
        _must_raise(submission, "scaled_lr", args, wrong, SCALE_CONTRACT)
    # The smallest valid sizes are accepted: only a size below 1 is an error.
    smallest = (
        "These arguments are valid: a batch size or world size of 1 is allowed, only a size below 1 (0 or "
        "negative) is an error."
    )
    for args in [(0.3, 1, 1, 1), (0.2, 1, 4, 2)]:
        got = _number(submission, "scaled_lr", args, smallest)
        want = _scale_want(*args)
        if not _close(got, want):
            feedback.fail(
                f"{_call_text('scaled_lr', args)} returned {_num(got, want)}, expected {_num(want, got)}; "
                f"expected {SCALE_RULE}."
            )


# ---------------------------------------------------------------------------------------------- warmup_lr


def _warm(step, target, k):
    """The contract's warm-up, for every k >= 0."""
    return target if step >= k else target * (step + 1) / k


def _ramp_hint(got, steps, target, k):
    """Name what the values of warmup_lr(step, target, k) show, where one cause gives them all."""
    at_k = [g for g, s in zip(got, steps, strict=True) if s == k]
    if at_k and _close(at_k[0], target * (k + 1) / k):
        return (
            f"at step {k} = warmup_steps it returned target_lr * ({k} + 1) / {k} = {_num(at_k[0])}, above "
            "target_lr: the ramp was still used at step warmup_steps (for example `step <= warmup_steps` where "
            "`step < warmup_steps` belongs). The warm-up covers steps 0 ... warmup_steps - 1; from step "
            "warmup_steps on, return target_lr"
        )
    if all(_close(g, target * min(s, k) / k) for g, s in zip(got, steps, strict=True)):
        return (
            "that is target_lr * step / warmup_steps: off by one, step 0 would train with learning rate 0 and "
            "the ramp reaches target_lr one step late. Use (step + 1) / warmup_steps"
        )
    if all(_close(g, target * ((s + 1) // k) if s < k else target) for g, s in zip(got, steps, strict=True)):
        return (
            "that is the ramp rounded down to whole multiples of target_lr: (step + 1) // warmup_steps is "
            "integer division; use /"
        )
    over = [(s, g) for g, s in zip(got, steps, strict=True) if g > target * (1 + 1e-9)]
    if over:
        return (
            f"at step {over[0][0]} it rose above target_lr, to {_num(over[0][1])}: the learning rate never "
            "exceeds target_lr, and from step warmup_steps on it is target_lr"
        )
    if all(_close(g, target * min(s + 1, k + 1) / (k + 1)) for g, s in zip(got, steps, strict=True)):
        return (
            f"that is target_lr * (step + 1) / (warmup_steps + 1): the ramp divides by warmup_steps + 1, so step "
            f"warmup_steps - 1 = {k - 1} gets {_num(target * k / (k + 1))} instead of target_lr and the rate jumps "
            "at step warmup_steps. Divide by warmup_steps itself: the + 1 on the 0-based step already makes step "
            "warmup_steps - 1 reach target_lr"
        )
    if all(_close(g, _warm(s, target, k)) for g, s in zip(got, steps, strict=True) if s < k):
        return "after the warm-up (step >= warmup_steps) the learning rate stays at target_lr"
    return (
        _precision_hint(got, [_warm(s, target, k) for s in steps])
        or "expected target_lr * (step + 1) / warmup_steps during the warm-up, then target_lr"
    )


def test_warmup_ramps_linearly(submission):
    target, k = 0.4, 4
    steps = [0, 1, 2, 3, 4, 5, 1000]
    got = [_number(submission, "warmup_lr", (s, target, k), "These arguments are valid.") for s in steps]
    want = [_warm(s, target, k) for s in steps]
    if all(_close(g, w) for g, w in zip(got, want, strict=True)):
        return
    feedback.fail(
        f"warmup_lr(step, target_lr={target}, warmup_steps={k}) at steps {steps} gave {_nums(got, want)}, expected "
        f"{_nums(want, got)}; {_ramp_hint(got, steps, target, k)}."
    )


NO_WARMUP = "warmup_steps=0 means no warm-up: every step uses target_lr"
EDGES = [
    (0.2, 0, [0, 7], NO_WARMUP),
    (0.3, 1, [0, 1, 50], "with warmup_steps=1 the first step (step 0) already uses target_lr"),
    (
        1.0,
        10,
        [8, 9, 10],
        "the last warm-up step, warmup_steps - 1 = 9, already reaches target_lr, and the rate stays there",
    ),
]


def test_warmup_edge_cases(submission):
    for target, k, steps, rule in EDGES:
        got = []
        for s in steps:
            what = _call_text("warmup_lr", (s, target, k))
            try:
                got.append(submission.warmup_lr(s, target, k))
            except Exception as exc:
                name = _type_name(exc)
                if k == 0 and name == "ZeroDivisionError":
                    _fail_raised(what, exc, f"{NO_WARMUP}, so return it without dividing by warmup_steps.")
                if k == 0 and name == "ValueError":
                    _fail_raised(what, exc, f"{NO_WARMUP}; it is valid, only a negative warmup_steps is an error.")
                _fail_raised(what, exc, "These arguments are valid." if name == "ValueError" else "")
            if not _is_num(got[-1]):
                feedback.fail(f"{what} returned {_kind(got[-1])}; return the learning rate as a Python float.")
        want = [_warm(s, target, k) for s in steps]
        if not all(_close(g, w) for g, w in zip(got, want, strict=True)):
            feedback.fail(
                f"warmup_lr(step, target_lr={target}, warmup_steps={k}) at steps {steps} gave "
                f"{_nums(got, want)}, expected {_nums(want, got)}: {rule}."
            )
    contract = "Raise ValueError for a negative step or a negative warmup_steps."
    for args, wrong in [((-1, 0.1, 4), "step = -1 is negative"), ((0, 0.1, -2), "warmup_steps = -2 is negative")]:
        _must_raise(submission, "warmup_lr", args, wrong, contract)


# ---------------------------------------------------------------------------------------------- set_lr

OLD = [0.1, 0.01]  # the probe's two groups, before set_lr
PUT = "Write group['lr'] = lr into every dict of optimizer.param_groups itself."


def _unchanged_hint(seen):
    """Why no group changed, from what set_lr did change."""
    if "lr" in seen["new_attributes"]:
        return (
            "set_lr set an attribute optimizer.lr, which the optimizer never reads: it reads the lr of each "
            f"parameter group. {PUT}"
        )
    if _is_num(seen["defaults_lr"]) and not _close(seen["defaults_lr"], OLD[0]):
        return (
            "set_lr changed optimizer.defaults['lr'], which only fills in groups added later; the existing "
            f"groups keep their own lr. {PUT}"
        )
    return (
        "Candidates: the new lr was written to copies of the groups (optimizer.state_dict() returns copies; "
        "`group = {**group, 'lr': lr}` in a loop builds a new dict and leaves the group alone), or not written "
        f"at all. {PUT}"
    )


def test_set_lr_every_param_group(probe):
    lr = 0.25
    what = f"set_lr(optimizer, {lr}) on an SGD optimizer with two parameter groups (lr {OLD[0]} and {OLD[1]})"
    try:
        seen = probe("set_lr_groups", lr)
    except Exception as exc:  # the learner's exception, told as feedback
        hint = ""
        if _type_name(exc) == "TypeError" and "'list' object is not callable" in str(exc):
            hint = (
                "A list was called like a function: optimizer.param_groups is a list, not a method like "
                "model.parameters(), so write it without parentheses."
            )
        _fail_raised(what, exc, hint)
    lrs = seen["lrs"]
    if not (len(lrs) == 2 and all(_close(v, lr) for v in lrs)):
        if len(lrs) != 2:
            hint = (
                f"set_lr left {len(lrs)} groups in optimizer.param_groups; it changes the lr of the groups that "
                "are there and adds or removes none."
            )
        elif not all(_is_num(v) for v in lrs):
            kinds = " and ".join(_num(v) if _is_num(v) else f"a {v}" for v in lrs)
            hint = f"the groups' lr values are {kinds}; store the number lr itself in each group."
        elif _close(lrs[0], lr) and _close(lrs[1], OLD[1]):
            hint = (
                "only the first group (optimizer.param_groups[0]) got the new lr; the second kept its own. "
                "Optimizers can have several groups: set every one."
            )
        elif all(_close(v, o) for v, o in zip(lrs, OLD, strict=True)):
            hint = "neither group's lr changed. " + _unchanged_hint(seen)
        elif all(_close(v, o * lr) for v, o in zip(lrs, OLD, strict=True)):
            scheduler = (
                " The key 'initial_lr' appeared in the groups: a torch.optim.lr_scheduler was created on the "
                "optimizer, and a LambdaLR's lambda returns a factor that multiplies each group's initial lr, not a "
                "learning rate."
                if "initial_lr" in seen["new_keys"]
                else " Candidates: group['lr'] *= lr, or a scheduler whose factor is lr."
            )
            hint = f"each group's old lr was multiplied by {lr} instead of replaced by it.{scheduler} {PUT}"
        else:
            hint = (
                "The learning rate lives in each dict of optimizer.param_groups (group['lr']), and optimizers can "
                "have several groups: set every one."
            )
        shown = "[" + ", ".join(_num(v) if _is_num(v) else f"a {v}" for v in lrs) + "]"
        feedback.fail(f"after {what}, the groups have lr {shown}; expected [{lr}, {lr}]: {hint}")
    if seen["step_error"]:
        error = seen["step_error"]
        told = feedback.raised(f"optimizer.step() after {what}", error["type"], error["message"])
        feedback.fail(told.message + " set_lr should change only each group's lr.", details=told.details)
    after = seen["after_step"]
    want = [1 - lr, 1 - lr]
    if not all(math.isclose(v, w, rel_tol=1e-6) for v, w in zip(after, want, strict=True)):
        changed = [k for k in seen["new_keys"] if k != "lr"]
        also = f" Keys that appeared in the groups: {', '.join(changed)}." if changed else ""
        feedback.fail(
            f"after {what}, both groups report lr {lr}, but one SGD step with gradient 1 moved the parameters from "
            f"1.0 to {_nums(after)}, expected {_nums(want)} (1 - {lr}): set_lr should change only each group's lr, "
            f"nothing else the step reads.{also}"
        )
    if seen["returned_optimizer"]:
        feedback.fail(
            f"set_lr returned the optimizer ({seen['returned']}); it changes the optimizer's groups in place "
            "and returns None, as its signature says (-> None)."
        )
    if seen["returned"] != "NoneType":
        feedback.fail(f"set_lr returned a {seen['returned']}; it changes the optimizer in place and returns None.")


# ---------------------------------------------------------------------------------------------- my_lr


def _optional(submission, name, args):
    """What the learner's own function gives for args (an observation for the hint: None when it fails)."""
    try:
        got = getattr(submission, name)(*args)
    except Exception:  # only a hint: without it, the message just says less
        return None
    return got if _is_num(got) else None


def _my_lr_hint(submission, got, steps, params, target):
    """Name what my_lr's values show: the learner's own scaled_lr/warmup_lr they follow, or the schedule they fit."""
    base_lr, base_batch = params["base_lr"], params["base_batch"]
    per_device, world, warmup = params["per_device_batch"], params["world_size"], params["warmup_steps"]
    scale_args = (base_lr, base_batch, per_device, world)
    own = _optional(submission, "scaled_lr", scale_args)
    if own is not None:
        own_warm = [_optional(submission, "warmup_lr", (s, own, warmup)) for s in steps]
        if None not in own_warm and _all_close(got, own_warm):
            parts = []
            if not _close(own, target):
                parts.append(f"your scaled_lr{scale_args} returns {_num(own, target)}, expected {_num(target, own)}")
            if not _all_close(own_warm, [_warm(s, own, warmup) for s in steps]):
                parts.append(f"your warmup_lr(step, {_num(own)}, {warmup}) does not follow the warm-up rule")
            if parts:
                return (
                    " These are the values of your own warmup_lr(step, scaled_lr(...), warmup_steps) for your "
                    f"run's numbers, and {' and '.join(parts)}: fix that (its own test says how), and my_lr "
                    "follows."
                )
    final = got[-1]  # step 10 * warmup_steps: after the warm-up
    if _all_close(got, [target] * len(got)):
        also = (
            ", or a ramp that starts at base_lr, which equals the target in your run" if _close(base_lr, target) else ""
        )
        return (
            f" It returns the target from step 0 on: there is no warm-up (candidates: warmup_lr not applied, or a "
            f"warm-up length of 0 or 1 instead of your run's {warmup} steps{also})."
        )
    if _all_close(got, [_warm(s + 1, target, warmup) for s in steps]):
        return (
            " Every value is the one of the step after it: my_lr(step) returns what step + 1 should get (for "
            "example warmup_lr(step + 1, ...)). step is already 0-based, and the warm-up's (step + 1) is in "
            "warmup_lr itself: pass step unchanged."
        )
    if not _close(base_lr, target) and _all_close(got, [base_lr + _warm(s, target - base_lr, warmup) for s in steps]):
        return (
            f" The values are a ramp that starts at base_lr ({base_lr}) and ends at the target: base_lr + (target - "
            "base_lr) * (step + 1) / warmup_steps. This task's warm-up starts from the target alone, "
            f"target_lr * (step + 1) / warmup_steps, so step 0 gets {_num(target / warmup)}: use "
            "warmup_lr(step, target, warmup_steps)."
        )
    alone = base_lr * per_device / base_batch  # the target of a global batch of one GPU's samples
    if not _close(alone, target) and _all_close(got, [_warm(s, alone, warmup) for s in steps]):
        return (
            f" The warm-up has the right shape but reaches {_num(alone, target)}, the target for a global batch of "
            f"{per_device} (one GPU's samples, as if world_size were 1); your run trains on {world} GPUs. "
            "Candidates: the world size taken from the running process (the tests run one process without a "
            "process group) instead of your prompt's number, or the global batch left out. my_lr describes the "
            "run in your prompt."
        )
    twice = target * world  # the target of a global batch counted with the GPUs twice
    if world > 1 and _all_close(got, [_warm(s, twice, warmup) for s in steps]):
        return (
            f" The warm-up has the right shape but reaches {_num(twice, target)}, {world} times the target: the "
            f"target of a global batch of {per_device * world * world}, as if the GPUs were counted twice (likely "
            f"candidate: the global batch {per_device * world} passed as per_device_batch, which scaled_lr multiplies "
            f"by world_size again). per_device_batch is one GPU's batch, {per_device} in your run."
        )
    if _close(final, target) and target / 1e6 < got[0] <= target:
        length = round(target / got[0])
        if length >= 1 and length != warmup and _all_close(got, [_warm(s, target, length) for s in steps]):
            return (
                f" The values fit a warm-up over {length} steps to the right target; your run warms up over "
                f"{warmup} steps (the number in your prompt)."
            )
    if _close(final, base_lr) and not _close(base_lr, target):
        return " After the warm-up it returns base_lr itself: scale it with scaled_lr first."
    if _is_num(final) and final > 0 and _all_close(got, [_warm(s, final, warmup) for s in steps]):
        return (
            f" The warm-up has the right shape but reaches {_num(final, target)} instead of {_num(target, final)}: "
            "the target must be scaled_lr with your run's numbers, in the order scaled_lr(base_lr, base_batch, "
            "per_device_batch, world_size)."
        )
    precision = _precision_hint(got, [_warm(s, target, warmup) for s in steps])
    return f" Looking at the values: {precision}." if precision else ""


def test_my_run_schedule(submission, params):
    base_lr, base_batch = params["base_lr"], params["base_batch"]
    per_device, world, warmup = params["per_device_batch"], params["world_size"], params["warmup_steps"]
    global_batch = per_device * world
    target = _scale_want(base_lr, base_batch, per_device, world)
    steps = [0, warmup // 2, warmup - 1, warmup, 10 * warmup]
    got = [_number(submission, "my_lr", (s,), "Every step here is valid (0-based, not negative).") for s in steps]
    want = [_warm(s, target, warmup) for s in steps]
    if _all_close(got, want):
        return
    run = (
        f"your run (the numbers in your prompt; other learners have others): base_lr {base_lr} tuned for a batch of "
        f"{base_batch}, {world} GPUs x {per_device} samples = a global batch of {global_batch}, so the target is "
        f"{base_lr} * {global_batch} / {base_batch} = {_num(target)}, reached by a warm-up over {warmup} steps"
    )
    feedback.fail(
        f"my_lr at steps {steps} gave {_nums(got, want)}, expected {_nums(want, got)}; {run}."
        + _my_lr_hint(submission, got, steps, params, target)
    )
