"""Hidden tests for unwrap_state_dict, using real nn.DataParallel checkpoints (DataParallel wraps on CPU too).

They run in the judge. `probe("unwrap", name)` builds the named checkpoint (see probes.py) in the
learner's process, calls unwrap_state_dict there and sends back data: the returned dict (tensors as
tensors), which input tensor each value is, and what became of the input. The judge builds the same
seeded models itself to know what the answer must be.
"""

import pytest
import torch
from probes import Net, Outer, sequential, trained_wrapped_net
from torch import nn


def _unwrap(probe, checkpoint, what):
    try:
        seen = probe("unwrap", checkpoint)
    except Exception as exc:  # the learner's bug, reported as feedback
        pytest.fail(f"unwrap_state_dict({what}) raised {type(exc).__name__}: {exc}")
    assert seen["is_dict"], (
        f"unwrap_state_dict({what}) returned a {seen['type']}; return a dict (or OrderedDict) "
        "mapping parameter names to tensors, as model.state_dict() does."
    )
    return seen


def _key_diff(got_keys, want_keys):
    extra = [k for k in got_keys if k not in want_keys]
    missing = [k for k in want_keys if k not in got_keys]
    return f"unexpected keys {extra[:5]}, missing keys {missing[:5]}"


def test_strips_dataparallel_prefix(probe):
    want = list(sequential().state_dict().keys())
    state_keys = [f"module.{k}" for k in want]
    got = _unwrap(probe, "wrapped_sequential", "nn.DataParallel(nn.Sequential(...)).state_dict()")["keys"]
    assert got == want, (
        f"for a DataParallel checkpoint with keys {state_keys} you returned keys {got}; "
        f"expected {want}, in the same order. nn.DataParallel stores the real model as its `.module` "
        "attribute, so every key starts with 'module.': remove that one leading 'module.'."
    )


def test_loads_into_plain_model_strict(probe):
    got = _unwrap(probe, "wrapped_net", "a DataParallel checkpoint")["result"]
    fresh = Net(seed=99)
    try:
        fresh.load_state_dict(got, strict=True)
    except (RuntimeError, TypeError, AttributeError) as exc:
        want = list(Net().state_dict().keys())
        pytest.fail(
            "plain_model.load_state_dict(unwrap_state_dict(checkpoint), strict=True) failed: "
            f"{_key_diff(list(got.keys()), want)}. Every key must match the plain model's names exactly; "
            f"the plain model expects {want}. PyTorch said: {str(exc).splitlines()[0]}"
        )
    wrapped = trained_wrapped_net()
    wrapped.eval()
    fresh.eval()
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want_out = wrapped(x)
        got_out = fresh(x)
    assert torch.allclose(got_out, want_out), (
        "the plain model loaded from your unwrapped checkpoint gives different outputs than the wrapped model "
        f"(max difference {float((got_out - want_out).abs().max()):.3g}); each tensor must stay under its own "
        "name, including BatchNorm buffers such as norm.running_mean."
    )


def test_names_containing_module_survive(probe):
    state_keys = list(trained_wrapped_net().state_dict().keys())
    want = list(Net().state_dict().keys())
    got = _unwrap(probe, "wrapped_net", "DataParallel(Net()).state_dict()")["keys"]
    wrong = [(k, g) for k, g, w in zip(state_keys, got, want, strict=False) if g != w]
    assert got == want, (
        f"some keys were renamed wrongly (checkpoint key -> your key): {wrong[:5]}; expected {want}. "
        "Only a 'module.' at the very start of a key comes from DataParallel. Names like 'submodule', "
        "'module_list' and 'decoder' belong to the model: do not use str.replace (it also hits "
        "'submodule.') or str.lstrip (it strips a set of characters, so 'decoder' loses its 'de'); "
        "use key.startswith('module.') then key[len('module.'):], or key.removeprefix('module.')."
    )


