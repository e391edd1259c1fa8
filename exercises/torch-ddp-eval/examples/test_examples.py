"""Visible example: runs your evaluate() on 2 ranks (real processes over gloo) and prints what each rank returned.
The hidden tests check more: each rank's share, the exact counts and accuracy, and that the ranks agree."""


def test_example_two_ranks_report_the_same_total(probe):
    runs = probe("run", world_size=2, timeout_s=40.0)
    for r in runs:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
        got = {k: v["data"][0] for k, v in r["state"].items() if not k.startswith("__probe__.")}
        print(f"rank {r['rank']} returned {got} after evaluating {r['state']['__probe__.rows']['data'][0]} samples")
    totals = [r["state"].get("total", {}).get("data", [None])[0] for r in runs]
    assert totals == [101, 101], f"the ranks returned totals {totals}; the validation set has 101 samples"
