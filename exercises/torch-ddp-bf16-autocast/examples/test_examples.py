"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what was observed.
The hidden tests check more: every forward under bfloat16 autocast, float32 master weights, a float32 loss, and the
final weights against a simulation of the same mixed-precision steps."""

from runner import feedback


def test_example_two_ranks_train_in_bf16(probe):
    runs = probe("run", world_size=2, timeout_s=40.0)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs):
        feedback.fail(feedback.ranks(runs, what="train", timeout_s=40.0))
    seen = runs[0]["seen"]
    print("autocast regions entered (device|dtype|enabled: count):", seen["autocast"])
    print("Linear forwards (autocast on|its dtype|output dtype|weight dtype: count):", seen["linear"])
    print("dtypes of the losses backward started from:", seen["backward"])
    print("parameter dtypes at the optimizer steps:", seen["param_dtypes"])
    print("collectives of your own, outside backward (op: calls and bytes):", seen["own"])
    assert seen["steps"] == 24, f"rank 0 made {seen['steps']} optimizer steps; expected 24 (3 epochs of 8 batches)"
