"""Hidden tests for train(rank, world_size) in bfloat16 mixed precision: two real ranks, real DDP over gloo.

The ranks run once per grading job (the first test that needs them), with probes observing every autocast region,
Linear forward, backward, GradScaler, collective of the learner's own and optimizer step; each test then reads the
same results. The final weights are compared with a one-process simulation of the right training (probes.simulate),
computed here; the classic mistakes are simulated too, so a mismatch is named by the mistake whose weights it
reproduces, or by what the probes saw.
"""

import pytest
import torch
from probes import BATCH, EPOCHS, N_SAMPLES, PARAMS, build_model, simulate
from runner import feedback

WORLD = 2
TIMEOUT_S = 40.0
STEPS = EPOCHS * (N_SAMPLES // WORLD // BATCH)  # 8 batches of 32 per rank and epoch
FP32_BYTES = PARAMS * 4
TOLERANCE = 1e-6
_cache: dict = {}
_OP_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor"}


def _ranks(probe):
    if "runs" not in _cache:
        try:
            _cache["runs"] = probe("run", world_size=WORLD, timeout_s=TIMEOUT_S)
        except Exception as exc:
            _cache["runs"] = exc
    runs = _cache["runs"]
    if isinstance(runs, Exception):
        feedback.fail(feedback.raised(f"running train on {WORLD} ranks", type(runs).__name__, str(runs)))
    return runs


def _own(seen) -> tuple[int, int, str]:
    """Return the calls, bytes and a description of the collectives a rank called outside a backward pass."""
    own = (seen or {}).get("own") or {}
    calls = sum(v["calls"] for v in own.values())
    nbytes = sum(v["bytes"] for v in own.values())
    text = ", ".join(f"{_OP_NAMES.get(op, op)} x{v['calls']}" for op, v in sorted(own.items()))
    return calls, nbytes, text


def _broken_collective(error) -> bool:
    """Whether a rank's error is a collective that broke (another rank stopped or sent something else)."""
    known = feedback.classify(str(error.get("type", "")), str(error.get("message", "")))
    return bool(known) and known[0].id.startswith("collective.")


def _stopped_notes(runs) -> list[str]:
    """What the probes saw in ranks that did not finish, where it points at the cause."""
    notes = []
    for r in runs:
        seen = r.get("seen") or {}
        if seen.get("scaled_steps") and (r["error"] or r["timed_out"]):
            notes.append(
                f"Observed on rank {r['rank']}: optimizer.step() ran on gradients that a GradScaler had scaled "
                "(scaler.scale(loss).backward()) and not unscaled: the step was optimizer.step(), called directly "
                "instead of through scaler.step(optimizer). (bfloat16 needs no scaler: dropping it is right too.)"
            )
            break
    if runs and all(not r["error"] or _broken_collective(r["error"]) for r in runs) and any(
        r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs
    ):
        own = {r["rank"]: _own(r.get("seen")) for r in runs}
        if len({calls for calls, _, _ in own.values()}) > 1:
            counts = "; ".join(
                f"rank {rank}: {text} ({calls} call{'s' if calls != 1 else ''})" if calls else f"rank {rank}: none"
                for rank, (calls, _, text) in sorted(own.items())
            )
            notes.append(
                "Collectives of your own (outside DDP's gradient sync in backward) that each rank had called when it "
                f"stopped: {counts}. A collective that only some ranks call has no partner: it waits forever, or is "
                "paired with a different collective of the other ranks (DDP's gradient sync, say) and breaks the "
                "run. Call it on every rank (an all_reduce of the loss for logging, say), the same number of times, "
                "and print on rank 0 only."
            )
    return notes


def _ok_ranks(probe):
    runs = _ranks(probe)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs):
        got = feedback.ranks(runs, what="train", timeout_s=TIMEOUT_S)
        said = [feedback.explain(r["error"]["type"], r["error"]["message"]) for r in runs if r["error"]]
        if len(said) == len(runs) and len({e.message for e in said}) == 1 and said[0].cause:
            # Every rank failed the same known way: say it once.
            text = said[0].message
            got = feedback.Explained(f"train failed on every rank: {text[:1].lower()}{text[1:]}", got.details)
        feedback.fail(feedback.Explained(" ".join([got.message, *_stopped_notes(runs)]), got.details))
    if any(not r.get("seen") for r in runs):
        pytest.fail("the ranks finished but reported no observations: run them through the probe, unchanged")
    return runs


