"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what was measured.
The hidden tests check more: the accuracy, the targets for bytes and buckets, the views, and train_two_heads()."""


def test_example_two_ranks_communicate(probe):
    runs = probe("run", world_size=2, timeout_s=40.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
    comm = runs[0]["comm"]
    steps = comm["per_step"]
    print("optimizer steps:", comm["steps"])
    print("all-reduces per step (first 4):", [s["calls"] for s in steps[:4]])
    print("bytes per step (first 4):", [s["bytes"] for s in steps[:4]])
    print("bytes by dtype over the run:", comm["dtypes"])
    print("your wrapper:", runs[0]["observed"]["wrappers"])
    assert comm["steps"] == 64, f"rank 0 made {comm['steps']} optimizer steps; expected 64 (8 epochs of 8 batches)"
