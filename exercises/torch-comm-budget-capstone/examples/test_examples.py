"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what was measured.
The hidden tests check more: the accuracy target, the byte budget, and that both ranks end with the same weights."""

EPOCHS, BUDGET = 8, 2_179_088


def test_example_two_ranks_communicate(probe):
    runs = probe("run", world_size=2, timeout_s=40.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
    comm = runs[0]["comm"]
    total = sum(s["bytes"] for s in comm["per_step"]) + comm["tail"]["bytes"]
    print("optimizer steps:", comm["steps"])
    print("collectives per step (first 4):", [s["calls"] for s in comm["per_step"][:4]])
    print("bytes per step (first 4):", [s["bytes"] for s in comm["per_step"][:4]])
    print("bytes by dtype over the run:", comm["dtypes"])
    print(f"bytes per epoch: {total / EPOCHS:,.0f} (budget {BUDGET:,})")
    assert comm["samples"] == 2048, f"rank 0 trained on {comm['samples']} samples; expected 2048 (8 epochs of 256)"