def _split(counter: dict) -> list[list]:
    return [[*key.split("|"), n] for key, n in counter.items()]


def _weights(r) -> dict[str, torch.Tensor]:
    state = r["state"]
    want = {k: list(v.shape) for k, v in build_model().state_dict().items()}
    got = {k: v["shape"] for k, v in state.items()}
    if got != want:
        pytest.fail(
            f"rank {r['rank']} returned keys and shapes {got}; expected the unwrapped model's state_dict {want}. "
            "Return model.module.state_dict(), not the DistributedDataParallel wrapper's."
        )
    return {k: torch.tensor(v["data"], dtype=torch.float32).reshape(v["shape"]) for k, v in state.items()}


def _gap(a, b) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _finite(weights) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in weights.values())


def _autocast_regions(seen: dict) -> str:
    regions = [
        f'torch.autocast("{d}", dtype={t}){"" if on == "True" else " (disabled)"}'
        for d, t, on, _ in _split(seen["autocast"])
    ]
    return ", ".join(regions) or "none"


def test_every_rank_finishes(probe):
    _ok_ranks(probe)


def test_forward_runs_under_bf16_autocast(probe):
    runs = _ok_ranks(probe)
    for r in runs:
        seen = r["seen"]
        calls = _split(seen["linear"])
        total = sum(n for *_, n in calls)
        if total == 0:
            pytest.fail(
                f"rank {r['rank']} ran no forward pass of the model's Linear layers with autograd on: train "
                "build_model() as the starter does."
            )
        outside = sum(n for on, _, _, _, n in calls if on != "True")
        half = sum(n for on, dtype, _, _, n in calls if on == "True" and dtype != "torch.bfloat16")
        if not outside and not half:
            continue
        entered = _autocast_regions(seen)
        regions = _split(seen["autocast"])
        if any(d == "cuda" for d, *_ in regions):
            why = (
                'You entered torch.autocast("cuda", ...): on a machine without CUDA it warns ("CUDA is not '
                'available ... Disabling autocast") and does nothing, so the model ran in float32. On CPU ranks the '
                'device type is "cpu": torch.autocast("cpu", dtype=torch.bfloat16). (A GradScaler("cuda") disables '
                "itself the same way.)"
            )
        elif half:
            why = (
                "CPU autocast was on, but with another dtype than bfloat16. The task asks for bfloat16, which keeps "
                'float32\'s range and needs no loss scaling: torch.autocast("cpu", dtype=torch.bfloat16).'
            )
        elif not regions:
            why = (
                "No autocast region was entered at all, so every matmul ran in float32. Run the forward pass and the "
                'loss inside `with torch.autocast("cpu", dtype=torch.bfloat16):`.'
            )
        elif all(on != "True" for _, _, on, _ in regions):
            why = (
                "Every autocast region you entered was disabled (enabled=False), so the model ran in float32: "
                'enter torch.autocast("cpu", dtype=torch.bfloat16) enabled.'
            )
        elif outside == total:
            why = (
                "An autocast region was entered, but none of these forwards ran inside it: the model's call, "
                "model(x), happened outside the `with` block. Call the model inside the block, together with the "
                "loss, not before it."
            )
        else:
            why = "Run every training forward pass (and the loss) inside the autocast region, not only some of them."
        bf16_weights = any(w == "torch.bfloat16" for *_, w, _ in calls)
        extra = (
            " (Your Linear layers hold bfloat16 weights: casting the model is not autocast, see the master weights "
            "test.)"
            if bf16_weights
            else ""
        )
        pytest.fail(
            f"rank {r['rank']}: {outside + half} of {total} training forwards of the model's Linear layers ran "
            f"without bfloat16 autocast on the CPU (autocast regions entered: {entered}). {why}{extra}"
        )


