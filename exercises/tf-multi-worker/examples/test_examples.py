"""Visible check: two workers finish, each with its own task index, and end with the same weights."""

import json


def test_example_two_workers_form_one_cluster(probe):
    seen = probe("run")
    for w in seen["workers"]:
        assert w["value"] is not None, f"worker {w['index']} gave no result: {w['error'] or w}"
    for index, notes in enumerate(seen["notes"]):
        made = [e for e in notes if e["kind"] == "strategy"]
        assert made and made[0]["tf_config"], f"worker {index} had no TF_CONFIG when it created the strategy"
        task = json.loads(made[0]["tf_config"])["task"]
        assert task == {"type": "worker", "index": index}, f"worker {index}'s TF_CONFIG task is {task}"
    w0, w1 = ([a["data"] for _, a in sorted(w["arrays"].items())] for w in seen["workers"])
    assert w0 == w1, "the two workers end with different weights"
