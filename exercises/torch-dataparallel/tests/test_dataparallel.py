"""Hidden tests for make_parallel. They run in the judge; the learner's code runs in the subject with two
virtual CUDA devices (see probes.py). Probes report what happened; the expectations are computed here.
"""

import pytest
import torch
from probes import Net, batch

DP = "torch.nn.parallel.data_parallel.DataParallel"
ROWS = 6


def _probe(probe, name, **kwargs):
    try:
        return probe(name, **kwargs)
    except Exception as exc:  # the learner's exception, turned into feedback
        pytest.fail(f"make_parallel(Net()) raised {type(exc).__name__}: {exc}")


def _moves(seen):
    moves = [f"{what}: {src} -> {dst}" for what, src, dst in seen.get("moves", [])]
    return ", ".join(moves[:4]) if moves else "no move at all"


def _is_dp(seen):
    return DP in seen["mro"]


def _reference(sizes, rows=ROWS, seed=0):
    """What the learner's model computes for the chunks it really ran (DataParallel on two GPUs: two halves):
    each chunk through the model, outputs concatenated, gradients of all chunks summed into the one model
    (BatchNorm normalises each chunk on its own GPU). `sizes` are the observed chunk sizes, so this test does
    not depend on how the batch was split (test_batch_split_across_both_gpus grades that)."""
    net = Net(seed)
    x = batch(rows)
    if sum(sizes) != rows or not sizes:
        sizes = [len(c) for c in x.chunk(2)]
    out = torch.cat([net(part) for part in x.split(list(sizes))])
    out.sum().backward()
    return out.detach(), {n: p.grad.detach() for n, p in net.named_parameters()}


def test_returns_a_dataparallel(probe):
    seen = _probe(probe, "inspect")
    if _is_dp(seen):
        return
    if seen["is_model"]:
        pytest.fail(
            f"make_parallel returned your model itself ({seen['type']}), not wrapped. Moving a model to the GPU "
            "uses one GPU only; wrap it: nn.DataParallel(model) splits each batch across all GPUs."
        )
    if seen["claimed_type"].endswith("DataParallel"):
        pytest.fail(
            f"make_parallel returned a {seen['type']} that claims to be a {seen['claimed_type']} but is not one "
            "(its real type does not inherit from nn.DataParallel). Return torch.nn.DataParallel(model) "
            "(or an instance of a genuine subclass of it)."
        )
    pytest.fail(
        f"make_parallel returned a {seen['type']}; expected a torch.nn.DataParallel (type() must be "
        "nn.DataParallel or a real subclass of it). An object with `module` and `device_ids` attributes is not "
        "enough: only DataParallel's forward scatters the batch, replicates the model and gathers the outputs."
    )


def test_uses_every_gpu_and_gathers_on_cuda0(probe):
    seen = _probe(probe, "inspect")
    if not _is_dp(seen):
        pytest.fail(f"make_parallel returned a {seen['type']}, not an nn.DataParallel, so it uses no GPU list.")
    assert seen["device_ids"] == [0, 1] and seen["output_device"] == 0, (
        f"your DataParallel has device_ids={seen['device_ids']!r} and output_device={seen['output_device']!r}; "
        "with 2 visible GPUs it should use both, device_ids=[0, 1], and gather on output_device=0. "
        "Leave device_ids out (the default is every visible GPU) or pass [0, 1]; device_ids=[0] trains on one GPU."
    )


