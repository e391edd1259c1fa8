"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    new_state = {}
    for key, value in state.items():
        if key.startswith(PREFIX):
            key = key[len(PREFIX):]
        # make sure no autograd history sneaks into the checkpoint
        new_state[key] = value.detach()
    return new_state
