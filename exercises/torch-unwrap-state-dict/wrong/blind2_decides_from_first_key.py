"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    keys = list(state)
    wrapped = bool(keys) and keys[0].startswith(PREFIX)
    if not wrapped:
        return dict(state)
    return {key[len(PREFIX):]: value for key, value in state.items()}
