"""Visible example: runs your train() on 2 ranks (real processes, FSDP2 over gloo) and prints what was measured.
The hidden tests check more: the bytes each rank holds, the optimizer's parameters, the all-gathers, the state dict
rank 0 returns and the accuracy it reaches."""


def test_example_two_ranks_shard(probe):
    runs = probe("run", world_size=2, timeout_s=90.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
    for r in runs:
        print(f"rank {r['rank']} at its last step:", r["observed"]["params"][-1])
        print(f"rank {r['rank']} returned:", {k: v["shape"] for k, v in r["state"].items()})
    calls = runs[0]["comm"]["calls"]
    print("rank 0's collectives before its first step (op, bytes):", [c[1:] for c in calls if c[0] == 0])
    assert runs[0]["comm"]["steps"] == 48, f"rank 0 made {runs[0]['comm']['steps']} optimizer steps; expected 48"