def test_master_weights_stay_float32(probe, measure):
    runs = _ok_ranks(probe)
    r = runs[0]
    seen = r["seen"]
    lost = seen["unchanged"] / max(1, seen["updates"])
    measure.record(
        "parameter updates rounded away (rank 0)", round(100 * lost, 2), unit="%", target=0, compare="<="
    )
    comm = r.get("comm") or {}
    steps = comm.get("per_step") or []
    if steps:
        # Shown, not graded: gradients have their parameter's dtype, so autocast leaves DDP's traffic at float32's
        # FP32_BYTES per step (a model cast to bfloat16 halves it, at the cost the master-weights test names).
        # DDP's sync runs inside backward; collectives of the learner's own are shown apart, below.
        measure.record(
            "gradient bytes DDP all-reduced per step (rank 0)",
            sum(s["backward_bytes"] for s in steps) / len(steps),
            unit="B",
        )
    if comm:
        own = comm.get("ops_outside_backward") or {}
        measure.record(
            "collectives of your own, outside backward (rank 0, whole run)",
            sum(v["calls"] for v in own.values()),
            unit="calls",
        )
        measure.record(
            "bytes of your own collectives (rank 0, whole run)", sum(v["bytes"] for v in own.values()), unit="B"
        )
    if not seen["steps"]:
        pytest.fail("rank 0 never called optimizer.step(): train with the optimizer the starter builds.")
    low = {d: n for d, n in seen["param_dtypes"].items() if d != "torch.float32"}
    if low:
        dtypes = ", ".join(sorted(low))
        pytest.fail(
            f"rank 0's parameters were {dtypes} when the optimizer stepped, not float32: the model was cast as a "
            "whole (model.to(torch.bfloat16) or .bfloat16()), so SGD updated low-precision weights. bfloat16 keeps "
            "8 significant bits: an update smaller than half the spacing between neighbouring values at the "
            f"weight's size is rounded away, and {seen['unchanged']} of rank 0's {seen['updates']} updates "
            f"({100 * lost:.0f}%) left their weight unchanged. Keep the model float32 (the master weights) and let "
            "autocast run the matmuls in bfloat16."
        )
    state_low = sorted({d for d in (seen.get("state_dtypes") or {}).values() if d != "torch.float32"})
    if state_low:
        pytest.fail(
            f"rank 0 trained float32 parameters but returned a state_dict holding {', '.join(state_low)} tensors: "
            "return the float32 model's model.module.state_dict() unchanged."
        )


def test_loss_is_float32(probe):
    runs = _ok_ranks(probe)
    for r in runs:
        seen = r["seen"]
        if not seen["backward"]:
            pytest.fail(f"rank {r['rank']} never called backward(): train the model as the starter asks.")
        low = {d: n for d, n in seen["backward"].items() if d in ("torch.bfloat16", "torch.float16")}
        if low:
            pytest.fail(
                f"rank {r['rank']} called backward on a {', '.join(sorted(low))} loss ({sum(low.values())} of "
                f"{sum(seen['backward'].values())} times): the loss was computed in low precision. F.cross_entropy "
                "is on CPU autocast's float32 list, but only inside the region: called outside it on bfloat16 "
                "logits, it computes in bfloat16 (and so does a loss written by hand from ops autocast leaves in "
                "bfloat16, even inside). Compute the loss inside the autocast block, or call .float() on the "
                "logits first."
            )


