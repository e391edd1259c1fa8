"""Hidden tests for convert_bn and prepare. The expected answers are computed here from the same seeded
models (probes.make_net / make_layout / make_bn), never by the probes; the probes only report what they saw."""

import pytest
import torch
from probes import fixed_input, frozen_block_net, make_bn, make_layout, make_net
from runner import feedback
from torch import nn

BN_NAMES = ["bn", "block.bn", "head.2"]
KINDS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
WHAT = {
    "convert": "convert_bn(model)",
    "convert_layout": "convert_bn(model), on the second test model,",
    "convert_modes": "convert_bn(model), on a model in eval mode,",
    "convert_single": "convert_bn(bn), with bn a bare BatchNorm1d,",
    "prepare": "prepare(model, wrap)",
}
FRESH = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0, "num_batches_tracked": 0.0}
_cache: dict = {}


def _fail_raised(what: str, type_name: str, message: str, line: int | None) -> None:
    got = feedback.raised(what, type_name, message)
    text = got.message
    if got.cause == "device.no_cuda":
        text += " This grader has no GPU, and the task says not to move the model: leave it where it is."
    if line:
        text = text.rstrip(".") + f" (your code, line {line})."
    feedback.fail(text, details=got.details)


def _seen(probe, name):
    if name not in _cache:
        try:
            _cache[name] = probe(name)
        except Exception as exc:
            _cache[name] = exc
    seen = _cache[name]
    if isinstance(seen, Exception):
        type_name = getattr(seen, "type_name", type(seen).__name__)
        _fail_raised(WHAT[name], type_name, str(seen.args[0]) if seen.args else "", getattr(seen, "line", None))
    return seen


def _converted(probe, name="convert"):
    seen = _seen(probe, name)
    if seen["types"] is None:
        got = "None" if seen["returned"] == "None" else f"a {seen['returned']}"
        feedback.fail(
            f"{WHAT[name]} returned {got}, not a module. Return the converted model "
            "(nn.SyncBatchNorm.convert_sync_batchnorm returns it)."
        )
    return seen


# --- which BatchNorm layers a conversion reached, and why the others were missed --------------------------------


def _bn_records(model: nn.Module, types: dict, label: str) -> list[dict]:
    """Every BatchNorm layer of a freshly built `model`: its name, kind, the classes it sits in, what it became."""
    records = []
    for name, m in model.named_modules():
        if not isinstance(m, nn.modules.batchnorm._BatchNorm):
            continue
        parts = name.split(".")
        inside = [type(model.get_submodule(".".join(parts[:i]))).__name__ for i in range(1, len(parts))]
        got = types.get(name)
        records.append({"model": label, "name": name, "kind": type(m).__name__, "inside": inside,
                        "top": not inside, "got": got, "ok": got == "SyncBatchNorm"})
    return records


def _describe(rec: dict) -> str:
    where = "at the top level" if rec["top"] else "inside " + " > ".join(rec["inside"])
    now = "" if rec["ok"] or rec["got"] == rec["kind"] else (
        ", now missing" if rec["got"] is None else f", now a {rec['got']}"
    )
    return f"{rec['name']} ({rec['kind']} {where}{now})"


def _list(recs: list[dict], n: int = 4) -> str:
    text = ", ".join(_describe(r) for r in recs[:n])
    return text + (f" and {len(recs) - n} more" if len(recs) > n else "")


def _all_records(probe) -> tuple[list[dict], list[str]]:
    """BatchNorm records of the grader's Net and, when convert_bn handled it, of the second model; dotted keys."""
    seen = _converted(probe)
    records = _bn_records(make_net(), seen["types"], "Net")
    dotted = list(seen["dotted"])
    try:
        layout = _seen(probe, "convert_layout")
    except pytest.fail.Exception:
        layout = None
    if layout is not None and layout["types"] is not None:
        records += _bn_records(make_layout(), layout["types"], "Layout")
        dotted += layout["dotted"]
    return records, dotted