def test_plain_checkpoint_unchanged(probe):
    state = Net().state_dict()
    seen = _unwrap(probe, "plain_net", "Net().state_dict() (never wrapped)")
    got = seen["result"]
    assert list(got.keys()) == list(state.keys()), (
        f"a checkpoint from an unwrapped model came back with keys {list(got.keys())}; expected it unchanged: "
        f"{list(state.keys())}. Keys that do not start with 'module.' must be left alone, so the same "
        "function works for wrapped and plain checkpoints (check key.startswith('module.') before cutting)."
    )
    for key in state:
        assert isinstance(got[key], torch.Tensor) and torch.equal(got[key], state[key]), (
            f"the tensor under {key!r} changed; keep the values exactly as they were."
        )
    empty = _unwrap(probe, "empty", "{}")["result"]
    assert dict(empty) == {}, f"unwrap_state_dict({{}}) returned {dict(empty)!r}; expected an empty dict."


def test_strips_only_one_prefix(probe):
    state_keys = list(nn.DataParallel(Outer(seed=4)).state_dict().keys())
    got = _unwrap(probe, "wrapped_outer", "DataParallel(Outer()).state_dict()")["result"]
    want = ["module.weight", "module.bias", "head.weight", "head.bias"]
    assert list(got.keys()) == want, (
        f"the model has a child literally named 'module', so DataParallel saved keys {state_keys}; "
        f"you returned {list(got.keys())}, expected {want}. Remove exactly ONE leading 'module.' (the one "
        "DataParallel added); the second one is a real name inside the model."
    )
    fresh = Outer(seed=5)
    fresh.load_state_dict(got, strict=True)
    seen = _unwrap(probe, "mixed", "{'module.a': ..., 'b': ..., 'module.c': ...}")
    keys = seen["keys"]
    assert set(keys) == {"a", "b", "c"} and len(keys) == 3, (
        f"for keys ['module.a', 'b', 'module.c'] you returned keys {keys}; expected "
        "'a', 'b' and 'c': strip the prefix where it is present and keep other keys as they are."
    )
    carried = dict(zip(keys, seen["same_tensor_as"], strict=True))
    assert carried["b"] == "b" and carried["a"] == "module.a", (
        "each value must stay with its own key: 'module.a' -> 'a' keeps the same tensor, 'b' keeps its tensor."
    )


def test_input_not_mutated(probe):
    for what, checkpoint, state in (
        ("a DataParallel checkpoint", "wrapped_net", trained_wrapped_net().state_dict()),
        ("a plain checkpoint", "plain_net", Net().state_dict()),
    ):
        before_keys = list(state.keys())
        seen = _unwrap(probe, checkpoint, what)
        after_keys = seen["input_keys_after"]
        assert after_keys == before_keys, (
            f"after unwrap_state_dict({what}) the caller's dict has keys {after_keys[:4]}... instead of "
            f"{before_keys[:4]}...: do not rename keys in place (no pop/del/assignment on "
            "the input); build a new dict and return it."
        )
        assert seen["input_tensors_same_objects"], (
            f"unwrap_state_dict({what}) replaced tensors inside the caller's dict; leave the input untouched."
        )
        assert seen["input_values_unchanged"], (
            f"unwrap_state_dict({what}) changed tensor values inside the caller's dict; never modify them."
        )
        assert not seen["returned_input"], (
            f"unwrap_state_dict({what}) returned the very same dict object it was given; always return a new "
            "dict, so that later changes to one cannot silently change the other."
        )


def test_tensors_preserved(probe):
    state = trained_wrapped_net().state_dict()
    seen = _unwrap(probe, "wrapped_net", "a DataParallel checkpoint")
    got = seen["result"]
    assert len(got) == len(state), (
        f"the checkpoint had {len(state)} entries but you returned {len(got)}; keep every entry, "
        "including buffers like norm.num_batches_tracked."
    )
    for (old_key, old), (new_key, new), origin in zip(state.items(), got.items(), seen["same_tensor_as"], strict=False):
        assert isinstance(new, torch.Tensor), (
            f"{new_key!r} maps to a {type(new).__name__}; keep the tensors as they are."
        )
        same = origin == old_key or (new.dtype == old.dtype and new.shape == old.shape and torch.equal(new, old))
        assert same, (
            f"the tensor under {new_key!r} (was {old_key!r}) is not the original: dtype {new.dtype} vs "
            f"{old.dtype}, shape {tuple(new.shape)} vs {tuple(old.shape)}. Only the keys change; pass the "
            "values through untouched (no .float(), .clone() on another device, or re-creation)."
        )
