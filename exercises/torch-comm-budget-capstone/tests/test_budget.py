"""Hidden tests for the communication-budget capstone: two real ranks, real DDP over gloo, measured.

train() runs once per grading job (the first test that needs it) with runner.vdev.comm recording every collective;
each test then reads the same results. The accuracy is computed here from rank 0's returned weights; the bytes per
epoch are every collective's payload over the run (the steps and the tail after the last one) divided by EPOCHS, a
measured outcome with partial credit, shown beside its target with a modelled epoch time labelled as a model.

Figures (exercises/FACTS.md P46): build_model() has 136,193 parameters, 544,772 bytes of float32 gradients. A
rank's 256 samples per epoch make 16 micro-batches of MICRO = 16; plain DDP all-reduces them all as float32 after
each one: 16 * 544,772 = 8,716,352 bytes per epoch, four times BUDGET (2,179,088: windows of two micro-batches
with bfloat16 on the wire, or windows of four in float32).
"""

import statistics

import pytest
import torch
from probes import BUDGET, EPOCHS, MICRO, N_TRAIN, N_VAL, W_PER_KW, build_model, make_dataset
from runner import costmodel

WORLD = 2
PARAMS = 16 * 256 + 256 + 2 * (256 * 256 + 256) + 256 + 1  # 136,193
MICRO_PER_EPOCH = N_TRAIN // WORLD // MICRO  # 16
SAMPLES = EPOCHS * N_TRAIN // WORLD  # 2,048 samples per rank through DDP's forward
PLAIN_BYTES = MICRO_PER_EPOCH * 4 * PARAMS  # 8,716,352: plain DDP, float32 after every micro-batch
TARGET_ACCURACY = 0.90
TOLERANCE_W = 300.0
FP16_MAX = 65_504.0
ITEMSIZE = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int16": 2}
_cache: dict = {}


def _ranks(probe):
    """Return both ranks' results of train; it runs once, at the first test that asks."""
    if not _cache:
        try:
            _cache["runs"] = probe("run", world_size=WORLD, timeout_s=40.0)
        except Exception as exc:
            _cache["runs"] = exc
    runs = _cache["runs"]
    if isinstance(runs, Exception):
        pytest.fail(f"running train on {WORLD} ranks failed before any rank reported: {type(runs).__name__}: {runs}")
    return runs


def _describe(r):
    if r["timed_out"]:
        return (
            f"rank {r['rank']} did not finish within 40 s (the reference needs about a second): a rank waits forever "
            "in a collective the other rank never joins (a hook must all-reduce every bucket it is given, on every "
            "rank; both ranks must step at the same micro-batches), or the grading machine was overloaded (then "
            "submit again)"
        )
    if r["error"]:
        e = r["error"]
        return f"rank {r['rank']} raised {e['type']}: {e['message'][:600]}"
    return f"rank {r['rank']} exited without returning a result (exit code {r['exit_code']})"


def _ok_ranks(probe):
    runs = _ranks(probe)
    bad = [r for r in runs if r["timed_out"] or r["error"] or r["destroyed"] is None]
    if bad:
        text = "; ".join(_describe(r) for r in bad)
        if any("BF16 all reduce communication hook required" in (r["error"] or {}).get("message", "") for r in bad):
            text += (
                ". DDP refuses to register torch's own bf16_compress_hook and bf16_compress_wrapper without CUDA "
                "and NCCL: it checks the hook's name, although gloo all-reduces bfloat16 tensors. Write a bfloat16 "
                "hook yourself (compress bucket.buffer(), all-reduce, copy the result back), under a name of your own"
            )
        pytest.fail(text)
    if any(not r["comm"] for r in runs):
        pytest.fail("the ranks finished but reported no measurements: run them through the probe, unchanged")
    return runs


def _weights(r):
    state = r["state"]
    want = {k: list(v.shape) for k, v in build_model().state_dict().items()}
    got = {k: v["shape"] for k, v in state.items()}
    if got != want:
        pytest.fail(
            f"rank {r['rank']} returned keys and shapes {got}; expected the unwrapped model's state_dict {want}. "
            "Return model.module.state_dict(), not the DistributedDataParallel wrapper's."
        )
    odd = {k: v["dtype"] for k, v in state.items() if v["dtype"] != "float32"}
    if odd:
        pytest.fail(f"rank {r['rank']} returned weights of dtype {odd}; the model trains in float32: keep it so.")
    return {
        k: torch.frombuffer(bytearray(v["bytes"]), dtype=torch.float32).reshape(v["shape"]).clone()
        for k, v in state.items()
    }


