"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what was observed.
The hidden tests check more: every forward under bfloat16 autocast, float32 master weights, a float32 loss, and the
final weights against a simulation of the same mixed-precision steps."""

import json


def test_example_two_ranks_train_in_bf16(probe):
    runs = probe("run", world_size=2, timeout_s=40.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
    seen = json.loads(bytes(runs[0]["state"]["__probe__.seen"]["data"]).decode())
    print("autocast regions entered (device|dtype|enabled: count):", seen["autocast"])
    print("Linear forwards (autocast on|its dtype|output dtype|weight dtype: count):", seen["linear"])
    print("dtypes of the losses backward started from:", seen["backward"])
    print("parameter dtypes at the optimizer steps:", seen["param_dtypes"])
    assert seen["steps"] == 24, f"rank 0 made {seen['steps']} optimizer steps; expected 24 (3 epochs of 8 batches)"
