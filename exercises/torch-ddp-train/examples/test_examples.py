"""Visible example: runs your train() on 2 ranks (real processes, DDP over gloo) and checks the basics.
The hidden tests check more: sharded data, identical replicas, the loss, a trained model, cleanup."""

import pytest
import torch
from probes import PREFIX, dataset
from runner import feedback


def test_example_two_ranks_train(probe):
    runs = probe("run", world_size=2, timeout_s=40.0)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs):
        feedback.fail(feedback.ranks(runs, what="train", timeout_s=40.0))
    for r in runs:
        keys = sorted(k for k in r["state"] if not k.startswith(PREFIX))
        if keys != ["bias", "weight"]:
            pytest.fail(f"rank {r['rank']} returned keys {keys[:6]}; expected ['bias', 'weight']")
    x, y = dataset()
    w = torch.tensor(runs[0]["state"]["weight"]["data"]).reshape(1, 4)
    b = torch.tensor(runs[0]["state"]["bias"]["data"])
    print("rank 0 mean squared error:", float(((x @ w.T + b - y) ** 2).mean()))