def _total_bytes(comm):
    return sum(s["bytes"] for s in comm["per_step"]) + comm["tail"]["bytes"]


def _syncs(comm):
    """Return how many times over the run the payload would carry every gradient once (by the dtypes sent)."""
    elements = sum(n / ITEMSIZE.get(dtype, 4) for dtype, n in comm.get("dtypes", {}).items())
    return elements / PARAMS


def test_every_rank_finishes(probe, measure):
    runs = _ok_ranks(probe)
    for r in runs:
        samples = r["comm"]["samples"]
        if samples != SAMPLES:
            pytest.fail(
                f"rank {r['rank']} sent {samples:,} samples through DistributedDataParallel's forward; expected "
                f"{SAMPLES:,} ({EPOCHS} epochs of the {N_TRAIN // WORLD} samples micro_batches() gives each rank). "
                "Train every micro-batch of every epoch through the wrapper (model(xb), not model.module(xb)), and "
                "keep EPOCHS and MICRO as the starter has them: the budget is per epoch of the same data."
            )
    steps = runs[0]["comm"]["steps"]
    measure.record("optimizer steps (rank 0)", steps, unit="steps")
    if steps == 0:
        pytest.fail("rank 0 never called optimizer.step(): accumulated gradients must be stepped on.")


def test_accuracy_target(probe, measure):
    runs = _ok_ranks(probe)
    weights = _weights(runs[0])
    model = build_model()
    model.load_state_dict(weights)
    x, y = make_dataset()
    with torch.no_grad():
        predicted_w = model(x[N_TRAIN:]) * W_PER_KW
    accuracy = float(((predicted_w - y[N_TRAIN:]).abs() <= TOLERANCE_W).float().mean())
    finite = all(bool(torch.isfinite(w).all()) for w in weights.values())
    comm = runs[0]["comm"]
    dtypes = comm.get("dtypes", {})
    steps = comm["steps"]
    per_epoch = steps / EPOCHS
    if not finite:
        why = (
            "rank 0's final weights hold nan or inf. This loss is in watts squared, and its gradients reach about "
            "1e6 at the first step"
        )
        if "float16" in dtypes:
            why += (
                f". Your all-reduces carried float16, whose largest value is {FP16_MAX:,.0f}: larger gradients "
                "become inf, and Adam turns inf into nan in every weight it touches. bfloat16 has float32's range "
                "(up to about 3.4e38) in the same 2 bytes: compress to torch.bfloat16 instead"
            )
        else:
            why += (
                f"; your collectives carried {', '.join(sorted(dtypes)) or 'nothing'}. A hook must hand DDP finite "
                "averages: compress to torch.bfloat16, which keeps float32's range, and divide by the world size"
            )
    else:
        why = (
            f"rank 0's weights predict {accuracy:.1%} of the {N_VAL} validation samples within {TOLERANCE_W:.0f} W; "
            f"the target is {TARGET_ACCURACY:.0%}. You made {steps} optimizer steps, {per_epoch:g} per epoch "
            f"(the {MICRO_PER_EPOCH} micro-batches of an epoch in windows of about {MICRO_PER_EPOCH / per_epoch:.3g})"
            if per_epoch
            else f"rank 0's weights predict {accuracy:.1%} of the validation samples; the target is "
            f"{TARGET_ACCURACY:.0%}, and rank 0 made no optimizer step"
        )
        if 0 < per_epoch <= MICRO_PER_EPOCH / 4:
            why += (
                ". The likely cause is too much accumulation: each window makes one Adam step, and with LR and "
                f"{EPOCHS} epochs as given, windows of 4 micro-batches (32 steps) reach about 82% here and windows "
                "of 8 about 59%, whatever the bytes. Accumulate fewer micro-batches (windows of 2 or 3 reach 95 to "
                "97%) and save the rest of the bytes by compressing what is sent (a bfloat16 hook halves them)"
            )
        elif per_epoch:
            why += (
                ". The reference reaches about 97% with windows of 2 and bfloat16. Keep make_dataset(), "
                "build_model(), LR and EPOCHS as given, divide each micro-batch's loss by its window's length, step "
                "once per window, and let a hook hand DDP the average of the ranks' gradients (their sum divided "
                "by the world size once)"
            )
    measure.grade(
        "validation accuracy (rank 0's weights, within 300 W)",
        round(accuracy, 4),
        target=TARGET_ACCURACY,
        compare=">=",
        zero_at=0.5,
        message=why + ".",
    )


