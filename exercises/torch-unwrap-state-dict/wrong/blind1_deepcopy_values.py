"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

import copy

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it."""
    # work on a full copy so that nothing the caller owns can be touched
    state = copy.deepcopy(state)
    new_state = {}
    for key, value in state.items():
        if key.startswith(PREFIX):
            key = key[len(PREFIX):]
        new_state[key] = value
    return new_state
