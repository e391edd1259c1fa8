"""Probes: build checkpoints next to the learner's code, call unwrap_state_dict, report only data.

The hidden tests import the models from here too (`from probes import Net`), so both sides build the
same, seeded checkpoints.
"""

from collections import OrderedDict

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


def sequential() -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def trained_wrapped_net() -> nn.DataParallel:
    """A DataParallel(Net) whose BatchNorm running stats have moved away from their defaults."""
    wrapped = nn.DataParallel(Net(seed=1))
    wrapped.train()
    with torch.no_grad():
        wrapped(torch.randn(16, 4, generator=torch.Generator().manual_seed(2)))
    return wrapped


def mixed() -> OrderedDict:
    return OrderedDict([("module.a", torch.zeros(1)), ("b", torch.ones(1)), ("module.c", torch.full((1,), 2.0))])


def mixed_plain_first() -> OrderedDict:
    """The same keys as mixed(), a key without the prefix first."""
    return OrderedDict([("b", torch.ones(1)), ("module.a", torch.zeros(1)), ("module.c", torch.full((1,), 2.0))])


CHECKPOINTS = {
    "wrapped_sequential": lambda: nn.DataParallel(sequential()).state_dict(),
    "wrapped_net": lambda: trained_wrapped_net().state_dict(),
    "plain_net": lambda: Net().state_dict(),
    "wrapped_outer": lambda: nn.DataParallel(Outer(seed=4)).state_dict(),
    "mixed": mixed,
    "mixed_plain_first": mixed_plain_first,
    "empty": dict,
}


def _storage(value) -> int:
    """The address of a tensor's memory (0 for anything else): a tensor made by .detach() has the input's."""
    if not isinstance(value, torch.Tensor):
        return 0
    try:
        return value.untyped_storage().data_ptr()
    except Exception:  # a tensor without ordinary storage
        return 0


def unwrap(submission, checkpoint):
    """Unwrap a named checkpoint; report the result and what happened to the input dict and its tensors."""
    state = CHECKPOINTS[checkpoint]()
    before = list(state.items())
    before_values = {k: v.clone() for k, v in state.items()}
    result = submission.unwrap_state_dict(state)
    is_dict = isinstance(result, dict)
    originals = {id(v): k for k, v in before}
    storages = {_storage(v): k for k, v in before if _storage(v)}
    return {
        "type": type(result).__name__,
        "is_dict": is_dict,
        "result": dict(result.items()) if is_dict else None,
        "keys": list(result.keys()) if is_dict else None,
        # For each returned key: the input key whose very tensor object it carries (None: a new object).
        "same_tensor_as": [originals.get(id(v)) for v in result.values()] if is_dict else None,
        # For each returned value that is a new object: the input key whose tensor's memory it shares (.detach(),
        # .data and views share it; .clone() and copy.deepcopy do not), else None.
        "shares_storage_with": [None if id(v) in originals else storages.get(_storage(v)) for v in result.values()]
        if is_dict
        else None,
        "returned_input": result is state,
        "input_keys_after": list(state.keys()),
        "input_tensors_same_objects": all(state.get(k) is v for k, v in before),
        "input_values_unchanged": all(k in state and torch.equal(state[k], v) for k, v in before_values.items()),
    }