def test_replicas_identical(probe):
    runs = _ok_ranks(probe)
    a, b = _weights(runs[0]), _weights(runs[1])
    apart = {k: ~torch.isclose(a[k], b[k], rtol=0, atol=1e-6, equal_nan=True) for k in a}
    gap = max(float((a[k] - b[k])[apart[k]].abs().max()) if apart[k].any() else 0.0 for k in a)
    if any(m.any() for m in apart.values()):
        pytest.fail(
            f"rank 0 and rank 1 ended with weights up to {gap:.3g} apart: each rank stepped on gradients that were "
            "not the same average. A comm hook must all-reduce the bucket it is given and hand DDP the result "
            "(divided by the world size) on every rank; returning the local bucket, or a compressed copy of it "
            "that never went through dist.all_reduce, skips the averaging."
        )


def test_bytes_per_epoch(probe, measure):
    runs = _ok_ranks(probe)
    comm = runs[0]["comm"]
    steps = comm["per_step"]
    silent = [i + 1 for i, s in enumerate(steps) if s["calls"] == 0]
    if silent or not steps:
        pytest.fail(
            f"rank 0 made optimizer steps with no collective before them (steps {silent[:5]}), so the gradients "
            "were not averaged over the ranks and there is no communication to grade. A comm hook must all-reduce "
            "the bucket it is given (dist.all_reduce(..., async_op=True)) and return a future of the result."
        )
    per_epoch = _total_bytes(comm) / EPOCHS
    calls = (sum(s["calls"] for s in steps) + comm["tail"]["calls"]) / EPOCHS
    compute = statistics.median(s["compute_s"] for s in steps[1:] or steps) * len(steps) / EPOCHS
    links = ", ".join(link.describe() for link in costmodel.LINKS)
    basis = (
        f"compute measured on CPU rank 0 ({compute * 1e3:.1f} ms per epoch, from the median step) plus a ring "
        f"all-reduce of the measured {per_epoch:,.0f} bytes in {calls:.1f} calls per epoch over a stated link "
        f"({links}); not a GPU timing"
    )
    for link in costmodel.LINKS:
        measure.record(
            f"epoch time on 2 ranks, {link.name}",
            costmodel.step_s(compute, per_epoch, calls, WORLD, link) * 1e3,
            unit="ms",
            modelled=True,
            basis=basis,
        )
    dtypes = comm.get("dtypes", {})
    opt_steps = comm["steps"]
    windows = comm["samples"] / MICRO / opt_steps if opt_steps else 0
    syncs = _syncs(comm) / opt_steps if opt_steps else 0
    seen = ", ".join(f"{k} {v:,} B" for k, v in dtypes.items()) or "none"
    if windows > 1.2 and abs(syncs - windows) <= 0.25:
        why = (
            f"rank 0 sent {per_epoch:,.0f} bytes per epoch ({seen} over the run). Each optimizer step took "
            f"{windows:.3g} micro-batches, and all the gradients went out {syncs:.3g} times per step: once per "
            "backward. Accumulating saves nothing unless every backward of a window but its last runs inside "
            "model.no_sync() (the forward too: DDP decides at the forward whether that backward syncs)"
        )
    elif set(dtypes) == {"float32"} and windows <= 1.2 and syncs > 0.75:
        why = (
            f"rank 0 sent {per_epoch:,.0f} bytes per epoch, all of them float32, after every micro-batch: plain "
            f"DDP, {per_epoch / BUDGET:.2g} times the budget. The bucket cap only changes how the same bytes are "
            "split into calls. Send less often (accumulate micro-batches under model.no_sync(), one all-reduce per "
            "window) and send fewer bytes each time (a hook that all-reduces bfloat16, 2 bytes per gradient): "
            "windows of 2 with bfloat16 meet the budget"
        )
    else:
        why = (
            f"rank 0 sent {per_epoch:,.0f} bytes per epoch ({seen} over the run; every collective counts, yours "
            f"too) in {opt_steps} optimizer steps. The budget is {BUDGET:,}: all {PARAMS:,} gradients once per "
            "window of 2 micro-batches as bfloat16 (8 times per epoch, 2 bytes each) fit exactly"
        )
    measure.grade(
        "bytes communicated per epoch (rank 0)",
        round(per_epoch, 1),
        unit="B",
        target=BUDGET,
        compare="<=",
        zero_at=PLAIN_BYTES,
        message=why + ".",
        chart={
            "kind": "bar",
            "x_label": "optimizer step (the first 64)",
            "y_label": "bytes",
            "series": [{"label": "rank 0", "points": [[i + 1, s["bytes"]] for i, s in enumerate(steps[:64])]}],
        },
    )
