"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    new_state = {}
    for key, value in state.items():
        if key.startswith("module"):
            key = key[len(PREFIX):]
        new_state[key] = value
    return new_state
