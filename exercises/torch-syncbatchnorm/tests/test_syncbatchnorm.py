"""Hidden tests for convert_bn and prepare. The expected answers are computed here from the same seeded
models (probes.make_net / make_bn), never by the probes."""

import pytest
import torch
from probes import fixed_input, make_bn, make_net
from torch import nn

BN_NAMES = ["bn", "block.bn", "head.2"]
_cache: dict = {}


def _seen(probe, name):
    if name not in _cache:
        try:
            _cache[name] = probe(name)
        except Exception as exc:
            _cache[name] = exc
    seen = _cache[name]
    if isinstance(seen, Exception):
        what = "prepare(model, wrap)" if name == "prepare" else "convert_bn(model)"
        pytest.fail(f"{what} raised {type(seen).__name__}: {seen}")
    return seen


def _converted(probe):
    seen = _seen(probe, "convert")
    if seen["types"] is None:
        pytest.fail(
            f"convert_bn(model) returned a {seen['returned']}, not a module. Return the converted model "
            "(nn.SyncBatchNorm.convert_sync_batchnorm returns it)."
        )
    return seen


def _expected_types() -> dict:
    return {
        name: ("SyncBatchNorm" if isinstance(m, nn.modules.batchnorm._BatchNorm) else type(m).__name__)
        for name, m in make_net().named_modules()
    }


def test_converts_top_level_bn(probe):
    types = _converted(probe)["types"]
    assert types.get("bn") == "SyncBatchNorm", (
        f"the model's own BatchNorm2d attribute `bn` is a {types.get('bn')} after convert_bn; expected "
        "SyncBatchNorm. nn.SyncBatchNorm.convert_sync_batchnorm(model) replaces every BatchNorm layer."
    )


def test_converts_nested_bn(probe):
    types = _converted(probe)["types"]
    left = {n: types.get(n) for n in BN_NAMES[1:] if types.get(n) != "SyncBatchNorm"}
    assert not left, (
        f"after convert_bn these nested layers are not SyncBatchNorm: {left}. BatchNorm layers hide inside "
        "blocks and Sequentials; looping over model.named_children() only sees the top level. "
        "nn.SyncBatchNorm.convert_sync_batchnorm(model) recurses through every submodule."
    )


def test_other_layers_unchanged(probe):
    types = _converted(probe)["types"]
    want = _expected_types()
    diff = {n: (types.get(n), want.get(n)) for n in sorted(set(types) | set(want)) if types.get(n) != want.get(n)}
    diff = {n: v for n, v in diff.items() if n not in BN_NAMES}
    assert not diff, (
        f"convert_bn changed more than the BatchNorm layers: (got, expected) by module name: "
        f"{dict(list(diff.items())[:5])}. Only BatchNorm*d layers become SyncBatchNorm; the rest of the model, "
        "and every module's name, stays as it was."
    )


def test_keeps_trained_parameters_and_statistics(probe):
    seen = _converted(probe)
    want = make_net().state_dict()
    got = seen["state"]
    if sorted(got) != sorted(want):
        pytest.fail(f"the converted model's state_dict keys changed: missing {sorted(set(want) - set(got))[:5]}, "
                    f"extra {sorted(set(got) - set(want))[:5]}.")
    bad = [k for k in want if not torch.allclose(got[k].double(), want[k].double(), atol=1e-6)]
    assert not bad, (
        f"after convert_bn these entries differ from the trained model: {bad[:6]} (e.g. {bad[0]}: got "
        f"{got[bad[0]].flatten()[:3].tolist()}, expected {want[bad[0]].flatten()[:3].tolist()}). A fresh "
        "nn.SyncBatchNorm(num_features) starts with weight 1, bias 0, running_mean 0 and running_var 1: the "
        "trained statistics are lost. convert_sync_batchnorm reuses the old layer's parameters and buffers."
    )


def test_eval_forward_unchanged(probe):
    seen = _converted(probe)
    want = make_net().eval()(fixed_input()).detach()
    got = seen["output"]
    assert got is not None and tuple(got.shape) == tuple(want.shape), (
        f"the converted model's eval-mode output has shape {None if got is None else tuple(got.shape)}, "
        f"expected {tuple(want.shape)}."
    )
    diff = float((got.double() - want.double()).abs().max())
    assert diff < 1e-5, (
        f"in eval mode the converted model's output differs from the original model's by up to {diff:.3g}. "
        "In eval mode SyncBatchNorm normalises with the running statistics, exactly like BatchNorm, so the "
        "outputs must match: keep the trained weights and running_mean/running_var."
    )
    assert seen.get("training") is True, (
        "the model was in training mode before convert_bn and is not afterwards; keep the mode as it was."
    )


def test_single_bn_layer(probe):
    seen = _seen(probe, "convert_single")
    assert seen["returned"] == "SyncBatchNorm", (
        f"convert_bn(nn.BatchNorm1d(3)) returned a {seen['returned']}; expected a SyncBatchNorm. When the model "
        "itself is a BatchNorm layer, convert_sync_batchnorm cannot change it in place: it returns a new module. "
        "Return the value convert_sync_batchnorm returns, not the argument."
    )
    want = make_bn().state_dict()
    bad = [k for k in want if k not in seen["state"] or not torch.allclose(seen["state"][k].double(), want[k].double())]
    assert not bad, f"convert_bn(BatchNorm1d) lost the layer's trained {bad[:4]}."


def test_prepare_converts_before_wrapping(probe):
    seen = _seen(probe, "prepare")
    if seen["calls"] == 0:
        pytest.fail("prepare(model, wrap) never called wrap; wrap the converted model with wrap(model).")
    at_wrap = seen["types_at_wrap"] or {}
    not_yet = {n: at_wrap.get(n) for n in BN_NAMES if at_wrap.get(n) != "SyncBatchNorm"}
    after = seen["types_after"] or {}
    converted_later = [n for n in not_yet if after.get(n) == "SyncBatchNorm"]
    if converted_later:
        pytest.fail(
            f"when wrap (DistributedDataParallel) received the model, {converted_later} were still plain BatchNorm; "
            "they were converted only after wrapping. Convert first, then wrap: DDP inspects the model it is given "
            "when it is constructed (it broadcasts its parameters and buffers and checks its SyncBatchNorm layers), "
            "and PyTorch's documentation says to convert before wrapping."
        )
    assert not not_yet, (
        f"when wrap received the model these layers were not SyncBatchNorm: {not_yet}. Call convert_bn first and "
        "pass its result to wrap."
    )


def test_prepare_wraps_once_and_returns_wrapper(probe):
    seen = _seen(probe, "prepare")
    assert seen["calls"] == 1, f"prepare called wrap {seen['calls']} times; wrap the model exactly once."
    assert seen["returned_wrapper"], (
        f"prepare returned a {seen['returned']}, not the object wrap returned. Return the wrapped model: that is "
        "what you train."
    )