def test_parameters_and_buffers_on_first_gpu(probe):
    seen = _probe(probe, "inspect")
    devices = {**seen["param_devices"], **seen["buffer_devices"]}
    if not devices:
        pytest.fail(f"make_parallel returned a {seen['type']} with no parameters at all; return the wrapped model.")
    wrong = {n: d for n, d in devices.items() if d != "cuda:0"}
    if not wrong:
        return
    found = sorted(set(wrong.values()))
    if found == ["cpu"]:
        why = (
            "they are still on the CPU: nn.DataParallel does not move the model for you (with more than one "
            "device id), so move it with model.to('cuda:0') or model.cuda(), before or after wrapping"
        )
    else:
        why = (
            f"they are on {', '.join(found)}: DataParallel keeps the real model on device_ids[0], which is "
            "cuda:0 here (model.to('cuda') and model.cuda() mean cuda:0 too)"
        )
    names = ", ".join(f"{n} on {d}" for n, d in list(wrong.items())[:3])
    pytest.fail(
        f"all parameters and buffers must be on cuda:0 (device_ids[0]) but found {names}; {why}. "
        f"Moves your code made: {_moves(seen)}."
    )


def test_forward_on_cuda0_batch(probe):
    seen = _probe(probe, "forward", rows=ROWS, backward=False)
    if seen["error"]:
        err = seen["error"]
        pytest.fail(
            f"model(x) for a batch x of {ROWS} rows on cuda:0 raised {err['type']}: {err['message']} "
            "DataParallel checks before anything else that every parameter and buffer is on device_ids[0] "
            "(cuda:0); move the model there."
        )
    out = seen["output"]
    assert out["type"] == "Tensor", f"model(x) returned a {out['type']}, expected the model's output tensor."
    want, _ = _reference([n for _, n in seen['calls']])
    assert out["device"] == "cuda:0" and out["shape"] == [ROWS, 3], (
        f"model(x) for a batch of shape [{ROWS}, 4] on cuda:0 returned a tensor of shape {out['shape']} on "
        f"{out['device']}; expected shape [{ROWS}, 3] on cuda:0: DataParallel gathers the replicas' outputs on "
        "output_device, which defaults to device_ids[0]."
    )
    diff = float((out["values"] - want).abs().max())
    assert diff < 1e-5, (
        f"model(x) gave different numbers than your model run on each chunk of the batch (max difference "
        f"{diff:.3g}); make_parallel must wrap the model it was given, with its weights unchanged."
    )


def test_batch_split_across_both_gpus(probe):
    seen = _probe(probe, "forward", rows=ROWS, backward=False)
    if seen["error"]:
        pytest.fail(f"model(x) on a cuda:0 batch raised {seen['error']['type']}, so nothing ran on the GPUs.")
    calls = sorted(tuple(c) for c in seen["calls"])
    assert calls == [("cuda:0", 3), ("cuda:1", 3)], (
        f"a batch of {ROWS} rows reached your model as {calls} (device, rows); with DataParallel on 2 GPUs each "
        "GPU runs a copy of the model on its half of the batch: expected [('cuda:0', 3), ('cuda:1', 3)]. "
        + ("Your model ran once on the whole batch: it is not really wrapped in nn.DataParallel, or uses one GPU."
           if len(calls) == 1 else "")
    )


def test_gradients_reach_the_model_on_cuda0(probe):
    seen = _probe(probe, "forward", rows=ROWS, backward=True)
    if seen["error"] or seen.get("output", {}).get("type") != "Tensor":
        pytest.fail("model(x) on a cuda:0 batch did not return an output tensor, so no gradient could flow.")
    if seen.get("backward_error"):
        err = seen["backward_error"]
        pytest.fail(f"model(x).sum().backward() raised {err['type']}: {err['message']}")
    _, want = _reference([n for _, n in seen['calls']])
    for name, expected in want.items():
        got = seen["grads"].get(name)
        assert got is not None, (
            f"after model(x).sum().backward() the parameter {name} of the model you were given has no gradient; "
            "wrap that very model (not a copy) so the optimizer built on it trains."
        )
        assert got["device"] == "cuda:0", f"the gradient of {name} is on {got['device']}; expected cuda:0."
        diff = float((got["value"] - expected).abs().max())
        assert diff < 1e-4, (
            f"the gradient of {name} differs from the sum of the chunks. gradients by {diff:.3g}; DataParallel "
            "sums the replicas' gradients into the original model."
        )
