"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    new_state = {}
    for key, value in state.items():
        if PREFIX in key:
            key = key.split(PREFIX, 1)[1]
        new_state[key] = value
    return new_state
