"""Visible examples: run them against your code before submitting. The hidden tests check more cases.

`submission.unwrap_state_dict(...)` runs your code in its own process: arguments and results travel as
data (tensors included), so compare keys and values, not object identity.
"""

from torch import nn


def test_example_wrapped_linear(submission):
    state = nn.DataParallel(nn.Linear(3, 2)).state_dict()  # keys: 'module.weight', 'module.bias'
    got = submission.unwrap_state_dict(state)
    assert list(got.keys()) == ["weight", "bias"], (
        f"unwrap_state_dict on keys {list(state.keys())} returned keys {list(got.keys())}; "
        "expected ['weight', 'bias']: remove the leading 'module.' that DataParallel added."
    )
    nn.Linear(3, 2).load_state_dict(got, strict=True)


def test_example_plain_checkpoint_unchanged(submission):
    state = nn.Linear(3, 2).state_dict()  # keys: 'weight', 'bias'
    got = submission.unwrap_state_dict(state)
    assert list(got.keys()) == ["weight", "bias"], (
        f"a plain checkpoint with keys ['weight', 'bias'] came back with keys {list(got.keys())}; "
        "keys without a leading 'module.' must stay as they are."
    )
