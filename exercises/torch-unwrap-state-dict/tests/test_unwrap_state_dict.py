"""Hidden tests for unwrap_state_dict, using real nn.DataParallel checkpoints (DataParallel wraps on CPU too)."""

from collections import OrderedDict

import pytest
import torch
from torch import nn


class Net(nn.Module):
    """A model whose own parameter names contain 'module', 'module_list' and letters that str.lstrip eats."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.submodule = nn.Linear(4, 8)
        self.module_list = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 6)])
        self.decoder = nn.Linear(6, 3)
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.submodule(x))
        for layer in self.module_list:
            x = torch.relu(layer(x))
        return self.norm(self.decoder(x))


class Outer(nn.Module):
    """A model with a child literally named 'module', as many wrapper classes have."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.module = nn.Linear(3, 3)
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.module(x)))


def _unwrap(submission, state, what):
    try:
        result = submission.unwrap_state_dict(state)
    except Exception as exc:  # the learner's bug, reported as feedback
        pytest.fail(f"unwrap_state_dict({what}) raised {type(exc).__name__}: {exc}")
    assert isinstance(result, dict), (
        f"unwrap_state_dict({what}) returned a {type(result).__name__}; return a dict (or OrderedDict) "
        "mapping parameter names to tensors, as model.state_dict() does."
    )
    return result


def _trained_wrapped_net():
    """A DataParallel(Net) whose BatchNorm running stats have moved away from their defaults."""
    wrapped = nn.DataParallel(Net(seed=1))
    wrapped.train()
    with torch.no_grad():
        wrapped(torch.randn(16, 4, generator=torch.Generator().manual_seed(2)))
    return wrapped


def _key_diff(got_keys, want_keys):
    extra = [k for k in got_keys if k not in want_keys]
    missing = [k for k in want_keys if k not in got_keys]
    return f"unexpected keys {extra[:5]}, missing keys {missing[:5]}"


def test_strips_dataparallel_prefix(submission):
    plain = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    state = nn.DataParallel(plain).state_dict()
    want = list(plain.state_dict().keys())
    got = _unwrap(submission, state, "nn.DataParallel(nn.Sequential(...)).state_dict()")
    assert list(got.keys()) == want, (
        f"for a DataParallel checkpoint with keys {list(state.keys())} you returned keys {list(got.keys())}; "
        f"expected {want}, in the same order. nn.DataParallel stores the real model as its `.module` "
        "attribute, so every key starts with 'module.': remove that one leading 'module.'."
    )


def test_loads_into_plain_model_strict(submission):
    wrapped = _trained_wrapped_net()
    got = _unwrap(submission, wrapped.state_dict(), "a DataParallel checkpoint")
    fresh = Net(seed=99)
    try:
        fresh.load_state_dict(got, strict=True)
    except RuntimeError as exc:
        want = list(Net().state_dict().keys())
        pytest.fail(
            "plain_model.load_state_dict(unwrap_state_dict(checkpoint), strict=True) failed: "
            f"{_key_diff(list(got.keys()), want)}. Every key must match the plain model's names exactly; "
            f"the plain model expects {want}. PyTorch said: {str(exc).splitlines()[0]}"
        )
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


def test_names_containing_module_survive(submission):
    state = _trained_wrapped_net().state_dict()
    want = list(Net().state_dict().keys())
    got = list(_unwrap(submission, state, "DataParallel(Net()).state_dict()").keys())
    wrong = [(k, g) for k, g, w in zip(state.keys(), got, want, strict=False) if g != w]
    assert got == want, (
        f"some keys were renamed wrongly (checkpoint key -> your key): {wrong[:5]}; expected {want}. "
        "Only a 'module.' at the very start of a key comes from DataParallel. Names like 'submodule', "
        "'module_list' and 'decoder' belong to the model: do not use str.replace (it also hits "
        "'submodule.') or str.lstrip (it strips a set of characters, so 'decoder' loses its 'de'); "
        "use key.startswith('module.') then key[len('module.'):], or key.removeprefix('module.')."
    )


