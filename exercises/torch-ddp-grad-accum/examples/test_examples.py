"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what was measured.
The hidden tests check more: the steps, the weights against the large batch, and the communication targets."""

import math

from runner import feedback


def test_example_two_ranks_accumulate(probe, params):
    runs = probe("run", world_size=2, timeout_s=40.0)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs):
        feedback.fail(feedback.ranks(runs, what="train", timeout_s=40.0))
    comm = runs[0]["comm"]
    steps = comm["per_step"]
    print("optimizer steps:", comm["steps"])
    print("collective calls per step:", [s["calls"] for s in steps])
    print("  of them DDP's gradient all-reduces:", [s["backward_calls"] for s in steps])
    print("bytes per step:", [s["bytes"] for s in steps])
    print("collectives of your own, outside backward (whole run):", comm["ops_outside_backward"] or "none")
    micro, accum = params["micro"], params["accum"]  # your prompt's MICRO and ACCUM
    micros = 44 // micro
    want = 2 * math.ceil(micros / accum)
    assert comm["steps"] == want, (
        f"rank 0 made {comm['steps']} optimizer steps; expected {want}: with MICRO = {micro} and ACCUM = {accum}, "
        f"each epoch's {micros} micro-batches make {want // 2} windows (the last one shorter), one step each"
    )