def _diagnosis(records: list[dict], dotted: list[str]) -> str:
    """Say what the conversion missed, naming a cause only where the observations single it out."""
    left = [r for r in records if not r["ok"]]
    done = [r for r in records if r["ok"]]
    if dotted:
        return (
            f"convert_bn registered new modules under dotted names ({', '.join(dotted[:4])}), and the layers really "
            f"at those places are still plain: {_list(left)}. setattr(model, \"block.bn\", layer) does not reach "
            "into model.block; it adds a new child whose name contains a dot. Set the attribute on the parent "
            "module (model.get_submodule(\"block\")), or let nn.SyncBatchNorm.convert_sync_batchnorm(model) do "
            "the replacing."
        )
    converted_kinds = {r["kind"] for r in done}
    missed_kinds = sorted({r["kind"] for r in left if r["top"]} - converted_kinds)
    if missed_kinds and converted_kinds:
        shown = [r for r in left if r["kind"] in missed_kinds]
        rest = [r for r in left if r["kind"] not in missed_kinds]
        text = (
            f"no {' or '.join(missed_kinds)} layer was converted, not even at the top level ({_list(shown)}), "
            f"while {' and '.join(sorted(converted_kinds))} layers were: the task covers BatchNorm1d, BatchNorm2d "
            "and BatchNorm3d. Check for all three kinds, or use nn.SyncBatchNorm.convert_sync_batchnorm, which "
            "converts every one."
        )
        return text + (f" Also not converted: {_list(rest)}." if rest else "")
    top_left = [r for r in left if r["top"]]
    nested_done = [r for r in done if not r["top"]]
    if left and not top_left and not nested_done:
        return (
            f"only the BatchNorm layers that are direct children of the model were converted, none inside a "
            f"submodule ({_list(left)}): the conversion never went below the top level. named_children() only "
            "sees the top level; recurse into every child module, or use "
            "nn.SyncBatchNorm.convert_sync_batchnorm(model), which recurses."
        )
    if left and not top_left:
        return (
            f"the conversion reached some nested BatchNorm layers ({_list(nested_done, 2)}) but not these: "
            f"{_list(left)}. It does not descend into every kind of submodule: recurse into every child module, "
            "whatever its class (a custom nn.Module, a Sequential, a ModuleList, a ModuleDict), or use "
            "nn.SyncBatchNorm.convert_sync_batchnorm(model)."
        )
    return (
        f"these BatchNorm layers are not SyncBatchNorm after convert_bn: {_list(left)}. "
        "nn.SyncBatchNorm.convert_sync_batchnorm(model) converts every BatchNorm1d/2d/3d, at any depth."
    )


def _check_converted(probe, chosen) -> None:
    records, dotted = _all_records(probe)
    if any(not r["ok"] for r in records if chosen(r)):
        feedback.fail(_diagnosis(records, dotted))


def test_converts_top_level_bn(probe):
    _check_converted(probe, lambda r: r["model"] == "Net" and r["name"] == "bn")


def test_converts_nested_bn(probe):
    _converted(probe, "convert_layout")
    _check_converted(probe, lambda r: not r["top"])


def test_converts_every_batchnorm_kind(probe):
    _converted(probe, "convert_layout")
    _check_converted(probe, lambda r: r["top"])


def _expected_types() -> dict:
    return {
        name: ("SyncBatchNorm" if isinstance(m, nn.modules.batchnorm._BatchNorm) else type(m).__name__)
        for name, m in make_net().named_modules()
    }


def test_other_layers_unchanged(probe):
    seen = _converted(probe)
    if seen["dotted"]:
        feedback.fail(
            f"convert_bn added modules to the model under dotted names ({', '.join(seen['dotted'][:4])}): "
            "setattr(model, \"block.bn\", layer) does not replace model.block.bn, it registers a new child whose "
            "name contains a dot. Set the attribute on the parent module (model.get_submodule(\"block\"))."
        )
    types = seen["types"]
    want = _expected_types()
    diff = {n: (types.get(n), want.get(n)) for n in sorted(set(types) | set(want)) if types.get(n) != want.get(n)}
    diff = {n: v for n, v in diff.items() if n not in BN_NAMES}
    if diff:
        shown = "; ".join(
            f"{n or 'the model itself'}: " + (f"a {got}" if got else "missing") + (f", expected a {exp}" if exp else
                                                                                    ", not in the original")
            for n, (got, exp) in list(diff.items())[:5]
        )
        feedback.fail(
            f"convert_bn changed more than the BatchNorm layers: {shown}. Only BatchNorm*d layers become "
            "SyncBatchNorm; the rest of the model, and every module's name, stays as it was."
        )


