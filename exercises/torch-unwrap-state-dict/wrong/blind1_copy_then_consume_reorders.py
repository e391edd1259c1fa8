"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

from collections import OrderedDict

from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it."""
    new_state = OrderedDict(state)  # a copy: consume_... renames in place
    consume_prefix_in_state_dict_if_present(new_state, PREFIX)
    return new_state