def _how_far(got, want) -> str:
    if not _finite(got):
        return "rank 0's final weights are not finite (they hold inf or NaN)"
    return f"rank 0's final weights are up to {_gap(got, want):.2g} away from the bfloat16 mixed-precision reference"


def _diagnosis(runs, got, want) -> str | None:
    """Name the cause of a mismatch where the probes or a simulated mistake isolate it; None when nothing does."""
    seen = [r["seen"] for r in runs]
    far = _how_far(got, want)
    first = seen[0]
    if first.get("scaled_steps"):
        scale = f" (scale {first['scale']:g})" if first.get("scale") else ""
        became = ", and the weights became non-finite" if not _finite(got) else ""
        return (
            f"{far}. Observed: at {first['scaled_steps']} of rank 0's {first['steps']} optimizer steps the loss had "
            f"gone through scaler.scale(loss){scale} and the GradScaler had not unscaled the gradients: "
            "optimizer.step() was called directly instead of scaler.step(optimizer), so each update used gradients "
            f"still multiplied by the scale{became}. Step through scaler.step(optimizer) (it unscales the gradients "
            "and skips a step whose gradients hold inf or NaN), then scaler.update(); or drop the scaler: bfloat16 "
            "needs no loss scaling."
        )
    if first["steps"] and first.get("wiped_steps"):
        initial = {k: v.float() for k, v in build_model().state_dict().items()}
        still = " are still build_model()'s initial weights:" if _finite(got) and _gap(got, initial) == 0 else ":"
        return (
            f"rank 0's final weights{still} at {first['wiped_steps']} of its {first['steps']} optimizer.step() calls, "
            "zero_grad() had run after loss.backward() and before the step, clearing the gradients the backward had "
            "just computed, so SGD had nothing to apply. zero_grad() belongs before the forward pass (or after the "
            "step): zero_grad, forward and loss, loss.backward(), optimizer.step()."
        )
    if first["steps"] and first.get("empty_steps") == first["steps"]:
        initial = {k: v.float() for k, v in build_model().state_dict().items()}
        still = " are still build_model()'s initial weights:" if _finite(got) and _gap(got, initial) == 0 else ":"
        return (
            f"rank 0's final weights{still} at every one of its {first['steps']} optimizer.step() calls no parameter "
            "had a gradient (every .grad was None), so SGD had nothing to apply. The gradients had been cleared by "
            "zero_grad() and not yet computed: each step is zero_grad(), forward and loss, loss.backward(), then "
            "optimizer.step()."
        )
    counts = [s["steps"] for s in seen]
    if any(n != STEPS for n in counts):
        told = ", ".join(f"rank {r['rank']}: {n}" for r, n in zip(runs, counts, strict=True))
        never = [r["rank"] for r, n in zip(runs, counts, strict=True) if n == 0]
        why = (
            f"rank {never[0]} never stepped, so it kept its initial weights and computed its next gradients on them, "
            "which DDP averaged into the other rank's. Every rank calls optimizer.step() (only printing belongs on "
            "rank 0 alone)"
            if never
            else f"every rank makes one step per batch: {STEPS} ({EPOCHS} epochs of {N_SAMPLES // WORLD // BATCH} "
            "batches)"
        )
        return f"{far}. The ranks called optimizer.step() a different number of times ({told}): {why}."
    comm = runs[0].get("comm") or {}
    if comm and comm.get("samples") == 0:
        alone = _gap(got, simulate("right", local=True)) <= TOLERANCE if _finite(got) else False
        return (
            f"{far}"
            + (", and they are exactly those of rank 0 training on its own batches alone" if alone else "")
            + ". Observed: no batch went through the DistributedDataParallel wrapper's forward on rank 0, so DDP "
            "never synchronised the gradients. Call the wrapper, model(x), not model.module(x) or the model you "
            "wrapped."
        )
    if not _finite(got):
        return None
    own_calls, own_bytes, _ = _own(first)
    per_step_grads = own_bytes == STEPS * FP32_BYTES and set(first.get("own") or {}) == {"allreduce"}
    scaled = [
        (
            2.0,
            "every gradient twice as large as DDP's average",
            (
                f"Observed: after backward, rank 0 called all_reduce {own_calls} times of its own, {own_bytes} bytes "
                f"over the run: all the gradients ({FP32_BYTES} bytes) once per step, besides DDP's sync inside "
                "backward. DDP has already averaged the gradients over the ranks; summing them again over 2 ranks "
                "doubles them. Drop that all_reduce"
            )
            if per_step_grads
            else "The candidates: gradients summed over the ranks again after DDP averaged them (an all_reduce of "
            "your own, op SUM), or a loss multiplied by the world size. DDP already averages the gradients",
        ),
        (
            0.5,
            f"every gradient divided by {WORLD}, the world size",
            "The usual cause: the loss (or the gradients) divided by world_size. DDP already averages the gradients "
            "over the ranks, so nothing needs dividing",
        ),
        (
            float(BATCH),
            f"every gradient {BATCH} times larger ({BATCH} is the batch size)",
            f"The loss was summed over the batch instead of averaged (F.cross_entropy(..., reduction=\"sum\"), or a "
            f"loss multiplied by {BATCH}): use cross_entropy's default mean",
        ),
    ]
    for factor, what, why in scaled:
        if _gap(got, simulate("right", grad_scale=factor)) <= TOLERANCE:
            return f"{far}: they are exactly those of the right training with {what}. {why}."
    modes = [
        (
            "fp32",
            "they are exactly those of plain float32 training: no bfloat16 autocast took effect. Run the forward "
            'pass and the loss inside torch.autocast("cpu", dtype=torch.bfloat16)',
        ),
        (
            "fp16",
            "they are exactly those of training under CPU autocast with float16 instead of bfloat16. Use "
            'torch.autocast("cpu", dtype=torch.bfloat16)',
        ),
        (
            "loss_bf16",
            "they are exactly those of training with the loss computed outside autocast on the bfloat16 logits, "
            "in bfloat16. Compute the loss inside the autocast block (cross_entropy then runs in float32)",
        ),
        (
            "cast",
            "they are exactly those of training a model cast to bfloat16 as a whole, whose small updates are "
            "rounded away. Keep the parameters float32 and let autocast do the casting",
        ),
    ]
    for mode, why in modes:
        if _gap(got, simulate(mode)) <= TOLERANCE:
            return f"{far}: {why}."
    return None


