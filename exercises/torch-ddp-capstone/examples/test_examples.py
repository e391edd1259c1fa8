"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what they report.
The hidden tests check more: agreement, sharding, reshuffling, scaling, the accuracy target, the checkpoint."""

from probes import PREFIX


def test_example_two_ranks_train(probe):
    run = probe("run", world_size=2, timeout_s=40.0)
    for r in run["ranks"]:
        assert not r["timed_out"] and not r["error"], f"rank {r['rank']}: {r['error'] or 'timed out'}"
        keys = sorted(k for k in r["state"] if not k.startswith(PREFIX))
        assert keys == ["val_accuracy"], f"rank {r['rank']} returned keys {keys}; expected ['val_accuracy']"
        print(f"rank {r['rank']} reports val_accuracy {r['state']['val_accuracy']['data'][0]:.4f}")
    ckpt = run["checkpoint"]
    assert ckpt["exists"], "no checkpoint file at checkpoint_path"
    assert not ckpt["load_error"], f"the checkpoint does not load into build_model(): {ckpt['load_error']}"