def test_plain_checkpoint_unchanged(submission):
    net = Net()
    state = net.state_dict()
    got = _unwrap(submission, state, "Net().state_dict() (never wrapped)")
    assert list(got.keys()) == list(state.keys()), (
        f"a checkpoint from an unwrapped model came back with keys {list(got.keys())}; expected it unchanged: "
        f"{list(state.keys())}. Keys that do not start with 'module.' must be left alone, so the same "
        "function works for wrapped and plain checkpoints (check key.startswith('module.') before cutting)."
    )
    for key in state:
        assert got[key] is state[key] or torch.equal(got[key], state[key]), (
            f"the tensor under {key!r} changed; keep the values exactly as they were."
        )
    empty = _unwrap(submission, {}, "{}")
    assert dict(empty) == {}, f"unwrap_state_dict({{}}) returned {dict(empty)!r}; expected an empty dict."


def test_strips_only_one_prefix(submission):
    state = nn.DataParallel(Outer(seed=4)).state_dict()
    got = _unwrap(submission, state, "DataParallel(Outer()).state_dict()")
    want = ["module.weight", "module.bias", "head.weight", "head.bias"]
    assert list(got.keys()) == want, (
        f"the model has a child literally named 'module', so DataParallel saved keys {list(state.keys())}; "
        f"you returned {list(got.keys())}, expected {want}. Remove exactly ONE leading 'module.' (the one "
        "DataParallel added); the second one is a real name inside the model."
    )
    fresh = Outer(seed=5)
    fresh.load_state_dict(got, strict=True)
    tensor_a, tensor_b = torch.zeros(1), torch.ones(1)
    mixed = OrderedDict([("module.a", tensor_a), ("b", tensor_b), ("module.c", torch.full((1,), 2.0))])
    got_mixed = _unwrap(submission, mixed, "{'module.a': ..., 'b': ..., 'module.c': ...}")
    assert set(got_mixed.keys()) == {"a", "b", "c"} and len(got_mixed) == 3, (
        f"for keys ['module.a', 'b', 'module.c'] you returned keys {list(got_mixed.keys())}; expected "
        "'a', 'b' and 'c': strip the prefix where it is present and keep other keys as they are."
    )
    assert got_mixed["b"] is tensor_b and got_mixed["a"] is tensor_a, (
        "each value must stay with its own key: 'module.a' -> 'a' keeps the same tensor, 'b' keeps its tensor."
    )


def test_input_not_mutated(submission):
    for what, state in (
        ("a DataParallel checkpoint", _trained_wrapped_net().state_dict()),
        ("a plain checkpoint", Net().state_dict()),
    ):
        before_items = [(k, v) for k, v in state.items()]
        before_values = {k: v.clone() for k, v in state.items()}
        result = _unwrap(submission, state, what)
        after_keys = list(state.keys())
        assert after_keys == [k for k, _ in before_items], (
            f"after unwrap_state_dict({what}) the caller's dict has keys {after_keys[:4]}... instead of "
            f"{[k for k, _ in before_items][:4]}...: do not rename keys in place (no pop/del/assignment on "
            "the input); build a new dict and return it."
        )
        assert all(state[k] is v for k, v in before_items), (
            f"unwrap_state_dict({what}) replaced tensors inside the caller's dict; leave the input untouched."
        )
        assert all(torch.equal(state[k], before_values[k]) for k in before_values), (
            f"unwrap_state_dict({what}) changed tensor values inside the caller's dict; never modify them."
        )
        assert result is not state, (
            f"unwrap_state_dict({what}) returned the very same dict object it was given; always return a new "
            "dict, so that later changes to one cannot silently change the other."
        )


def test_tensors_preserved(submission):
    state = _trained_wrapped_net().state_dict()
    got = _unwrap(submission, state, "a DataParallel checkpoint")
    assert len(got) == len(state), (
        f"the checkpoint had {len(state)} entries but you returned {len(got)}; keep every entry, "
        "including buffers like norm.num_batches_tracked."
    )
    for (old_key, old), (new_key, new) in zip(state.items(), got.items(), strict=False):
        assert isinstance(new, torch.Tensor), (
            f"{new_key!r} maps to a {type(new).__name__}; keep the tensors as they are."
        )
        same = new is old or (new.dtype == old.dtype and new.shape == old.shape and torch.equal(new, old))
        assert same, (
            f"the tensor under {new_key!r} (was {old_key!r}) is not the original: dtype {new.dtype} vs "
            f"{old.dtype}, shape {tuple(new.shape)} vs {tuple(old.shape)}. Only the keys change; pass the "
            "values through untouched (no .float(), .clone() on another device, or re-creation)."
        )
