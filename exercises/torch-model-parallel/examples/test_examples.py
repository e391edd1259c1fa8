"""Visible examples: run them before submitting. The hidden tests check more (where each layer ran, the numbers,
training).

The grader gives your code two (virtual) GPUs. `probe(...)` builds the model in your code's process, calls
split_model (and train) and reports what happened as data.
"""


def test_example_halves_on_two_gpus(probe):
    seen = probe("placement")
    devices = seen["model_param_devices"]
    assert devices["0.weight"] == "cuda:0", f"model[0] is on {devices['0.weight']}, expected cuda:0"
    assert devices["6.weight"] == "cuda:1", f"model[6] is on {devices['6.weight']}, expected cuda:1"


def test_example_forward_returns_on_cuda1(probe):
    seen = probe("forward", rows=4)
    assert seen["error"] is None, f"pipe(x) for a batch on cuda:0 raised {seen['error']}"
    assert seen["output"]["device"] == "cuda:1", f"the output is on {seen['output']['device']}, expected cuda:1"
