"""Hidden tests for scaled_lr, warmup_lr and set_lr."""

import math

import pytest


def _call(submission, name, *args):
    try:
        return getattr(submission, name)(*args)
    except Exception as exc:
        pytest.fail(f"{name}{args} raised {type(exc).__name__}: {exc}")


def _close(got, want):
    return isinstance(got, int | float) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15)


# (base_lr, base_batch, per_device_batch, world_size)
SCALED = [
    (0.1, 256, 32, 8),   # global 256 = base: unchanged
    (0.1, 256, 64, 8),   # global 512: twice
    (0.1, 256, 64, 2),   # global 128: half, although 2 GPUs
    (0.4, 32, 32, 1),    # one device at the base batch
    (0.1, 256, 256, 4),  # each GPU keeps the base batch: 4x
    (0.05, 100, 30, 5),  # global 150: 1.5x
]


def test_scaled_lr_follows_global_batch(submission):
    for base_lr, base_batch, per_device, world in SCALED:
        want = base_lr * per_device * world / base_batch
        got = _call(submission, "scaled_lr", base_lr, base_batch, per_device, world)
        if _close(got, want):
            continue
        if _close(got, base_lr * world):
            hint = (
                "that is base_lr * world_size: it ignores how the global batch compares with the base batch. "
                "Scale by global_batch / base_batch, where global_batch = per_device_batch * world_size"
            )
        elif _close(got, base_lr * per_device / base_batch):
            hint = (
                "that scales by the per-GPU batch only; the optimizer step averages over the global batch, "
                "per_device_batch * world_size"
            )
        else:
            hint = "expected base_lr * (per_device_batch * world_size) / base_batch"
        pytest.fail(
            f"scaled_lr(base_lr={base_lr}, base_batch={base_batch}, per_device_batch={per_device}, "
            f"world_size={world}) returned {got!r}, expected {want:.6g}; {hint}."
        )


def test_scaled_lr_keeps_fractions(submission):
    for args in [(0.1, 256, 48, 3), (0.1, 256, 64, 2), (0.3, 1000, 10, 7)]:
        want = args[0] * args[2] * args[3] / args[1]
        got = _call(submission, "scaled_lr", *args)
        if _close(got, want):
            continue
        floored = args[0] * (args[2] * args[3] // args[1])
        hint = (
            "a global batch smaller than the base batch, or not a multiple of it, gives a fractional factor: use "
            "true division `/`, not `//` (144 // 256 is 0)"
            if _close(got, floored)
            else "expected base_lr * (per_device_batch * world_size) / base_batch"
        )
        pytest.fail(f"scaled_lr{args} returned {got!r}, expected {want:.6g}; {hint}.")


def test_scaled_lr_rejects_bad_input(submission):
    for args in [(0.0, 256, 32, 8), (-0.1, 256, 32, 8), (0.1, 0, 32, 8), (0.1, 256, 0, 8), (0.1, 256, 32, 0)]:
        try:
            got = submission.scaled_lr(*args)
        except ValueError:
            continue
        except Exception as exc:
            pytest.fail(f"scaled_lr{args} raised {type(exc).__name__}: {exc}; expected ValueError.")
        pytest.fail(
            f"scaled_lr{args} returned {got!r}; expected ValueError: a learning rate must be positive and every "
            "batch size and the world size at least 1."
        )


def test_warmup_ramps_linearly(submission):
    target, k = 0.4, 4
    for step, want in [(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4), (4, 0.4), (5, 0.4), (1000, 0.4)]:
        got = _call(submission, "warmup_lr", step, target, k)
        if _close(got, want):
            continue
        if _close(got, target * step / k):
            hint = (
                "that is target_lr * step / warmup_steps: off by one, step 0 would train with learning rate 0 and "
                "the ramp reaches target_lr one step late. Use (step + 1) / warmup_steps"
            )
        elif step >= k:
            hint = "after the warm-up (step >= warmup_steps) the learning rate stays at target_lr"
        else:
            hint = "expected target_lr * (step + 1) / warmup_steps during the warm-up"
        pytest.fail(f"warmup_lr(step={step}, target_lr={target}, warmup_steps={k}) returned {got!r}, expected {want}; {hint}.")


def test_warmup_edge_cases(submission):
    for args, want in [((0, 0.2, 0), 0.2), ((7, 0.2, 0), 0.2), ((0, 0.3, 1), 0.3), ((9, 1.0, 10), 1.0)]:
        got = _call(submission, "warmup_lr", *args)
        assert _close(got, want), (
            f"warmup_lr{args} returned {got!r}, expected {want}. warmup_steps=0 means no warm-up (always "
            "target_lr); the last warm-up step, warmup_steps - 1, already reaches target_lr."
        )
    for args in [(-1, 0.1, 4), (0, 0.1, -2)]:
        try:
            got = submission.warmup_lr(*args)
        except ValueError:
            continue
        except Exception as exc:
            pytest.fail(f"warmup_lr{args} raised {type(exc).__name__}: {exc}; expected ValueError.")
        pytest.fail(f"warmup_lr{args} returned {got!r}; expected ValueError for a negative step or warmup_steps.")


def test_set_lr_every_param_group(probe):
    try:
        seen = probe("set_lr_groups", 0.25)
    except Exception as exc:
        pytest.fail(f"set_lr(optimizer, 0.25) on an SGD optimizer with two parameter groups raised {type(exc).__name__}: {exc}")
    lrs, after = seen["lrs"], seen["after_step"]
    assert lrs == [0.25, 0.25], (
        f"after set_lr(optimizer, 0.25) the two parameter groups have lr {lrs}; expected [0.25, 0.25]. The "
        "learning rate lives in each dict of optimizer.param_groups (group['lr']), and optimizers can have several "
        "groups: set every one. Setting an attribute like optimizer.lr changes nothing the optimizer reads."
    )
    assert all(math.isclose(v, 0.75, rel_tol=1e-6) for v in after), (
        f"after set_lr(optimizer, 0.25) and one SGD step with gradient 1, the parameters are {after}; expected "
        "[0.75, 0.75] (1 - 0.25)."
    )
    assert seen["returned"] == "NoneType", f"set_lr returned a {seen['returned']}; it changes the optimizer in place and returns None."


def test_my_run_schedule(submission, params):
    base_lr, base_batch = params["base_lr"], params["base_batch"]
    per_device, world, warmup = params["per_device_batch"], params["world_size"], params["warmup_steps"]
    global_batch = per_device * world
    target = base_lr * global_batch / base_batch
    run = (
        f"your run (the numbers in your prompt; other learners have others): base_lr {base_lr} tuned for a batch of "
        f"{base_batch}, {world} GPUs x {per_device} samples = a global batch of {global_batch}, so the target is "
        f"{base_lr} * {global_batch} / {base_batch} = {target:.6g}, reached by a warm-up over {warmup} steps"
    )
    for step in (0, warmup // 2, warmup - 1, warmup, 10 * warmup):
        want = target * min(step + 1, warmup) / warmup
        got = _call(submission, "my_lr", step)
        if _close(got, want):
            continue
        if step < warmup and _close(got, target):
            hint = " It already returns the target: the warm-up is missing (warmup_lr with warmup_steps)."
        elif step >= warmup and _close(got, base_lr):
            hint = " After the warm-up it returns base_lr itself: scale it with scaled_lr first."
        else:
            hint = ""
        pytest.fail(f"my_lr({step}) returned {got!r}, expected {want:.6g}; {run}.{hint}")
