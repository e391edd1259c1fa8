"""Visible check from the task's example; the graded tests try more sizes and input contexts."""


def test_example_global_batch_of_8_on_2_replicas(probe):
    seen = probe("batched", 16, 8)
    sizes = [[len(r["rows"]) for r in step] for step in seen["steps"]]
    assert sizes == [[4, 4], [4, 4]], (
        f"distribute_batched on 16 examples, global batch 8, 2 replicas: per step the replicas got {sizes}; "
        "expected [[4, 4], [4, 4]]."
    )
