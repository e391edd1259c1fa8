"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it."""
    new_state = {}
    for key in sorted(state):
        new_key = key[len(PREFIX):] if key.startswith(PREFIX) else key
        new_state[new_key] = state[key]
    return new_state
