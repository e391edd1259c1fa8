"""Visible examples: run them before submitting. The hidden tests check more (devices, gradients, GPU use).

The grader gives your code two (virtual) GPUs: torch.cuda.device_count() is 2. `probe(...)` builds a small
model in your code's process, calls make_parallel and reports what happened as data.
"""


def test_example_wraps_in_dataparallel(probe):
    seen = probe("inspect")
    assert "torch.nn.parallel.data_parallel.DataParallel" in seen["mro"], (
        f"make_parallel returned a {seen['type']}; expected an nn.DataParallel."
    )


def test_example_forward_on_cuda0(probe):
    seen = probe("forward", rows=6, backward=False)
    assert seen["error"] is None, f"model(x) for a batch on cuda:0 raised {seen['error']}"
    assert seen["output"]["device"] == "cuda:0", f"the output is on {seen['output']['device']}, expected cuda:0"