def test_weights_match_bf16_reference(probe):
    runs = _ok_ranks(probe)
    got = _weights(runs[0])
    want = simulate("right")
    if _finite(got) and _gap(got, want) <= TOLERANCE:
        return
    named = _diagnosis(runs, got, want)
    if named:
        pytest.fail(named)
    notes = []
    other = _weights(runs[1])
    if _finite(got) and _finite(other) and _gap(got, other) > TOLERANCE:
        notes.append(f" Rank 1's final weights also differ from rank 0's (up to {_gap(got, other):.2g}).")
    own_calls, _, own_text = _own(runs[0]["seen"])
    if own_calls:
        notes.append(
            f" Besides DDP's gradient sync, rank 0 ran collectives of its own ({own_text}): they are allowed (a "
            "logged loss, say) as long as they change neither the gradients nor the weights."
        )
    tolerance = "" if not _finite(got) else f" (tolerance {TOLERANCE:g})"
    pytest.fail(
        f"{_how_far(got, want)}{tolerance}. Train as the prompt says: DistributedDataParallel(build_model()), "
        f"SGD(lr=LR), the batches of loader(rank, world_size) in order for {EPOCHS} epochs, zero_grad, the forward "
        'pass and F.cross_entropy inside torch.autocast("cpu", dtype=torch.bfloat16), backward, step.'
        + "".join(notes)
    )
