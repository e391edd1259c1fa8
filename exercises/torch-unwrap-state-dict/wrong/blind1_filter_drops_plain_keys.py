"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it."""
    return {
        key[len(PREFIX):]: value
        for key, value in state.items()
        if key.startswith(PREFIX)
    }
