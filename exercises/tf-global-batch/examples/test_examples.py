"""Visible checks from the task's example; the graded tests try more sizes and strategies."""


def test_example_two_replicas(probe):
    assert probe("global_size", 16, "mirrored")["value"] == 32, (
        "global_batch_size(16, MirroredStrategy() with 2 replicas) should be 32."
    )
    seen = probe("batches", 10, 2, "mirrored")
    sizes = [len(b["y"]) for b in seen["batches"]]
    assert sizes == [4, 4, 2], f"make_dataset on 10 examples, per_replica_batch=2, 2 replicas gave sizes {sizes}."
