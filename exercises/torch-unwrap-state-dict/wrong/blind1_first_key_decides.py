"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it."""
    # a wrapped checkpoint has the prefix on every key, so look at the first one
    if not state or not next(iter(state)).startswith(PREFIX):
        return dict(state)
    return {key.removeprefix(PREFIX): value for key, value in state.items()}
