"""Hidden tests for tf-global-batch. They run in the judge (no TensorFlow here, only data).

The probes call the learner's functions with a real 2-replica MirroredStrategy ("mirrored"), a 1-replica
MirroredStrategy ("one") or a stand-in object whose only attribute is num_replicas_in_sync (a number).
The examples are `probes.data(n)`: row i of the features starts with i, so order and loss are visible.
"""

import pytest
from probes import data

FIX = ("The global batch is what one step takes across all replicas: "
       "per_replica_batch * strategy.num_replicas_in_sync.")


def _describe(replicas):
    if replicas == "mirrored":
        return "MirroredStrategy() with 2 replicas"
    if replicas == "one":
        return "MirroredStrategy(devices=['/cpu:0']) with 1 replica"
    return f"a strategy with num_replicas_in_sync == {replicas}"


def _expected_sizes(n, size):
    return [size] * (n // size) + ([n % size] if n % size else [])


def _batches(probe, n, per_replica, replicas):
    what = f"make_dataset(features[{n}], labels[{n}], per_replica_batch={per_replica}, {_describe(replicas)})"
    try:
        seen = probe("batches", n, per_replica, replicas)
    except Exception as exc:
        pytest.fail(f"{what} raised {type(exc).__name__}: {exc}")
    assert seen["is_dataset"], (
        f"{what} returned a {seen['type']}; return a tf.data.Dataset (e.g. tf.data.Dataset.from_tensor_slices("
        "(features, labels)).batch(...)), not a distributed dataset or a list."
    )
    bad = [b for b in seen["batches"] if "bad_element" in b]
    assert not bad, (
        f"{what} yields {bad[0]['bad_element']} elements; each element must be a (features, labels) pair: "
        "build it from_tensor_slices((features, labels))."
    )
    assert not seen["truncated"], (
        f"{what} yields more than 500 batches for {n} examples; it looks endless (a .repeat()?). Every example "
        "must appear exactly once."
    )
    return what, seen["batches"]


def test_global_batch_size(probe):
    for replicas, per_replica in [("mirrored", 16), ("one", 16), (4, 32), (8, 8)]:
        try:
            got = probe("global_size", per_replica, replicas)
        except Exception as exc:
            pytest.fail(f"global_batch_size({per_replica}, {_describe(replicas)}) raised {type(exc).__name__}: {exc}")
        n = 2 if replicas == "mirrored" else 1 if replicas == "one" else replicas
        want = per_replica * n
        assert got["value"] == want and got["type"] in ("int", "int64", "int32"), (
            f"global_batch_size({per_replica}, {_describe(replicas)}) returned {got['repr']}; expected {want}. "
            + FIX
            + (" Read the count from the strategy; do not hard-code 2." if got["value"] == per_replica * 2 else "")
        )


def test_batches_have_global_size(probe):
    what, got = _batches(probe, 100, 8, "mirrored")
    sizes = [len(b["y"]) for b in got]
    want = _expected_sizes(100, 16)
    assert sizes == want, (
        f"{what} gave batch sizes {sizes[:15]}; expected {want}: 2 replicas x 8 = 16 per batch, and the last "
        "4 examples in a smaller final batch. "
        + ("Batching by per_replica_batch gives each replica only half of that. " if sizes[:1] == [8] else "")
        + ("drop_remainder=True throws the last 4 examples away; keep them. " if sizes == want[:-1] else "")
        + FIX
    )


def test_follows_replica_count(probe):
    for replicas, per_replica, n in [("one", 8, 100), (4, 8, 100)]:
        k = 1 if replicas == "one" else replicas
        what, got = _batches(probe, n, per_replica, replicas)
        sizes = [len(b["y"]) for b in got]
        want = _expected_sizes(n, per_replica * k)
        assert sizes == want, (
            f"{what} gave batch sizes {sizes[:15]}; expected {want} ({per_replica} x {k} replicas). "
            "The same code must work on any number of devices: read strategy.num_replicas_in_sync instead of "
            "assuming 2."
        )


def test_keeps_every_example_in_order(probe):
    x, y = data(100)
    what, got = _batches(probe, 100, 8, "mirrored")
    rows = [row for b in got for row in b["x"]]
    labels = [label for b in got for label in b["y"]]
    ids = [int(round(r[0])) for r in rows]
    assert len(rows) == 100, (
        f"{what} yields {len(rows)} examples in all; expected all 100, each once. "
        + ("drop_remainder=True loses the examples of the last, partial batch. " if len(rows) < 100 else "")
        + ("Do not repeat the data here; the caller decides how many epochs to run. " if len(rows) > 100 else "")
    )
    assert ids == list(range(100)), (
        f"{what} yields the examples in the order {ids[:12]}...; expected 0, 1, 2, ... as given. Keep the order: "
        "shuffling is the caller's choice (it would shuffle before calling make_dataset, or with its own seed)."
    )
    assert labels == y.tolist(), (
        f"{what}: the labels no longer match their features (first labels {labels[:10]}, expected "
        f"{y.tolist()[:10]}). Slice features and labels together: from_tensor_slices((features, labels))."
    )
    for got_row, want_row in zip(rows, x.tolist()):
        assert all(abs(a - b) < 1e-6 for a, b in zip(got_row, want_row)), (
            f"{what} changed feature values (got {got_row}, expected {want_row}); batch them, do not transform them."
        )


def test_each_replica_gets_per_replica_batch(probe):
    what = "strategy.experimental_distribute_dataset(make_dataset(features[64], labels[64], 8, strategy))"
    try:
        shapes = probe("replica_shapes", 64, 8)
    except Exception as exc:
        pytest.fail(f"{what} with a 2-replica MirroredStrategy raised {type(exc).__name__}: {exc}")
    want = [[[8, 4], [8, 4]]] * 4
    assert shapes == want, (
        f"{what} gave per-replica feature shapes {shapes[:4]}; expected {want[0]} for each of 4 steps. "
        "experimental_distribute_dataset splits every batch you give it between the replicas, so batch by the "
        "global size for each replica to get per_replica_batch examples. " + FIX
    )


def _call_mine(submission, name):
    try:
        return getattr(submission, name)()
    except Exception as exc:
        pytest.fail(f"{name}() raised {type(exc).__name__}: {exc}")


def test_my_run(submission, params):
    n, gpus, per_replica = params["examples"], params["gpus"], params["batch_per_replica"]
    want_batch = per_replica * gpus
    want_steps = -(-n // want_batch)
    run = (f"your run (the numbers in your prompt; other learners have others) has {n} examples on {gpus} GPUs "
           f"with {per_replica} per replica")
    got = _call_mine(submission, "my_global_batch")
    assert got == want_batch, (
        f"my_global_batch() returned {got!r}; {run}, so one step takes {per_replica} x {gpus} = {want_batch} examples."
        + (" That is one replica's share, not the global batch." if got == per_replica else "")
    )
    got = _call_mine(submission, "my_steps_per_epoch")
    assert got == want_steps, (
        f"my_steps_per_epoch() returned {got!r}; {run}: batches of {want_batch}, every example once and the last "
        f"batch smaller, so ceil({n} / {want_batch}) = {want_steps} steps."
        + (f" {n} // {want_batch} leaves out the last, partial batch of {n % want_batch} examples: make_dataset "
           "keeps it, and it is a step too." if got == n // want_batch else "")
    )