def test_keeps_layer_settings(probe):
    seen = _converted(probe, "convert_layout")
    got = seen.get("settings") or {}
    changed = []
    for name, m in make_layout().named_modules():
        if not isinstance(m, nn.modules.batchnorm._BatchNorm) or name not in got:
            continue  # a layer gone missing: the conversion tests say what became of it
        want = {key: getattr(m, key) for key in ("eps", "momentum", "affine", "track_running_stats")}
        diffs = [f"{key}={got[name][key]!r} instead of {want[key]!r}" for key in want if got[name][key] != want[key]]
        if diffs:
            changed.append(f"{name} ({', '.join(diffs)})")
    if changed:
        feedback.fail(
            f"convert_bn changed the settings of BatchNorm layers of the second test model, which has layers with "
            f"their own eps and momentum: {'; '.join(changed[:4])}. A new nn.SyncBatchNorm(num_features) takes the "
            "defaults (eps=1e-05, momentum=0.1, affine=True, track_running_stats=True). Give each new layer the old "
            "one's settings, nn.SyncBatchNorm(bn.num_features, bn.eps, bn.momentum, bn.affine, "
            "bn.track_running_stats), or let convert_sync_batchnorm copy them."
        )


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "]"


def _keys(keys: list[str], n: int = 6) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _state_problem(got: dict, want: dict) -> str | None:
    """Which trained entries the conversion lost, and how (a fresh layer's defaults, another entry's values)."""
    if sorted(got) != sorted(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        return (
            f"the converted model's state_dict keys changed: missing {_keys(missing) or 'none'}, extra "
            f"{_keys(extra) or 'none'}. Keep every layer's name and every parameter and buffer."
        )
    bad = [k for k in want if got[k].shape != want[k].shape
           or not torch.allclose(got[k].double(), want[k].double(), atol=1e-6)]
    if not bad:
        return None
    fresh = [k for k in bad if k.rsplit(".", 1)[-1] in FRESH and got[k].shape == want[k].shape
             and bool((got[k].double() == FRESH[k.rsplit(".", 1)[-1]]).all())]
    from_weight = [k for k in bad if k.endswith("bias") and (w := k[: -len("bias")] + "weight") in want
                   and got[k].shape == want[w].shape and torch.allclose(got[k].double(), want[w].double())]
    first = bad[0]
    example = (f"{first}: got {_fmt(got[first].double().flatten()[:3].tolist())}, trained "
               f"{_fmt(want[first].double().flatten()[:3].tolist())}")
    if from_weight and len(from_weight) == len(bad):
        return (
            f"after convert_bn these biases hold the trained layer's weight values, not its bias: {_keys(bad)}. "
            "Copy each entry from the entry of the same name (bias from bias), or let "
            "convert_sync_batchnorm reuse the old layer's parameters and buffers."
        )
    if len(fresh) == len(bad) and all(k.endswith(".num_batches_tracked") or k == "num_batches_tracked" for k in bad):
        return (
            f"after convert_bn the weights, biases and running statistics came over, but num_batches_tracked did "
            f"not: {_keys(bad)} ({example}). It is a buffer in the state dict that counts the batches the running "
            "statistics have seen, and a new nn.SyncBatchNorm starts it at 0. It matters: with momentum=None the "
            "running statistics are a cumulative average weighted by that count, and a checkpoint saved after the "
            "conversion would lose it. Copy it too (sync.num_batches_tracked = bn.num_batches_tracked), or let "
            "convert_sync_batchnorm reuse every parameter and buffer."
        )
    if len(fresh) == len(bad):
        entries = sorted({k.rsplit(".", 1)[-1] for k in bad})
        return (
            f"after convert_bn these entries still hold a fresh layer's defaults instead of the trained values: "
            f"{_keys(bad)} ({example}). A new nn.SyncBatchNorm(num_features) starts "
            "with weight 1, bias 0, running_mean 0, running_var 1 and num_batches_tracked 0: its "
            f"{', '.join(entries)} were not carried over, so the trained statistics are lost. Copy every "
            "parameter and buffer (sync.load_state_dict(bn.state_dict())), or let convert_sync_batchnorm reuse "
            "them."
        )
    return (
        f"after convert_bn these entries differ from the trained model: {_keys(bad)} "
        f"({example}). Every BatchNorm layer's weight, bias, running_mean, running_var and num_batches_tracked "
        "must come over unchanged; convert_sync_batchnorm reuses the old layer's parameters and buffers."
    )


def test_keeps_trained_parameters_and_statistics(probe):
    problem = _state_problem(_converted(probe)["state"], make_net().state_dict())
    if problem:
        feedback.fail(problem)


def test_eval_forward_unchanged(probe):
    seen = _converted(probe)
    want = make_net().eval()(fixed_input()).detach()
    got = seen["output"]
    if got is None or tuple(got.shape) != tuple(want.shape):
        feedback.fail(
            f"the converted model's eval-mode output has shape {None if got is None else tuple(got.shape)}, "
            f"expected {tuple(want.shape)}, as the original model's."
        )
    diff = float((got.double() - want.double()).abs().max())
    if diff >= 1e-5:
        lost = _state_problem(seen["state"], make_net().state_dict())
        why = (
            "Its parameters and buffers differ from the trained ones "
            "(test_keeps_trained_parameters_and_statistics says which), and in eval mode SyncBatchNorm "
            "normalises with exactly those, like BatchNorm."
            if lost else
            "Its parameters and buffers match the trained ones, so a layer's settings differ: each SyncBatchNorm "
            "must keep its BatchNorm's eps, momentum, affine and track_running_stats."
        )
        feedback.fail(
            f"in eval mode the converted model's output differs from the original model's by up to {diff:.3g}; "
            f"it must match. {why}"
        )


def test_keeps_training_mode(probe):
    seen = _seen(probe, "convert_modes")
    for case, model, said in (("eval", make_net().eval(), "a model in eval mode (model.eval())"),
                              ("mixed", frozen_block_net(),
                               "a model in training mode whose `block` is frozen in eval mode")):
        got = seen[case]
        if got["types"] is None:
            feedback.fail(f"convert_bn returned {got['returned']} for {said}, not a module.")
        want = {name: m.training for name, m in model.named_modules()}
        changed = [n for n in want if n in got["modes"] and got["modes"][n] != want[n]]
        if not changed:
            continue
        bn = [n for n in changed if isinstance(model.get_submodule(n) if n else model,
                                                nn.modules.batchnorm._BatchNorm)]
        shown = ", ".join(f"{n or 'the model itself'} ({'train' if want[n] else 'eval'} -> "
                          f"{'train' if got['modes'][n] else 'eval'})" for n in changed[:5])
        others = [n for n in changed if n not in bn]
        if not others:
            feedback.fail(
                f"convert_bn was given {said}, and the new SyncBatchNorm layers came back in another mode than the "
                f"BatchNorm layers they replace: {shown}. A freshly built module starts in training mode; give "
                "each new layer the old layer's mode (sync.train(bn.training)), as convert_sync_batchnorm does."
            )
        shown = ", ".join(f"{n or 'the model itself'} ({'train' if want[n] else 'eval'} -> "
                          f"{'train' if got['modes'][n] else 'eval'})" for n in others[:5])
        feedback.fail(
            f"convert_bn was given {said}, and modules that are not BatchNorm layers came back in another mode: "
            f"{shown}. Something set the mode of the whole model (for example a call to .train() or .eval()). "
            "Keep every module's training/eval mode as it was."
        )


def test_single_bn_layer(probe):
    seen = _seen(probe, "convert_single")
    if seen["returned"] != "SyncBatchNorm":
        got = "None" if seen["returned"] == "None" else f"a {seen['returned']}"
        if seen["is_input"] and seen["sync_called_on_input"]:
            feedback.fail(
                "convert_bn(bn), with bn a bare BatchNorm1d, called convert_sync_batchnorm on that layer, which "
                "returned a new SyncBatchNorm, but convert_bn returned the BatchNorm1d it was given. When the model "
                "itself is a BatchNorm layer, convert_sync_batchnorm cannot change it in place: it returns a new "
                "module. Return the value convert_sync_batchnorm returns, not the argument (Module.apply also "
                "throws away what its function returns)."
            )
        if seen["is_input"] and seen["bare2d"] == "SyncBatchNorm":
            feedback.fail(
                "convert_bn converts a bare BatchNorm2d, but returned a bare BatchNorm1d unchanged: the task covers "
                "BatchNorm1d, BatchNorm2d and BatchNorm3d. Check for all three kinds, or use "
                "nn.SyncBatchNorm.convert_sync_batchnorm."
            )
        if seen["is_input"]:
            feedback.fail(
                "convert_bn(bn), with bn a bare BatchNorm1d (a bare BatchNorm2d too), returned the very layer it was "
                "given, unconverted. When the model itself is a BatchNorm layer there is no parent to replace it "
                "in, so convert_bn must return a new SyncBatchNorm. Code that only replaces a module's children (a "
                "loop over named_children(), model.apply) never replaces the model itself; "
                "nn.SyncBatchNorm.convert_sync_batchnorm(bn) returns the new layer: return that."
            )
        feedback.fail(f"convert_bn(bn), with bn a bare BatchNorm1d, returned {got}; expected a SyncBatchNorm.")
    want = make_bn().state_dict()
    problem = _state_problem(seen["state"], want)
    if problem:
        feedback.fail(problem.replace("after convert_bn", "after convert_bn(bn) of a bare BatchNorm1d", 1))


# --- prepare ------------------------------------------------------------------------------------------------------


def _prepared(probe):
    seen = _seen(probe, "prepare")
    error = seen["error"]
    if error is None:
        return seen
    if error["in_ddp"] and seen["calls"] == 0:
        feedback.fail(
            f"prepare built a DistributedDataParallel itself instead of calling the wrap it was given, and "
            f"DistributedDataParallel raised {error['type']} (see details). Call wrap(converted_model) exactly "
            "once and return what it returns: the grader's wrap stands in for DDP (in real training it is "
            "functools.partial(DistributedDataParallel, device_ids=[rank])).",
            details=f"{error['type']}: {error['message']}",
        )
    _fail_raised(WHAT["prepare"], error["type"], error["message"], error["line"])


def _check_bare_prepare(bare: dict) -> None:
    """prepare(bn, wrap) for a bare BatchNorm1d: did wrap get what convert_bn returned, a new SyncBatchNorm?"""
    if bare.get("error") or not bare.get("calls") or bare.get("wrapped_type") == "SyncBatchNorm":
        return  # an error or a plain layer coming out of convert_bn itself: convert_bn's own tests say what is wrong
    if bare["wrapped_given"] and not bare["wrapped_converted"] and "SyncBatchNorm" in bare["converted_types"]:
        feedback.fail(
            "for the grader's Net, wrap received a converted model, but for a model that is itself a BatchNorm "
            "layer (prepare(bn, wrap), bn a bare BatchNorm1d) wrap received that very BatchNorm1d, while convert_bn "
            "had returned a new SyncBatchNorm: prepare wraps the model it was given and drops convert_bn's return "
            "value. That works for Net only because convert_sync_batchnorm replaces Net's layers in place and "
            "returns Net itself; a bare BatchNorm layer cannot be replaced in place. Pass convert_bn's return value "
            "to wrap: wrap(convert_bn(model))."
        )


def test_prepare_converts_before_wrapping(probe):
    seen = _prepared(probe)
    if seen["calls"] == 0:
        feedback.fail(
            f"prepare(model, wrap) returned {seen['returned']} without calling wrap; wrap the converted model "
            "with wrap(converted_model)."
        )
    at_wrap = seen["types_at_wrap"] or {}
    not_yet = {n: at_wrap.get(n) for n in BN_NAMES if at_wrap.get(n) != "SyncBatchNorm"}
    if not not_yet or (seen["convert_calls"] and seen["wrapped_converted"]):
        # wrap got convert_bn's result: the order is right (what convert_bn misses, its own tests say)
        _check_bare_prepare(seen.get("bare") or {})
        return
    after = seen["types_after"] or {}
    converted_later = [n for n in not_yet if after.get(n) == "SyncBatchNorm"]
    if converted_later:
        feedback.fail(
            f"when wrap (DistributedDataParallel) received the model, {', '.join(converted_later)} were still plain "
            "BatchNorm; "
            "they were converted only after wrapping. Convert first, then wrap: DDP inspects the model it is given "
            "when it is constructed (it broadcasts its parameters and buffers and checks its SyncBatchNorm layers), "
            "and PyTorch's documentation says to convert before wrapping."
        )
    layers = ", ".join(f"{n} ({t})" for n, t in not_yet.items())
    if seen["convert_calls"]:
        which = "the model prepare was given" if seen["wrapped_given"] else "another object"
        feedback.fail(
            f"prepare called convert_bn, but wrap received {which}, not what convert_bn returned, and its "
            f"BatchNorm layers were still plain: {layers}. Pass convert_bn's return value to wrap."
        )
    feedback.fail(
        f"prepare did not call convert_bn, and when wrap received the model these layers were not SyncBatchNorm: "
        f"{layers}. Convert first: pass convert_bn(model)'s result to wrap."
    )


def test_prepare_wraps_once_and_returns_wrapper(probe):
    seen = _prepared(probe)
    if seen["calls"] == 0:
        feedback.fail("prepare never called wrap; call wrap(converted_model) exactly once and return its result.")
    if seen["calls"] > 1:
        feedback.fail(
            f"prepare called wrap {seen['calls']} times. Every call builds a new wrapper (in real training another "
            "DistributedDataParallel around the same model): call it once, keep its result in a variable and "
            "return that."
        )
    if not seen["returned_wrapper"]:
        if seen["returned_wrapped_model"]:
            feedback.fail(
                "prepare returned the model it passed to wrap, not what wrap returned. Return the wrapper: that is "
                "what you train."
            )
        got = "None" if seen["returned"] == "None" else f"a {seen['returned']}"
        feedback.fail(f"prepare returned {got}, not the object wrap returned. Return the wrapper: that is what "
                      "you train.")
