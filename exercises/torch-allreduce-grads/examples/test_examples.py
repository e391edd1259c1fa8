"""Visible example: runs your code on 2 real rank processes (gloo on the CPU) and checks the basics.
The hidden tests check more: exact averages, identical replicas, a match with one process on the global batch."""

from probes import PREFIX


def test_example_average_gradients(probe):
    runs = probe("run_average", world_size=2, timeout_s=40.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
    # rank 0 starts with 0, 1, 2, ... and rank 1 with 0, 2, 4, ... in the first weight: the average is 0, 1.5, 3, ...
    first = runs[0]["state"]["0.weight"]["data"][:3]
    assert first == [0.0, 1.5, 3.0], f"rank 0's averaged first gradient starts {first}, expected [0.0, 1.5, 3.0]"


def test_example_train_runs(probe):
    runs = probe("run_train", world_size=2, timeout_s=40.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
        keys = sorted(k for k in r["state"] if not k.startswith(PREFIX))
        assert keys == ["0.bias", "0.weight", "2.bias", "2.weight"], f"rank {r['rank']} returned keys {keys}"
