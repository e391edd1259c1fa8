"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and prints what they report.
The hidden tests check more: agreement, sharding, reshuffling, scaling, the accuracy target, the checkpoint."""

import pytest
from probes import PREFIX
from runner import feedback


def test_example_two_ranks_train(probe):
    run = probe("run", world_size=2, timeout_s=40.0)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in run["ranks"]):
        feedback.fail(feedback.ranks(run["ranks"], what="train", timeout_s=40.0))
    for r in run["ranks"]:
        keys = sorted(k for k in r["state"] if not k.startswith(PREFIX))
        if keys != ["val_accuracy"]:
            pytest.fail(f"rank {r['rank']} returned keys {keys}; expected ['val_accuracy']")
        print(f"rank {r['rank']} reports val_accuracy {r['state']['val_accuracy']['data'][0]:.4f}")
    ckpt = run["checkpoint"]
    if not ckpt["exists"]:
        pytest.fail("no checkpoint file at checkpoint_path")
    if ckpt["load_error"]:
        feedback.fail(
            "the checkpoint does not load into a plain build_model()"
            + (f": missing keys {ckpt['missing'][:4]}, unexpected keys {ckpt['unexpected'][:4]}"
               if ckpt["load_error"] == "keys" else f" ({ckpt['load_error']} failed)"),
            details=ckpt["load_detail"],
        )
